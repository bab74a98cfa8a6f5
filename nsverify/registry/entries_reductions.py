"""The registry's selection and reduction entries beyond max/min/sort (issue 36): reductions along a dim,
cumulative max/min, quantiles and nan-medians at ties, scatter/index/segment reductions with amax/amin, aminmax.

Each output is a :class:`~nsverify.registry.windows.Window` (the entry of a rank among input indices); PyTorch's
tie rule was measured on torch 2.13 CPU (eager, torch.func.grad and jvp; every float dtype); no other release
could be measured here, so no entry records a rule change.
"""
from __future__ import annotations

from fractions import Fraction

from nsverify.registry.types import RuleChange, Selection, Violation, selection_case
from nsverify.registry.windows import Window, adaptive_windows, pool_window_table

F = Fraction

_THIRD = Violation(
    "rounding",
    "even split over 3 tied entries: 1/3 is not representable in binary floating point, so the float gradient "
    "is the exact rule rounded (it lies just outside the exact Clarke set)")

#: scatter_reduce / index_reduce with include_self=False into zeros, where an output equals 0: PyTorch's backward
#: counts the ignored self entry as tied (it compares self with the result), so it splits the gradient over one
#: entry more than the ones that were reduced (measured on torch 2.13 CPU in eager and torch.func.grad)
_SELF_COUNTED = Violation(
    "no",
    "include_self=False, and the reduced value equals the (ignored) self entry 0: the backward compares self with "
    "the result and counts it as one more tied entry, so each of the 2 tied sources gets 2/3 of the weight (total "
    "4/3 of 2), outside the Clarke set conv{(2, 0), (0, 2)}; forward mode splits evenly (inside)")

#: the two-group index of the scatter/index/segment cases: entries 0-2 go to output 0, entries 3-4 to output 1
_GROUPS = (0, 0, 0, 1, 1)



#: quantile's tie routing changed in torch 2.14.0 (the entry's doc)
_QUANTILE_2_14 = (RuleChange("2.14.0", "first", "returned", modes=("eager",),
                             note="quantile's tie routing in eager mode: the stable sort's entry at the rank -> the "
                                  "entry topk(largest=False) returns at that rank; torch.func.grad, jvp and "
                                  "compile keep the stable sort's (measured by nsverify on 2.14.0 and 2.14.1)"),)

def _quantile_indices(t) -> list[int]:
    """The index torch 2.14's quantile(x, 0.5) routes the gradient to at a tie: the last of the indices
    ``torch.topk(x, rank + 1, largest=False)`` returns, rank = (n - 1) / 2 (measured, see the entry)."""
    import torch

    flat = t.flatten()
    k = (flat.numel() - 1) // 2 + 1
    return [int(torch.topk(flat, k, largest=False).indices[-1])]

def _rows(r, c, d):
    return [Window(tuple(i * c + j for j in range(c)), 0, d) for i in range(r)]


def _prefix(n, d):
    return [Window(tuple(range(j + 1)), 0, d) for j in range(n)]


def _groups(d):
    return [Window((0, 1, 2), 0, d), Window((3, 4), 0, d)]


def _scatter(reduce):
    def fn(t):
        import torch

        idx = torch.tensor(_GROUPS, device=t.device)
        return torch.zeros(2, dtype=t.dtype, device=t.device).scatter_reduce(0, idx, t, reduce, include_self=False)
    return fn


def _index_reduce(reduce):
    def fn(t):
        import torch

        idx = torch.tensor(_GROUPS, device=t.device)
        return torch.zeros(2, dtype=t.dtype, device=t.device).index_reduce(0, idx, t, reduce, include_self=False)
    return fn


def _segment(reduce):
    def fn(t):
        import torch

        return torch.segment_reduce(t, reduce, lengths=torch.tensor([3, 2], device=t.device))
    return fn


