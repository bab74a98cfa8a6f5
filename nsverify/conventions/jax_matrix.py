"""The JAX conventions matrix (``nsverify conventions --framework jax``): what JAX's AD returns at every kink and tie
of the registry, judged exactly as PyTorch's (:mod:`nsverify.conventions.judge`).

The registry entry of each op holds its JAX expression next to its torch function (``Elementwise.jax``,
``Selection.jax``); an op without one is listed by :func:`missing` with the entry's reason, never dropped. Each
case is evaluated on CPU in float16, bfloat16, float32 and float64 (``jax_enable_x64`` on) in four modes:

* ``grad``: ``jax.grad`` of ``sum(cotangent * op(x))``;
* ``jvp``: ``jax.jvp`` along every unit tangent (the forward-mode Jacobian row), plus the check against the exact
  one-sided directional derivatives;
* ``jit``: ``jax.jit(jax.grad(...))`` (XLA-compiled reverse mode);
* ``vmap``: ``jax.vmap(jax.grad(...))`` over a batch holding the input twice (both rows must agree).

The registry records PyTorch's rules, not JAX's: a JAX cell's ``expected`` is ``clarke`` (any element of the
Clarke set), its ``rule`` the candidate rule it equals, ``in_clarke`` the exact test against the registry's
Bouligand pieces. jax is imported only by :func:`require_jax`, never when nsverify or this module is imported."""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict
from fractions import Fraction
from typing import Callable, Sequence

from nsverify import registry
from nsverify.conventions.judge import CLARKE, directional_matches, judge
from nsverify.conventions.matrix import FRAMEWORK_MODES, SCHEMA, Case, Result, build_cases, differences, error_text
from nsverify.errors import InexactError, NsverifyError

MODES = FRAMEWORK_MODES["jax"]
DTYPES = ("float16", "bfloat16", "float32", "float64")
INSTALL_HINT = "pip install 'nsverify[jax]'"


class JaxMissingError(NsverifyError):
    """JAX is asked for but not installed."""


def require_jax():
    """jax, on CPU with 64-bit floats enabled; JaxMissingError naming the fix when it is not installed."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
    except ImportError as exc:
        raise JaxMissingError(f"--framework jax needs JAX, which is not installed here ({exc}): {INSTALL_HINT} "
                              "(or pip install 'jax[cpu]').") from None
    jax.config.update("jax_enable_x64", True)
    return jax


def versions() -> dict:
    """The installed jax and jaxlib versions."""
    jax = require_jax()
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None) or jaxlib.version.__version__}


def missing(ops: Sequence[str] | None = None) -> list[dict]:
    """The registry ops (of ``ops``, default all) without a JAX counterpart, each with the entry's reason."""
    without = {e.name for e in registry.select(jax=False)}
    wanted = [registry.get(n) for n in ops] if ops else registry.select()  # an unknown op raises UnknownOpError
    return [{"op": e.name, "reason": e.jax_note or "no JAX expression recorded in the registry"}
            for e in wanted if e.name in without]


def exact_array(values: Sequence, dtype: str, shape=None):
    """A jax array holding exactly ``values`` in ``dtype``; InexactError when one is not representable."""
    require_jax()
    import jax.numpy as jnp
    import numpy as np

    a = jnp.asarray(np.array([float(Fraction(v)) for v in values], dtype=np.float64)).astype(getattr(jnp, dtype))
    back = np.asarray(a.astype(jnp.float64)).tolist()
    for v, b in zip(values, back):
        if Fraction(b) != Fraction(v):
            raise InexactError(f"value {v} is not exactly representable in {dtype} (it rounds to {b}).")
    return a if shape is None else a.reshape(shape)


def _exact(a) -> list[Fraction]:
    import jax.numpy as jnp
    import numpy as np

    return [Fraction(v) for v in np.asarray(a.astype(jnp.float64)).flatten().tolist()]


def _scalar_fn(case: Case, dtype: str) -> Callable:
    import jax.numpy as jnp

    cot = None if case.cotangent is None else exact_array(case.cotangent, dtype)

    def f(x):
        y = case.fn(x)
        return jnp.sum(y * cot) if cot is not None else jnp.sum(y)
    return f


