"""Equivalent formulations of one function, judged by the exact oracle rather than by equality.

relu(x), clamp(x, min=0), clamp_min(x, 0), maximum(x, 0) and where(x > 0, x, 0) are one function; so are
hardtanh(x, lo, hi) and clamp(x, lo, hi); and max_pool over windows is amax (or max(dim)) over the same windows
taken with unfold. At a kink or tie their conventions differ (relu'(0) = 0, maximum's 1/2, clamp_min's 1 up to
torch 2.13), and forward mode need not equal reverse mode. What must hold for every correct PyTorch:

* the forward values agree bitwise;
* away from kinks and ties the gradients agree exactly;
* every gradient -- reverse mode and forward mode (the jvp along each unit tangent), every formulation -- lies in
  the Clarke subdifferential of the function, decided exactly by ``nsverify.check_gradient(..., ad=...)``.

The cotangents are positive: each function is then a positive combination of convex pieces applied to
distinct inputs or windows (for pooling: a positive sum of maxima, convex, where the Clarke set is the sum of
the windows' sets), so a per-op Clarke rule gives a member. Windows with exactly three tied maxima are left out:
their even split 1/3 is not a float (a rounding violation the registry records)."""

import pytest
import torch
import torch.nn.functional as tF
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import nsverify
from nsverify.pytest_plugin import budget

KINKS = {"relu": (0,), "hardtanh": (-1, 1), "relu6": (0, 6)}


def _grads(f, x):
    """(reverse-mode gradient, forward-mode gradient: jvp along each unit tangent) of the scalar f at x."""
    xr = x.clone().requires_grad_(True)
    (rev,) = torch.autograd.grad(f(xr), xr)
    rows = []
    for i in range(x.numel()):
        e = torch.zeros_like(x).flatten()
        e[i] = 1
        rows.append(torch.func.jvp(f, (x,), (e.reshape(x.shape),))[1])
    return rev.flatten(), torch.stack(rows).flatten()


def _values_agree_and_grads(forms: dict, x, c) -> dict:
    """Assert that every formulation gives the same values bitwise; return the reverse- and forward-mode
    gradients of sum(c * form(x)) of each, by name."""
    outs = {name: fn(x) for name, fn in forms.items()}
    first_name, first = next(iter(outs.items()))
    for name, y in outs.items():
        assert torch.equal(y, first), f"{name} differs from {first_name} in value: {y} vs {first}"
    grads = {}
    for name, fn in forms.items():
        rev, fwd = _grads(lambda t, fn=fn: (c * fn(t)).sum(), x)
        grads[f"{name} reverse"], grads[f"{name} forward"] = rev.cpu(), fwd.cpu()
    return grads


def _judge(fn64, x, vectors: dict) -> dict:
    """Oracle verdicts for each named gradient vector (one oracle call per distinct vector)."""
    w = x.detach().to(torch.float64).flatten()
    seen: dict = {}
    out = {}
    for name, vec in vectors.items():
        key = tuple(vec.double().tolist())
        if key not in seen:
            seen[key] = nsverify.check_gradient(fn64, w, ad=vec.double()).status
        out[name] = seen[key]
    return out


def _elementwise_forms(kind: str, lo=None, hi=None):
    if kind == "relu":
        return {"relu": torch.relu, "clamp(min=0)": lambda t: torch.clamp(t, min=0),
                "clamp_min": lambda t: torch.clamp_min(t, 0),
                "maximum(x, 0)": lambda t: torch.maximum(t, torch.zeros_like(t)),
                "where(x > 0, x, 0)": lambda t: torch.where(t > 0, t, torch.zeros_like(t))}
    return {"hardtanh": lambda t: tF.hardtanh(t, lo, hi), "clamp": lambda t: torch.clamp(t, lo, hi),
            "clamp_min.clamp_max": lambda t: torch.clamp_max(torch.clamp_min(t, lo), hi),
            "minimum(maximum)": lambda t: torch.minimum(torch.maximum(t, torch.full_like(t, lo)),
                                                        torch.full_like(t, hi))}


