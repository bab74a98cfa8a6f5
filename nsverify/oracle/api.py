"""Public entry points: :func:`check_gradient` and :func:`check_module`."""

from __future__ import annotations

from fractions import Fraction

import torch

from ..errors import NsverifyError
from .interp import module_function, point_to_fractions, run
from .jsonio import enc
from .membership import distance, distinct, interval_member_1d, member_weights, separating_direction
from .numbers import Ival
from .pieces import enumerate_pieces
from .verdict import Verdict

F = Fraction


def float_autograd(fn, w: torch.Tensor) -> tuple:
    """What PyTorch's autograd returns for fn at w, in w's dtype (as Python floats)."""
    wf = w.detach().clone().requires_grad_(True)
    y = fn(wf)
    if not isinstance(y, torch.Tensor) or y.numel() != 1:
        raise NsverifyError("fn must return a scalar tensor")
    if not y.requires_grad:
        return tuple(0.0 for _ in range(w.numel()))
    (g,) = torch.autograd.grad(y.reshape(()), wf, allow_unused=True)
    if g is None:
        return tuple(0.0 for _ in range(w.numel()))
    return tuple(float(x) for x in g.detach().reshape(-1).tolist())


def check_gradient(
    fn,
    w: torch.Tensor,
    ad=None,
    *,
    conventions: dict | None = None,
    max_pieces: int = 10_000,
    on_limit: str = "raise",
    time_limit: float | None = None,
) -> Verdict:
    """Decide whether the AD of ``fn`` at ``w`` lies in the Clarke subdifferential of the real function.

    ``fn``: callable on a 1-D (or any-shape) float tensor, returning a scalar tensor; ``w`` is taken as the
    exact
    rationals its floats represent.  ``ad``: a vector to test instead of the program's exact AD
    (taken as exact
    rationals).  ``conventions``: AD rules at kinks for the exact AD (see :func:`exact_gradient`).
    ``max_pieces``: limit on enumerated patterns; past it raise :class:`TooManyPieces` or, with
    ``on_limit="unknown"``, return "unknown".
    """
    if on_limit not in ("raise", "unknown"):
        raise NsverifyError(f"on_limit must be 'raise' or 'unknown', got {on_limit!r}")
    values = point_to_fractions(w)
    ad_run = run(fn, w, mode="ad", conventions=conventions, values=values, float_shadow=True)
    exact_ad = ad_run.gradient
    float_ad = float_autograd(fn, w)
    if ad is None:
        tested, tested_is = exact_ad, "exact_ad"
    else:
        adv = ad.detach().reshape(-1).double().tolist() if isinstance(ad, torch.Tensor) else list(ad)
        if len(adv) != len(values):
            raise NsverifyError(
                f"ad has {len(adv)} entries but w has {len(values)}; give one entry per coordinate of w"
            )
        tested, tested_is = tuple(x if isinstance(x, (Fraction, Ival)) else F(x) for x in adv), "ad"
    en = enumerate_pieces(fn, w, values=values, limit=max_pieces, on_limit=on_limit, time_limit=time_limit)
    inner_leaves = [leaf for leaf in en.leaves if leaf.inner]
    inner = distinct(leaf.gradient for leaf in inner_leaves)
    outer = distinct(leaf.gradient for leaf in en.leaves)
    exact = en.exact
    status, cert, reason = "unknown", None, ""
    lam = member_weights(tested, inner)
    if lam is not None:
        status = "member"
        wit = {}
        for i in lam:
            leaf = next(lf for lf in inner_leaves if tuple(lf.gradient) == tuple(inner[i]))
            wit[str(i)] = enc(leaf.witness) if leaf.witness else {}
        cert = {
            "kind": "convex_weights",
            "weights": {str(i): enc(x) for i, x in lam.items()},
            "witnesses": wit,
        }
    elif len(tested) == 1 and interval_member_1d(tested, inner) is not None:
        lo, hi = interval_member_1d(tested, inner)
        status, cert = "member", {"kind": "interval_bracket", "below": lo, "above": hi}
    elif en.incomplete:
        reason = en.incomplete
    else:
        h = separating_direction(tested, outer)
        if h is not None:
            status = "not_member"
            cert = {"kind": "separating_direction", "h": enc(h), "over": "bouligand" if exact else "outer"}
        else:
            reason = (
                "the tested vector is in the outer bracket but not certified in the inner one"
                if not exact
                else "no exact certificate could be produced either way"
            )
    if exact:
        dist = 0.0 if status == "member" else distance(tested, inner)
        bounds = None
    else:
        lo = distance(tested, outer) if outer and not en.incomplete else 0.0
        hi = 0.0 if status == "member" else (distance(tested, inner) if inner else float("inf"))
        dist, bounds = lo, (lo, hi)
    ref = inner if exact else outer
    stats = {
        "pieces": len(en.leaves),
        "inner_pieces": len(inner_leaves),
        "lps": en.stats.lps,
        "witness_reuse": en.stats.witness_reuse,
        "gordan": en.stats.gordan,
        "uncertain": en.stats.uncertain,
        "branch_sites": en.branch_sites,
        "seconds": en.seconds,
        "lp_seconds": en.stats.lp_seconds,
        "curved": en.curved,
    }
    return Verdict(
        status=status,
        exact=exact,
        bouligand=inner,
        certificate=cert,
        distance=dist,
        kinks=ad_run.sites,
        exact_ad=exact_ad,
        ad=float_ad,
        tested=tuple(tested),
        tested_is=tested_is,
        outer=outer,
        reason=reason,
        value=ad_run.value,
        stats=stats,
        ad_distance=distance([F(x) for x in float_ad], ref) if ref else None,
        distance_bounds=bounds,
    )


def check_module(
    model: torch.nn.Module, loss_fn, inputs, targets, wrt: str = "parameters", **kwargs
) -> Verdict:
    """:func:`check_gradient` for ``loss_fn(model(inputs), targets)`` w.r.t. all trainable
    parameters (flattened
    in ``named_parameters()`` order) or the inputs."""
    fn, w = module_function(model, loss_fn, inputs, targets, wrt)
    return check_gradient(fn, w, **kwargs)