def derivative(case: Case, x, f, mode: str):
    """JAX's derivative of the case's scalar ``f`` at ``x`` in ``mode`` (an array shaped like x)."""
    jax = require_jax()
    import jax.numpy as jnp

    if mode == "grad":
        return jax.grad(f)(x)
    if mode == "jit":
        return jax.jit(jax.grad(f))(x)
    if mode == "vmap":
        g = jax.vmap(jax.grad(f))(jnp.stack([x, x]))
        if _exact(g[0]) != _exact(g[1]):
            raise NsverifyError(f"vmap gave two different derivatives for two copies of one input: {g}")
        return g[0]
    if mode == "jvp":
        n = x.size
        rows = []
        for i in range(n):
            e = jnp.zeros(n, x.dtype).at[i].set(1).reshape(x.shape)
            rows.append(jax.jvp(f, (x,), (e,))[1])
        return jnp.stack(rows).reshape(x.shape)
    raise NsverifyError(f"unknown JAX mode {mode!r}: choose from {', '.join(MODES)}.")


def evaluate_case(case: Case, dtype: str, mode: str) -> Result:
    """One cell: JAX's derivative of ``case`` in ``dtype`` and ``mode``, judged against the Clarke set."""
    jax = require_jax()
    try:
        x = exact_array(case.values, dtype, case.shape)
        f = _scalar_fn(case, dtype)
        vec = _exact(derivative(case, x, f, mode))
        v = judge(case, vec, dtype, None)
        res = Result(case.op, case.label, dtype, "cpu", mode, [float(a) for a in vec], v.rule, v.in_clarke, CLARKE,
                     v.as_expected, observed=v.observed)
        if mode == "jvp":
            def jvp(t):
                import jax.numpy as jnp

                tv = jnp.asarray([float(a) for a in t], x.dtype).reshape(x.shape)
                return Fraction(float(jax.jvp(f, (x,), (tv,))[1]))
            res.directional = directional_matches(case, x.size, jvp, dtype)
        return res
    except NsverifyError:
        raise
    except Exception as exc:  # a mode or an op that this JAX release refuses: recorded, the run goes on
        return Result(case.op, case.label, dtype, "cpu", mode, [], "error", "n/a", CLARKE, False,
                      error=error_text(exc))


def run_matrix(ops: Sequence[str] | None = None, dtypes: Sequence[str] = DTYPES, modes: Sequence[str] = MODES,
               progress: Callable | None = None) -> list[Result]:
    """The JAX matrix of ``ops`` (default: every registry op with a JAX counterpart) in this process."""
    require_jax()
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise NsverifyError(f"unknown JAX mode(s) {bad}: choose from {', '.join(MODES)}.")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise NsverifyError(f"JAX matrix dtypes {bad}: choose from {', '.join(DTYPES)}.")
    cases = build_cases(ops, framework="jax")
    out: list[Result] = []
    for i, dt in enumerate(dtypes, 1):
        for mode in modes:
            out += [evaluate_case(c, dt, mode) for c in cases]
        if progress:
            progress(f"{dt} on cpu: {len(cases)} cases x {len(modes)} modes (JAX)", i, len(dtypes))
    return out


def provenance(command: Sequence[str] | None = None) -> dict:
    """Where a JAX matrix was measured: jax and jaxlib versions, the CPU, UTC date, command, Python, platform."""
    import datetime

    return {**versions(), "x64": True, "devices": ["cpu"], "device_names": [platform.processor() or "cpu"],
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(command if command is not None else sys.argv),
            "python": platform.python_version(), "platform": platform.platform()}


def to_json(results: Sequence[Result], meta: dict | None = None, ops: Sequence[str] | None = None) -> dict:
    """The run in the conventions schema, with ``framework`` "jax", the jax version and the ops without a JAX
    counterpart (``missing``)."""
    return {"schema": SCHEMA, "framework": "jax", "jax": versions()["jax"], "meta": meta or {},
            "results": [asdict(r) for r in results], "differences": differences(results),
            "unexpected": [asdict(r) for r in results if not r.as_expected], "missing": missing(ops),
            "crashed": [], "batch_crashes": []}
