"""JAX's ``jax.grad`` and ``jax.jit`` of the compiled-programs table (issue 37, "and JAX's jit of the same program").

Every :class:`~nsverify.conventions.programs.Program` of the table carries its JAX twin (``Program.jax``): the same
function of the same flat input, written with ``jax.numpy``/``jax.lax`` (``Program.jax_note`` names what stands in
where JAX has no op of the torch program's: ``jnp.max(axis)`` for ``max(dim)``, ``.at[].max`` for
``index_reduce``, the documented formula for the margin losses and ``normalize``). ``tests/test_programs_jax.py``
checks that each twin computes the torch program's values at the point and next to it, in every piece.

Two modes, on CPU: ``jax_grad`` (``jax.grad``, eager: each primitive dispatched on its own) and ``jax_jit``
(``jax.jit(jax.grad(f))``: the whole reverse pass compiled and fused by XLA). The point is exact in the dtype
(float32, bfloat16, float16; float64 with ``jax_enable_x64`` switched on for that cell only, then restored), and
every gradient is judged by the same exact test as the torch cells
(:func:`nsverify.conventions.programs.judge_gradient`, against the same hand-derived Clarke set).

Findings (:func:`findings`, in the shape of :func:`nsverify.conventions.programs.program_findings`, which hands
the JAX cells here): per program, a JAX cell outside the Clarke set, or ``jax_grad`` and ``jax_jit`` returning
different gradients in one dtype (XLA's compilation changes the answer). A difference between JAX and PyTorch, or
between dtypes, is not a finding: each framework's rule at a tie is its own convention, and both are judged against
the Clarke set. Each finding carries a standalone JAX reproduction script (:func:`jax_script`) and the jax version.

jax is imported only when a JAX cell is evaluated (it is the optional extra ``nsverify[jax]``); the cells run in
this process (no crash isolation: XLA on CPU compiles these small programs in well under a second)."""
from __future__ import annotations

import inspect
import os
import textwrap
from contextlib import contextmanager
from fractions import Fraction
from typing import Sequence

from nsverify.errors import BadArgumentError, InexactError, NsverifyError

#: the JAX modes of the programs; ``programs.MODES`` lists them after the torch modes
MODES = ("jax_grad", "jax_jit")
DTYPES = ("float16", "bfloat16", "float32", "float64")


def import_jax():
    """jax on CPU (``JAX_PLATFORMS=cpu`` unless set); JaxMissingError naming the fix when it is not installed. The
    x64 flag is left as it is: :func:`x64` sets it per cell."""
    from nsverify.conventions.jax_matrix import INSTALL_HINT, JaxMissingError

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
    except ImportError as exc:
        raise JaxMissingError(f"the JAX program modes ({', '.join(MODES)}) need JAX, which is not installed here "
                              f"({exc}): {INSTALL_HINT} (or pip install 'jax[cpu]').") from None
    return jax


def available() -> bool:
    """Is jax importable here?"""
    try:
        import_jax()
    except NsverifyError:
        return False
    return True


def jax_version() -> str:
    return import_jax().__version__


@contextmanager
def x64(enabled: bool):
    """``jax_enable_x64`` set to ``enabled`` inside the block, restored after it."""
    jax = import_jax()
    before = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", bool(enabled))
    try:
        yield jax
    finally:
        jax.config.update("jax_enable_x64", before)


def point(program, dtype: str):
    """The program's point as a jax array of ``dtype``; InexactError when a value is not representable (call it
    inside :func:`x64` for float64)."""
    import jax.numpy as jnp
    import numpy as np

    vals = [Fraction(v) for v in program.inputs]
    a = np.array([float(v) for v in vals], dtype=np.float64).astype(getattr(jnp, dtype))
    back = a.astype(np.float64).tolist()
    for v, b in zip(vals, back):
        if Fraction(b) != v:
            raise InexactError(f"program {program.name!r}: input {v} is not exactly representable in {dtype} (it "
                               f"rounds to {b}).")
    return jnp.asarray(a)


def gradient(program, x, mode: str):
    """JAX's gradient of the program's twin at ``x`` in ``mode``."""
    import jax

    if mode == "jax_grad":
        return jax.grad(program.jax)(x)
    if mode == "jax_jit":
        return jax.jit(jax.grad(program.jax))(x)
    raise BadArgumentError(f"unknown JAX program mode {mode!r}: choose from {', '.join(MODES)}.")