@st.composite
def _at_kinks(draw, kinks, n=(1, 6)):
    size = draw(st.integers(*n))
    near = [k + d for k in kinks for d in (-1, -0.5, 0, 0.5, 1)]
    vals = draw(st.lists(st.sampled_from(sorted(set(near))), min_size=size, max_size=size))
    vals[draw(st.integers(0, size - 1))] = draw(st.sampled_from(kinks))  # at least one entry on a kink
    cot = draw(st.lists(st.integers(1, 4), min_size=size, max_size=size))
    return vals, cot


@pytest.mark.parametrize("kind", sorted(KINKS))
@settings(max_examples=budget(10))
@given(data=st.data())
def test_elementwise_formulations(kind, data, nsverify_dtype, nsverify_device):
    lo, hi = (KINKS[kind] + (None,))[:2] if kind != "relu" else (None, None)
    vals, cot = data.draw(_at_kinks(KINKS[kind]), label="x, cotangent")
    x = torch.tensor(vals, dtype=nsverify_dtype, device=nsverify_device)
    c = torch.tensor(cot, dtype=nsverify_dtype, device=nsverify_device)
    grads = _values_agree_and_grads(_elementwise_forms(kind, lo, hi), x, c)
    off = torch.tensor([v not in KINKS[kind] for v in vals])
    ref = next(iter(grads.values()))
    for name, g in grads.items():
        assert torch.equal(g[off], ref[off]), f"{name} differs from the others away from the kinks: {g} vs {ref}"
    c64 = torch.tensor(cot, dtype=torch.float64)
    canonical = next(iter(_elementwise_forms(kind, lo, hi).values()))
    verdicts = _judge(lambda w: (c64 * canonical(w)).sum(), x, grads)
    note(f"x = {vals}, cotangent = {cot}\n" + "\n".join(f"{k}: {grads[k].tolist()} -> {v}"
                                                          for k, v in verdicts.items()))
    bad = {k: v for k, v in verdicts.items() if v != "member"}
    assert not bad, f"gradients outside the Clarke set of {kind} (x = {vals}, cotangent = {cot}): {bad}"


def _windows_1d(n, k, s):
    return [list(range(i, i + k)) for i in range(0, n - k + 1, s)]


def _windows_2d(h, w, k, s):
    return [[(i + a) * w + (j + b) for a in range(k) for b in range(k)]
            for i in range(0, h - k + 1, s) for j in range(0, w - k + 1, s)]


@st.composite
def _pool_case(draw):
    two_d = draw(st.booleans())
    k, s = 2, draw(st.sampled_from([1, 2]))
    if two_d:
        h, w = draw(st.integers(2, 4)), draw(st.integers(2, 4))
        vals = draw(st.lists(st.integers(0, 2), min_size=h * w, max_size=h * w))
        wins = _windows_2d(h, w, k, s)
        shape = (h, w)
    else:
        n = draw(st.integers(2, 7))
        vals = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        wins = _windows_1d(n, k, s)
        shape = (n,)
    cot = draw(st.lists(st.integers(1, 4), min_size=len(wins), max_size=len(wins)))
    return vals, shape, k, s, wins, cot


def _pool_forms(shape, k, s):
    if len(shape) == 1:
        return {"max_pool1d": lambda t: tF.max_pool1d(t[None, None], k, s).flatten(),
                "unfold.amax": lambda t: t.unfold(0, k, s).amax(-1),
                "unfold.max(dim)": lambda t: t.unfold(0, k, s).max(-1).values}
    return {"max_pool2d": lambda t: tF.max_pool2d(t[None, None], k, s).flatten(),
            "unfold.amax": lambda t: t.unfold(0, k, s).unfold(1, k, s).amax((-1, -2)).flatten(),
            "unfold.flatten.max(dim)": lambda t: t.unfold(0, k, s).unfold(1, k, s).flatten(-2).max(-1)
            .values.flatten()}


