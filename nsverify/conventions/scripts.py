"""Standalone scripts of one cell of the conventions matrix, ready to paste into a bug report: torch only (or jax
only), the exact input of the registry case, the cotangent, the op call and the mode, printing the derivative
(:func:`cell_script`). A cell that crashed its process gets one with the crash in its header
(:func:`write_crash_repro`, for :mod:`nsverify.conventions.isolation`); a change between torch releases gets one
with the values the recorded releases gave (:func:`nsverify.conventions.releases.change_script`).

It sits below the matrix, which writes a crashed cell's script with it: it imports the registry and the Inductor
cache (:mod:`nsverify.conventions.inductor`) only."""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from pathlib import Path

from nsverify import registry
from nsverify.conventions.inductor import capability_cache_dir

_MODE_CODE = {
    "eager": "xr = x.clone().requires_grad_(True)\n(g,) = torch.autograd.grad(f(xr), xr)",
    "func": "g = torch.func.grad(f)(x)",
    "jvp": ("rows = []\nfor i in range(x.numel()):\n    e = torch.zeros(x.numel(), dtype=x.dtype)\n    e[i] = 1\n"
            "    rows.append(torch.func.jvp(f, (x,), (e.reshape(x.shape),))[1])\n"
            "g = torch.stack(rows)  # forward mode: the jvp along each unit tangent"),
    "compile": ("fc = torch.compile(f)\nxr = x.clone().requires_grad_(True)\n(g,) = torch.autograd.grad(fc(xr), xr)"),
}


def _qualified(obj) -> str | None:
    """``torch.relu``, ``torch.nn.functional.hardtanh``: the import path of a torch function, else None."""
    mod, name = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
    if not name:
        return None
    import torch

    for path, ns in (("torch", torch), ("torch.nn.functional", torch.nn.functional)):
        if getattr(ns, name, None) is obj:
            return f"{path}.{name}"
    if mod and mod.startswith("torch"):
        return f"{mod}.{name}"
    return None


def _value_code(name: str, value) -> str:
    """An assignment re-creating a free variable of the op's function in the script."""
    import torch

    if value is torch:
        return f"{name} = torch"
    if value is torch.nn.functional:
        return f"{name} = torch.nn.functional"
    q = _qualified(value)
    if q:
        return f"{name} = {q}"
    if isinstance(value, (int, float, str, bool, tuple, list, dict, type(None))):
        return f"{name} = {value!r}"
    raise ValueError(f"cannot write {name} = {value!r} into a script")


def _lambda_source(fn) -> str:
    """The source text of a lambda (found in its module by line and the names it uses)."""
    code = fn.__code__
    tree = ast.parse(inspect.getsource(inspect.getmodule(fn)))
    names = set(code.co_names) | set(code.co_freevars) | set(code.co_varnames)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno:
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            used |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            args = [a.arg for a in node.args.args]
            if args == list(code.co_varnames[:code.co_argcount]) and used <= names | set(args):
                hits.append(node)
    if len(hits) != 1:
        raise ValueError(f"cannot locate the source of {fn}")
    return ast.unparse(hits[0])