def evaluate(program, dtype: str, mode: str):
    """One JAX cell (a :class:`~nsverify.conventions.programs.Cell`, device "cpu"), judged exactly."""
    import numpy as np

    from nsverify.conventions import programs as P
    from nsverify.conventions.matrix import error_text

    if dtype not in DTYPES:
        raise BadArgumentError(f"JAX program dtype {dtype!r}: choose from {', '.join(DTYPES)}.")
    if mode not in MODES:
        raise BadArgumentError(f"unknown JAX program mode {mode!r}: choose from {', '.join(MODES)}.")
    extra = {"framework": "jax", "jax": jax_version()}
    if program.jax_note:
        extra["twin"] = program.jax_note
    if program.jax is None:
        return P.Cell(program.name, dtype, "cpu", mode, [], "not_run", "n/a",
                      error=f"no JAX twin: {program.jax_note or 'none written'}", extra=extra)
    with x64(dtype == "float64"):
        x = point(program, dtype)
        try:
            vals = np.asarray(gradient(program, x, mode)).astype(np.float64).flatten().tolist()
        except NsverifyError:
            raise
        except Exception as exc:  # JAX refuses the program in this dtype/mode: recorded, the run goes on
            return P.Cell(program.name, dtype, "cpu", mode, [], "error", "n/a", error=error_text(exc), extra=extra)
    return P.judged_cell(program, dtype, "cpu", mode, vals, extra)


def evaluate_batch(programs: Sequence, dtype: str, mode: str) -> list:
    return [evaluate(p, dtype, mode) for p in programs]


def run(names: Sequence | None = None, dtypes: Sequence[str] = ("float32",), modes: Sequence[str] = MODES) -> list:
    """The JAX cells of the programs (all when ``names`` is None) in ``dtypes`` and ``modes``, on CPU."""
    from nsverify.conventions import programs as P

    return P.run_programs(names, dtypes, ["cpu"], modes)


# ----------------------------------------------------------------------------------------------------------
# findings and scripts
# ----------------------------------------------------------------------------------------------------------
def _measured(c) -> bool:
    return c.piece not in ("error", "crashed", "not_run")


def findings(cells: Sequence, script_dir=None) -> list[dict]:
    """The JAX findings of ``cells`` (:class:`~nsverify.conventions.programs.Cell` records of the JAX modes): per
    program, a cell outside the Clarke set, or jax_grad and jax_jit disagreeing in one dtype. The shape of
    :func:`nsverify.conventions.programs.program_findings`' records, with ``framework`` "jax" and ``jax`` (the
    version); ``first_release`` is the jax release measured."""
    from nsverify.conventions import programs as P

    by: dict = {}
    for c in cells:
        by.setdefault(c.program, []).append(c)
    out = []
    for name, cs in by.items():
        measured = [c for c in cs if _measured(c)]
        outside = [c for c in measured if c.in_clarke == "no"]
        cell = {(c.dtype, c.mode): c for c in measured}
        split = [dt for dt in dict.fromkeys(c.dtype for c in measured)
                 if (dt, "jax_grad") in cell and (dt, "jax_jit") in cell
                 and cell[(dt, "jax_grad")].gradient != cell[(dt, "jax_jit")].gradient]
        if not outside and not split:
            continue
        p = P.get(name)
        version = next((c.extra.get("jax") for c in cs if c.extra.get("jax")), None) or "unknown"
        dtype = (outside or [cell[(split[0], "jax_jit")]])[0].dtype
        modes = [m for m in MODES if any(c.mode == m for c in cs)]
        script = jax_script(p, dtype, modes)
        cause = None
        if split:
            cause = ("XLA's compilation (jax.jit of jax.grad differs from eager jax.grad) in "
                     + ", ".join(f"{dt}/jax_jit" for dt in split))
        finding = {
            "kind": "outside_clarke" if outside else "modes_disagree", "program": name, "device": "cpu",
            "framework": "jax", "jax": version, "sample": P.finding_sample(p), "cells": P.cell_groups(measured),
            "crashed": [], "cause": cause, "first_release": version, "repro_script": script,
        }
        if p.jax_note:
            finding["sample"]["jax_twin"] = p.jax_note
        if script_dir is not None:
            finding["repro"] = str(P.write_script(p, dtype, "cpu", modes, script_dir, text=script,
                                                  stem=f"program_{p.name}_{dtype}_jax"))
        out.append(finding)
    return out