@settings(max_examples=budget(15))
@given(case=_pool_case())
def test_max_pool_and_amax_over_unfold(case, nsverify_dtype, nsverify_device):
    vals, shape, k, s, wins, cot = case
    flat = vals
    for win in wins:
        top = max(flat[i] for i in win)
        assume(sum(flat[i] == top for i in win) != 3)  # 1/3 is not a float: the registry's rounding violation
    x = torch.tensor(vals, dtype=nsverify_dtype, device=nsverify_device).reshape(shape)
    c = torch.tensor(cot, dtype=nsverify_dtype, device=nsverify_device)
    grads = _values_agree_and_grads(_pool_forms(shape, k, s), x, c)
    tied = any(sum(flat[i] == max(flat[j] for j in win) for i in win) > 1 for win in wins)
    if not tied:
        ref = next(iter(grads.values()))
        for name, g in grads.items():
            assert torch.equal(g, ref), f"{name} differs from the others without ties: {g} vs {ref}"
    c64 = torch.tensor(cot, dtype=torch.float64)

    def windows_max(w):  # the same function through ops the exact oracle interprets
        return (c64 * torch.stack([w[list(win)].amax() for win in wins])).sum()

    verdicts = _judge(windows_max, x, grads)
    note(f"x = {vals} {shape}, windows {wins}, cotangent {cot}\n"
         + "\n".join(f"{n}: {grads[n].tolist()} -> {v}" for n, v in verdicts.items()))
    bad = {n: v for n, v in verdicts.items() if v != "member"}
    assert not bad, f"pooling gradients outside the Clarke set (x = {vals}, shape {shape}): {bad}"


# ----------------------------------------------------------------------------------------------------------
# grown from the table of equivalent formulations (nsverify.conventions.formulations.TABLE)
# ----------------------------------------------------------------------------------------------------------
def _table_cells():
    from nsverify.conventions.formulations import TABLE

    return [pytest.param(g, p, f, id=f"{g.name}|{p.label}|{f.name}") for g in TABLE for p in g.points
            for f in g.formulations]


@pytest.mark.parametrize("group,point,form", _table_cells())
def test_table_formulations_at_their_kinks(group, point, form, nsverify_dtype, nsverify_device):
    """Every formulation of the table at its group's kinks and ties: its values equal the group's first
    formulation's bitwise, and its reverse- and forward-mode derivatives lie in the exact Clarke set (the hull of
    the point's Bouligand gradients, in the space of the point's inputs). A formulation the table records as
    leaving the Clarke set (``outside``: sqrt(x * x) at 0) is an expected failure with that reason."""
    from fractions import Fraction

    from nsverify.rational import in_hull
    from nsverify.registry import exact_tensor

    x = exact_tensor(point.values, nsverify_dtype, nsverify_device).reshape(point.shape)
    c = (torch.ones((), dtype=nsverify_dtype, device=nsverify_device) if point.cotangent is None
         else exact_tensor(point.cotangent, nsverify_dtype, nsverify_device))
    assert torch.equal(form.fn(x), group.formulations[0].fn(x)), f"{form.name} differs in value at {point.label}"
    rev, fwd = _grads(lambda t: (c * form.fn(t)).sum(), x)
    vertices = point.clarke_vertices()
    outside = {}
    for mode, g in (("reverse", rev), ("forward", fwd)):
        vals = g.double().cpu().tolist()
        if not all(v == v and abs(v) != float("inf") for v in vals) or not in_hull(
                [Fraction(v) for v in vals], vertices):
            outside[mode] = vals
    if outside and form.outside:
        pytest.xfail(f"{form.name}: {form.outside}")
    assert not outside, (f"{form.name} at {point.label} ({group.function}): derivative outside the Clarke set "
                         f"conv{[tuple(str(v) for v in vert) for vert in vertices]}: {outside}")