def op_code(fn, kwargs: dict) -> str:
    """Script lines defining ``op(t)``: the registry's torch function with its keyword arguments."""
    q = _qualified(fn)
    kw = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    if q:
        return f"def op(t):\n    return {q}(t{kw})"
    if fn.__name__ == "<lambda>":
        lines = []
        import torch

        free = list(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
        free += [(n, fn.__globals__[n]) for n in fn.__code__.co_names
                 if n in fn.__globals__ and isinstance(fn.__globals__[n], types.ModuleType)]
        for name, value in free:
            if not (name == "torch" and value is torch):  # the script imports torch itself
                lines.append(_value_code(name, value))
        lines.append(f"fn = {_lambda_source(fn)}")
        lines.append(f"def op(t):\n    return fn(t{kw})")
        return "\n".join(dict.fromkeys(lines))
    src = textwrap.dedent(inspect.getsource(fn))
    return f"{src.rstrip()}\n\n\ndef op(t):\n    return {fn.__name__}(t{kw})"


def _case(op: str, label: str):
    e = registry.get(op)
    if e.kind == "elementwise":
        i = next(i for i in range(len(e.breakpoints)) if e.kink_label(i) == label)
        return e.torch_fn, dict(e.kwargs), (e.breakpoints[i],), (1,), None
    c = next(c for c in e.cases if c.label == label)
    return e.torch_fn, dict(c.extra), c.values, c.shape, c.cotangent


_JAX_MODE_CODE = {
    "grad": "g = jax.grad(f)(x)",
    "jit": "g = jax.jit(jax.grad(f))(x)",
    "vmap": "g = jax.vmap(jax.grad(f))(jnp.stack([x, x]))[0]",
    "jvp": ("g = jnp.stack([jax.jvp(f, (x,), (jnp.zeros(x.size, x.dtype).at[i].set(1).reshape(x.shape),))[1]\n"
            "               for i in range(x.size)])  # forward mode: the jvp along each unit tangent"),
}


def jax_cell_script(op: str, label: str, dtype: str, mode: str, head: str) -> str:
    """A standalone script evaluating one cell of the JAX matrix: jax only (CPU, x64 on), the registry's JAX
    expression of the op, printing the derivative."""
    e = registry.get(op)
    _, extra, values, shape, cot = _case(op, label)
    vals = ", ".join(str(float(v)) for v in values)
    names = "".join(f"{k} = {v!r}\n" for k, v in extra.items())
    cot_line = "c = None" if cot is None else f"c = jnp.array([{', '.join(str(float(v)) for v in cot)}], jnp.{dtype})"
    return "\n".join([
        head, "import os", "", 'os.environ.setdefault("JAX_PLATFORMS", "cpu")', "", "import jax  # noqa: E402",
        "import jax.numpy as jnp  # noqa: E402", "from jax import lax  # noqa: E402", "",
        'jax.config.update("jax_enable_x64", True)', names,
        f"x = jnp.array([{vals}], jnp.float64).astype(jnp.{dtype}).reshape({tuple(shape)!r})", cot_line, "", "",
        "def op(x):  # the registry's JAX expression", f"    return {e.jax}", "", "",
        "def f(t):", "    y = op(t)", "    return jnp.sum(y * c) if c is not None else jnp.sum(y)", "", "",
        _JAX_MODE_CODE[mode], 'print("jax", jax.__version__, "derivative:", g.flatten().tolist())', ""])


def cell_script(op: str, label: str, dtype: str, mode: str, head: str, framework: str = "torch") -> str:
    """A standalone script evaluating one cell of the matrix (its op, case, dtype and mode), after the comment
    block ``head``: torch only (or jax only, :func:`jax_cell_script`), printing the derivative."""
    if framework == "jax":
        return jax_cell_script(op, label, dtype, mode, head)
    fn, kwargs, values, shape, cot = _case(op, label)
    vals = ", ".join(str(float(v)) for v in values)
    cot_line = ("c = None" if cot is None else
                f"c = torch.tensor([{', '.join(str(float(v)) for v in cot)}], dtype=torch.{dtype})")
    return "\n".join([
        head, "import torch", "", "",
        "def make_op():  # the registry's op as a function of one tensor", textwrap.indent(op_code(fn, kwargs), "    "),
        "    return op", "", "", "op = make_op()",
        f"x = torch.tensor([{vals}], dtype=torch.{dtype}).reshape({tuple(shape)!r})", cot_line, "", "",
        "def f(t):", "    y = op(t)", "    return (y * c).sum() if c is not None else y.sum()", "", "",
        _MODE_CODE[mode],
        'print("torch", torch.__version__, "derivative:", g.flatten().tolist())', ""])


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) + ".py"


def write_crash_repro(result, out: str | Path | None = None) -> Path:
    """The reproduction script of a crashed cell (a :class:`~nsverify.conventions.matrix.Result` whose rule is
    ``"crashed"``), written to directory ``out`` (a new temporary directory when None); its header names the crash,
    the torch version, the CPU capability and the environment variables that select kernels and caches."""
    import os
    import tempfile

    import torch

    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="nsverify-crashed-"))
    out.mkdir(parents=True, exist_ok=True)
    environ = dict(os.environ)
    if result.mode == "compile":
        capability_cache_dir(environ)  # the Inductor cache the child used (one per CPU capability)
    env = "; ".join(f"{k}={environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "TORCHINDUCTOR_CACHE_DIR")
                    if k in environ) or "none set"
    head = (f"# {result.op} at {result.case} ({result.dtype}, {result.device}, {result.mode} mode) crashed its "
            f"process: {result.error}\n"
            f"# torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}; environment: "
            f"{env}\n# (nsverify's conventions matrix, registry case {result.op!r} / {result.case!r}); run it as "
            f"the crash ran, e.g. with the same ATEN_CPU_CAPABILITY and TORCHINDUCTOR_CACHE_DIR")
    path = out / safe_name(f"crashed_{result.op}_{result.case}_{result.dtype}_{result.device}_{result.mode}")
    try:
        text = cell_script(result.op, result.case, result.dtype, result.mode, head)
    except (ValueError, OSError, TypeError, StopIteration) as exc:
        text = f"{head}\n# no standalone script for this cell: {exc}\n"
    path.write_text(text, encoding="utf-8")
    return path