def _helpers(src: str) -> list:
    """The module-level helpers a twin's source calls (and theirs)."""
    from nsverify.conventions import programs as P

    names = ("_jk", "_jscatter_amax", "_jmaxpool", "_jconv", "_jscores")
    return [getattr(P, n) for n in names if n + "(" in src]


def jax_script(program, dtype: str, modes: Sequence[str] = MODES, head: str = "") -> str:
    """A standalone script (jax and numpy only) evaluating the program's JAX twin at its point in ``modes`` and
    printing the jax version, each gradient and the piece it equals."""
    if program.jax is None:
        raise BadArgumentError(f"program {program.name!r} has no JAX twin ({program.jax_note}): no JAX script.")
    src = inspect.getsource(program.jax)
    body = "\n\n".join(textwrap.dedent(inspect.getsource(h)) for h in _helpers(src) + [program.jax])
    from nsverify.conventions.programs import _A

    consts = "_A = " + repr(_A) + "\n" if "_A" in src else ""
    pieces = {q.label: [str(g) for g in q.gradient] for q in program.pieces}
    lines = [
        f'"""nsverify program {program.name} (JAX twin): {program.where}.',
        f"Clarke set at the point: the convex hull of {pieces}.",
        (f"The twin: {program.jax_note}.\n" if program.jax_note else "") + ((head + "\n") if head else ""),
        'Measured with nsverify.conventions.programs_jax."""',
        "import os", 'os.environ.setdefault("JAX_PLATFORMS", "cpu")', "from fractions import Fraction", "",
        "import jax", "import jax.numpy as jnp", "import numpy as np", "",
        f'jax.config.update("jax_enable_x64", {dtype == "float64"})', "", consts + body, "",
        f"x = jnp.asarray(np.array({[float(v) for v in program.inputs]!r}, dtype=np.float64).astype(jnp.{dtype}))",
        f"f = {program.jax.__name__}",
        'MODES = {"jax_grad": lambda: jax.grad(f)(x), "jax_jit": lambda: jax.jit(jax.grad(f))(x)}',
        f"PIECES = {pieces!r}", 'print(f"jax {jax.__version__}, {x.dtype}")', "",
        "for mode in " + repr(list(modes)) + ":",
        "    vals = np.asarray(MODES[mode]()).astype(np.float64).flatten().tolist()",
        "    if not all(np.isfinite(vals)):",
        '        print(f"{mode:10s} {vals}  NOT FINITE: outside the Clarke set")',
        "        continue",
        "    vals = [Fraction(v) for v in vals]",
        "    piece = [k for k, p in PIECES.items() if [Fraction(v) for v in p] == vals]",
        '    print(f"{mode:10s} {[str(v) for v in vals]}  piece: {piece[0] if piece else \'none (hull or outside)\'}")',
        "",
    ]
    return "\n".join(lines)


def summary(cells: Sequence) -> str:
    """One line: the JAX cells, how many are outside the Clarke set, how many jax_grad/jax_jit pairs disagree."""
    jc = [c for c in cells if c.mode in MODES]
    if not jc:
        return ""
    version = next((c.extra.get("jax") for c in jc if c.extra.get("jax")), "?")
    by = {(c.program, c.dtype, c.mode): c for c in jc if _measured(c)}
    pairs = [(k[0], k[1]) for k in by if k[2] == "jax_grad" and (k[0], k[1], "jax_jit") in by]
    split = sum(by[(n, d, "jax_grad")].gradient != by[(n, d, "jax_jit")].gradient for n, d in pairs)
    return (f"JAX {version}: {len(jc)} cells, {sum(c.in_clarke == 'no' for c in jc)} outside the Clarke set, "
            f"{sum(not _measured(c) for c in jc)} refused or without a twin, {split} of {len(pairs)} "
            "jax_grad/jax_jit pairs disagree")


def _register() -> None:
    import sys

    from nsverify.conventions import programs as P

    P.JAX_BACKEND = sys.modules[__name__]


_register()
