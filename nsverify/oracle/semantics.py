"""Nonsmooth semantics of ATen ops, read from :mod:`nsverify.registry`.

For each op the oracle needs the exact pieces and breakpoints (elementwise ops) or the tie rule (selections),
and PyTorch's choice at a kink.  The registry is the source; ops whose breakpoints depend on arguments
(hardtanh/relu6, clamp, leaky_relu, threshold) are instantiated here from their arguments, taking PyTorch's
side at each kink from the registry entry when it exists.  ``_FALLBACK`` holds PyTorch's measured behaviour
(torch 2.13) for entries the registry does not (yet) provide.
"""

from __future__ import annotations

from fractions import Fraction

from nsverify import registry
from nsverify.registry import Elementwise, Piece, lin

F = Fraction

# measured PyTorch 2.13 behaviour, used only where the registry has no entry
_FALLBACK_SIDE = {
    "relu": ("left",),
    "abs": ("zero",),
    "leaky_relu": ("left",),
    "hardtanh": ("left", "right"),
    "relu6": ("left", "right"),
    "hardsigmoid": ("left", "right"),
    "hardswish": ("left", "right"),
    "clamp": ("inside", "inside"),
    "threshold": ("left",),
}
_FALLBACK_TIE = {
    "max": "even",
    "min": "even",
    "amax": "even",
    "amin": "even",
    "maximum": "even",
    "minimum": "even",
    "max.dim": "first",
    "min.dim": "first",
    "max_pool": "first",
    "sort": "first",
    "topk": "first",
    "median": "first",
    "fmax": "even",
    "fmin": "even",
}


def _registry_entry(names):
    for n in names:
        try:
            return registry.get(n)
        except Exception:
            p = registry.by_aten(n)
            if p is not None:
                return p
    return None


def _side(name: str, nkinks: int) -> tuple:
    p = _registry_entry([name])
    if isinstance(p, Elementwise) and len(p.torch_side) == nkinks:
        return tuple(p.torch_side)
    return _FALLBACK_SIDE[name]


def _abs_entry():
    return Elementwise("abs", ("abs",), None, (F(0),), (lin(-1), lin(1)), _side("abs", 1))


def _quad(c0, c1, c2):
    return Piece(poly=(F(c0), F(c1), F(c2)))


def elementwise(base: str, args: tuple) -> Elementwise:
    """The Elementwise description of ATen op ``base`` called with scalar ``args`` (after the tensor)."""
    if base in ("relu", "relu_"):
        p = _registry_entry(["relu"])
        if isinstance(p, Elementwise):
            return p
        return Elementwise("relu", ("relu",), None, (F(0),), (lin(0), lin(1)), _side("relu", 1))
    if base == "abs":
        p = _registry_entry(["abs"])
        return p if isinstance(p, Elementwise) and all(q.exact for q in p.pieces) else _abs_entry()
    if base == "leaky_relu":
        a = F(args[0]) if args else F(1, 100)
        return Elementwise(
            "leaky_relu", ("leaky_relu",), None, (F(0),), (lin(a), lin(1)), _side("leaky_relu", 1)
        )
    if base in ("hardtanh", "hardtanh_"):
        lo, hi = (F(args[0]) if len(args) > 0 else F(-1)), (F(args[1]) if len(args) > 1 else F(1))
        name = "relu6" if (lo, hi) == (0, 6) else "hardtanh"
        return Elementwise(
            name, ("hardtanh",), None, (lo, hi), (lin(0, lo), lin(1), lin(0, hi)), _side(name, 2)
        )
    if base == "hardsigmoid":
        p = _registry_entry(["hardsigmoid"])
        if isinstance(p, Elementwise) and all(q.exact for q in p.pieces):
            return p
        return Elementwise(
            "hardsigmoid",
            ("hardsigmoid",),
            None,
            (F(-3), F(3)),
            (lin(0), lin(F(1, 6), F(1, 2)), lin(0, 1)),
            _side("hardsigmoid", 2),
        )
    if base == "hardswish":
        p = _registry_entry(["hardswish"])
        if isinstance(p, Elementwise) and all(q.exact for q in p.pieces):
            return p
        return Elementwise(
            "hardswish",
            ("hardswish",),
            None,
            (F(-3), F(3)),
            (lin(0), _quad(0, F(1, 2), F(1, 6)), lin(1)),
            _side("hardswish", 2),
        )
    if base == "threshold":
        th, value = F(args[0]), F(args[1])
        return Elementwise(
            "threshold", ("threshold",), None, (th,), (lin(0, value), lin(1)), _side("threshold", 1)
        )
    raise KeyError(base)


def clamp(lo, hi) -> tuple:
    """(breakpoints, pieces, sides) of clamp(x, lo, hi) with either bound optional."""
    sides = _side("clamp", 2)
    bps, pieces, sd = [], [], []
    if lo is not None:
        bps.append(F(lo))
        pieces.append(lin(0, F(lo)))
        sd.append(sides[0])
    pieces.append(lin(1))
    if hi is not None:
        bps.append(F(hi))
        pieces.append(lin(0, F(hi)))
        sd.append(sides[1])
    return Elementwise("clamp", ("clamp",), None, tuple(bps), tuple(pieces), tuple(sd))


_REGISTRY_NAME = {"max.dim": "max_dim", "min.dim": "min_dim", "max_pool": "max_pool2d",
                  "adaptive_max_pool": "adaptive_max_pool2d"}


def tie_rule(key: str) -> str:
    """PyTorch's tie rule for a selection op ('even' split or 'first' index), from the registry."""
    name = _REGISTRY_NAME.get(key, key)
    p = registry.PRIMITIVES.get(name)
    if isinstance(p, registry.Selection) and p.tie_rule in ("even", "first"):
        return p.tie_rule
    return _FALLBACK_TIE.get(key, "first")


ELEMENTWISE_OPS = ("relu", "abs", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "threshold")