def _grouped_cases(d, self_tie: bool):
    """Ties inside both groups (outputs 1 and 2, or -1 and -2); with ``self_tie`` a second case whose group-1 value
    is 0, the value of the ignored self entry (:data:`_SELF_COUNTED`)."""
    s = 1 if d == "max" else -1
    clean = [s * v for v in (1, 1, 0, 2, 2)]
    cases = [selection_case("ties in both groups", clean, (5,), _groups(d), "even", cotangent=[1, 2])]
    if self_tie:  # group 0 tied at 1, group 1 tied at 0: the value of the ignored self entry
        tied = [1, 1, 0, 0, 0] if d == "max" else [1, 1, 2, 0, 0]
        cases.append(selection_case("tie at the ignored self value 0", tied, (5,), _groups(d), "even",
                                    cotangent=[1, 2], mode_rules={"jvp": "even"}, violations=(_SELF_COUNTED,)))
    return lambda: tuple(cases)


_NO_JVP = {"jvp": "NotImplementedError: forward AD is not implemented for this op (tools/autograd/derivatives.yaml)"}


def reduction_entries():
    import torch

    W, case = Window, selection_case
    # --- amax / amin along a dim: an even split per row (unlike max(x, dim), which takes the first index)
    for name, fn, d, node in [("amax_dim", torch.amax, "max", "AmaxBackward0"),
                              ("amin_dim", torch.amin, "min", "AminBackward0")]:
        big = 2 if d == "max" else -2
        yield Selection(
            name, (), (lambda f: lambda t: f(t, 1))(fn), "even", (lambda d=d, big=big: (
                case("ties in rows", [1 if d == "max" else -1] * 2 + [0, big, 0, big], (2, 3), _rows(2, 3, d),
                     "even", cotangent=[1, 2]),
                case("3 tied", [0, 0, 0], (1, 3), _rows(1, 3, d), "even", violations=(_THIRD,)))),
            kwargs={"dim": 1},
            doc=f"torch.{name[:4]}(x, dim=1) (ATen {name[:4]} with a dim, the {name[:4]} entry's op): an even split "
                f"over each row's tie set, the minimum-norm element (unlike {name[:3]}(x, dim), which takes the "
                "first index)",
            jax=f"jnp.{d}(x, axis=1)", autograd_nodes=(node,))
    # --- cumulative max / min: the running extreme returns the LAST tied index (measured), gradient follows it
    for name, fn, d, node in [("cummax", torch.cummax, "max", "CummaxBackward0"),
                              ("cummin", torch.cummin, "min", "CumminBackward0")]:
        other = 0 if d == "max" else 2
        yield Selection(
            name, (name,), (lambda f: lambda t: f(t, 0).values)(fn), "last", (lambda d=d, other=other: (
                case("prefix ties", [1, 1, other, 1], (4,), _prefix(4, d), "last", cotangent=[1, 2, 3, 4]),)),
            kwargs={"dim": 0},
            doc=f"torch.{name}(x, 0).values: output j is the {d} of x[0..j]; at ties PyTorch returns the last tied "
                "index (measured: indices 0, 1, 1, 3 for 1, 1, *, 1) and the gradient goes there",
            jax=f"lax.cum{d}(x)", autograd_nodes=(node,))
    # --- quantile / nanquantile at an exact rank (q = 1/2 of 5 entries: rank 2, no interpolation)
    for name, fn in [("quantile", torch.quantile), ("nanquantile", torch.nanquantile)]:
        yield Selection(
            name, (), (lambda f: lambda t: f(t, 0.5))(fn), "first", lambda: (
                case("3 tied at the median", [1, 1, 1, 2, 0], (5,), [W(tuple(range(5)), 2, "min")], "first",
                     rule_changes=_QUANTILE_2_14),
                case("3 tied, later indices", [2, 1, 1, 1, 0], (5,), [W(tuple(range(5)), 2, "min")], "first",
                     rule_changes=_QUANTILE_2_14)),
            kwargs={"q": 0.5},
            doc=f"torch.{name}(x, 0.5) of 5 entries: the entry of rank 2, no interpolation. Up to torch 2.13 PyTorch "
                "sorts (stably) and gathers: at ties the gradient goes to the tied entry a stable ascending sort puts "
                "at that rank, the first-index rule (measured). From torch 2.14.0 on the autograd graph has no sort "
                "in eager mode (the indices are chosen without a gradient and gathered from x): the gradient goes to "
                "the index torch.topk(x, rank + 1, largest=False) returns last (measured on 2.14.0 and 2.14.1 at "
                "three tie patterns), still a tied entry; torch.func.grad, jvp and compile keep the stable sort's. "
                "Composite: the oracle sees sort, gather and lerp",
            indices_fn=_quantile_indices,
            rule_changes=_QUANTILE_2_14,
            jax=f"jnp.{name}(x, 0.5)", unsupported={
                dt: "RuntimeError: quantile() input tensor must be either float or double dtype"
                for dt in ("float16", "bfloat16")},
            autograd_nodes=("SqueezeBackward4",))
    # --- nanmedian: the lower median, like median
    yield Selection(
        "nanmedian", ("nanmedian",), lambda t: torch.nanmedian(t), "even", lambda: (
            case("3 tied at the median", [1, 1, 1, 2], (4,), [W((0, 1, 2, 3), 1, "min")], "even",
                 violations=(_THIRD,)),),
        doc="torch.nanmedian(x) (lower median, NaN ignored): an even split over the entries equal to it "
            "(measured, like median)",
        jax="jnp.nanquantile(x, 0.5, method='lower')", autograd_nodes=("NanmedianBackward0",))
    yield Selection(
        "nanmedian_dim", ("nanmedian.dim",), lambda t: torch.nanmedian(t, 1).values, "first", lambda: (
            case("3 tied among 5", [2, 1, 1, 1, 0], (1, 5), [W((0, 1, 2, 3, 4), 2, "min")], "first"),),
        kwargs={"dim": 1},
        doc="torch.nanmedian(x, dim): the gradient goes to the returned index, the one a stable ascending sort "
            "puts at the median rank (measured, like median(x, dim))",
        jax="jnp.nanquantile(x, 0.5, axis=1, method='lower')", autograd_nodes=("NanmedianBackward1",))
    # --- scatter_reduce / index_reduce / segment_reduce with amax and amin: an even split
    for d in ("max", "min"):
        yield Selection(
            f"scatter_reduce_a{d}", ("scatter_reduce",), _scatter(f"a{d}"), "even", _grouped_cases(d, True),
            doc=f"torch.zeros(2).scatter_reduce(0, index, x, 'a{d}', include_self=False), index 0,0,0,1,1: an "
                "even split over each group's tie set; when the result equals the ignored self entry, PyTorch "
                "counts self as tied too (recorded violation)",
            jax=f"jnp.full(2, {'-' if d == 'max' else ''}jnp.inf, dtype=x.dtype).at[jnp.array({list(_GROUPS)})]"
                f".{d}(x)",
            autograd_nodes=("ScatterReduceBackward0",))
        yield Selection(
            f"index_reduce_a{d}", ("index_reduce",), _index_reduce(f"a{d}"), "even", _grouped_cases(d, True),
            doc=f"torch.zeros(2).index_reduce(0, index, x, 'a{d}', include_self=False), index 0,0,0,1,1: as "
                f"scatter_reduce_a{d} (the same backward formula); no forward mode",
            jax_note="JAX has no index_reduce (scatter_reduce's counterpart .at[].max is scatter_reduce_amax's)",
            unsupported=dict(_NO_JVP), autograd_nodes=("IndexReduceBackward0",))
        yield Selection(
            f"segment_reduce_{d}", ("segment_reduce",), _segment(d), "even",
            _grouped_cases(d, False),
            doc=f"torch.segment_reduce(x, '{d}', lengths=[3, 2]): an even split over each segment's tie set; no "
                "forward mode",
            jax=f"jax.ops.segment_{d}(x, jnp.array({list(_GROUPS)}), num_segments=2)",
            unsupported=dict(_NO_JVP), autograd_nodes=("SegmentReduceBackward0",))
    # --- aminmax: both extremes at once
    yield Selection(
        "aminmax", ("aminmax",), lambda t: torch.stack(torch.aminmax(t)), "even", lambda: (
            case("ties at both ends", [0, 1, 1, 0], (4,), [W((0, 1, 2, 3), 0, "min"), W((0, 1, 2, 3), 0, "max")],
                 "even", cotangent=[1, 2]),),
        doc="torch.aminmax(x) (min and max stacked): an even split over each tie set (measured)",
        jax="jnp.stack([jnp.min(x), jnp.max(x)])", autograd_nodes=("AminmaxBackward0",))
    # --- embedding_bag in max mode: each bag's output is the max over its rows
    yield Selection(
        "embedding_bag_max", ("_embedding_bag",), _embedding_bag_max, "first", lambda: (
            case("ties in overlapping bags", [1, 1, 0], (3,), [W((0, 1, 2)), W((1, 2))], "first",
                 cotangent=[1, 2]),),
        doc="F.embedding_bag(index 0,1,2 | 1,2, weight (3, 1), mode='max'): the gradient w.r.t. the weight goes "
            "to the first maximal row of each bag (measured); no forward mode",
        jax_note="JAX has no embedding_bag (flax's Embed has no bag reduction)",
        unsupported=dict(_NO_JVP), autograd_nodes=("EmbeddingBagBackward0",))
    # --- the pools beside the 2-d one
    yield Selection(
        "max_pool3d", (), _max_pool3d, "first", lambda: (
            case("k=2 s=1 overlapping, all tied", [0] * 12, (2, 2, 3), _pool3d_windows(), "first",
                 cotangent=[1, 2]),),
        doc="F.max_pool3d(x, 2, stride=1) on a 2x2x3 plateau: the first index in row-major window order, "
            "overlapping windows add up (ATen max_pool3d_with_indices, keyed max_pool2d: the same rule)",
        jax="lax.reduce_window(x, -jnp.inf, lax.max, (2, 2, 2), (1, 1, 1), 'VALID').flatten()",
        autograd_nodes=("MaxPool3DWithIndicesBackward0",))
    yield Selection(
        "adaptive_max_pool1d", (), _adaptive_max_pool1d, "first", lambda: (
            case("5 -> 3 (overlapping) all tied", [0] * 5, (5,),
                 [W(tuple(r)) for r in adaptive_windows(5, 3)], "first", cotangent=[1, 2, 3]),),
        doc="F.adaptive_max_pool1d(x, 3) of 5 entries (windows 0-1, 1-3, 3-4): the first index of each window; "
            "PyTorch runs it as adaptive_max_pool2d (keyed adaptive_max_pool2d)",
        jax_note="JAX has no adaptive pooling: neither jax.lax, jax.numpy nor jax.nn has one",
        autograd_nodes=("AdaptiveMaxPool2DBackward0",))


def _embedding_bag_max(t):
    import torch
    import torch.nn.functional as tF

    idx = torch.tensor([0, 1, 2, 1, 2], device=t.device)
    return tF.embedding_bag(idx, t.reshape(3, 1), torch.tensor([0, 3], device=t.device), mode="max").flatten()


def _max_pool3d(t):
    import torch.nn.functional as tF

    return tF.max_pool3d(t.reshape(1, 1, 2, 2, 3), 2, stride=1).flatten()


def _pool3d_windows() -> list[Window]:
    _, table = pool_window_table((2, 2, 3), 2, 1)
    return [Window(tuple(int(i) for i in row if i >= 0)) for row in table]


def _adaptive_max_pool1d(t):
    import torch.nn.functional as tF

    return tF.adaptive_max_pool1d(t.reshape(1, 1, -1), 3).flatten()
