"""Public entry points: :func:`check_gradient` and :func:`check_module`."""

from __future__ import annotations

from fractions import Fraction

import torch

from nsverify.errors import InexactError, NsverifyError
from nsverify.oracle.interp import module_function, point_to_fractions, run
from nsverify.oracle.jsonio import enc
from nsverify.oracle.membership import distance, distinct, interval_member_1d, member_weights, separating_direction
from nsverify.oracle.numbers import Ival
from nsverify.oracle.pieces import enumerate_pieces
from nsverify.oracle.verdict import Verdict

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
    time_limit: float | None = 600.0,
) -> Verdict:
    """Decide whether the AD of ``fn`` at ``w`` lies in the Clarke subdifferential of the real function.

    ``fn``: callable on a float tensor (any shape), returning a scalar tensor; ``w`` is taken as the exact
    rationals its floats represent.  ``ad``: a vector to test instead of the program's exact AD (taken as
    exact rationals).  ``conventions``: AD rules at kinks for the exact AD (see :func:`exact_gradient`).
    ``max_pieces`` / ``time_limit`` (seconds): past them raise :class:`TooManyPieces` or, with
    ``on_limit="unknown"``, return "unknown" (member stays possible on the pieces already certified).
    """
    if on_limit not in ("raise", "unknown"):
        raise NsverifyError(f"on_limit must be 'raise' or 'unknown', got {on_limit!r}")
    from nsverify.errors import TooManyPieces
    from nsverify.oracle.context import deadline

    # a hard stop slightly after time_limit, for single evaluations too large to finish (huge forward mode)
    with deadline(None if time_limit is None else time_limit * 1.1 + 1):
        try:
            return _check_gradient(fn, w, ad, conventions=conventions, max_pieces=max_pieces,
                                   on_limit=on_limit, time_limit=time_limit)
        except TooManyPieces as e:
            if on_limit != "unknown":
                raise
            return _undecided(str(e), float_autograd(fn, w), ad)


def _check_gradient(fn, w: torch.Tensor, ad, *, conventions: dict | None, max_pieces: int, on_limit: str,
                    time_limit: float | None) -> Verdict:
    """The work of :func:`check_gradient` (arguments already validated there)."""
    values = point_to_fractions(w)
    float_ad = float_autograd(fn, w)
    try:
        ad_run = run(fn, w, mode="ad", conventions=conventions, values=values, float_shadow=True)
    except InexactError as e:
        return _undecided(f"the exact AD could not be evaluated: {e}", float_ad, ad)
    exact_ad, how = _exact_ad(fn, w, conventions, ad_run.gradient)
    if ad is None:
        tested, tested_is = exact_ad, "exact_ad"
    else:
        adv = ad.detach().reshape(-1).double().tolist() if isinstance(ad, torch.Tensor) else list(ad)
        if len(adv) != len(values):
            raise NsverifyError(
                f"ad has {len(adv)} entries but w has {len(values)}; give one entry per coordinate of w"
            )
        tested, tested_is = tuple(x if isinstance(x, (Fraction, Ival)) else F(x) for x in adv), "ad"
    try:
        en = enumerate_pieces(
            fn, w, values=values, limit=max_pieces, on_limit=on_limit, time_limit=time_limit
        )
    except InexactError as e:
        return _undecided(f"the pieces could not be enumerated exactly: {e}", float_ad, ad, ad_run)
    inner_leaves = [leaf for leaf in en.leaves if leaf.inner]
    inner = distinct(leaf.gradient for leaf in inner_leaves)
    outer = distinct(leaf.gradient for leaf in en.leaves)
    # the bracket closes when every combinatorially possible gradient is also certified
    exact = en.exact or (en.incomplete is None and set(outer) == set(inner))
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
    elif tested_is == "exact_ad" and (
        follow := _follow(fn, w, values, conventions, exact_ad, ad_run.gradient)
    ) is not None:
        status, cert = "member", follow
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
        "nogood_reuse": en.stats.nogood_reuse,
        "uncertain": en.stats.uncertain,
        "branch_sites": en.branch_sites,
        "seconds": en.seconds,
        "lp_seconds": en.stats.lp_seconds,
        "curved": en.curved,
        "exact_ad_from": how,
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


def _undecided(reason, float_ad, ad, ad_run=None) -> Verdict:
    """An "unknown" verdict when intervals (or an inexact value) cannot decide."""
    exact_ad = ad_run.gradient if ad_run is not None else None
    if ad is not None:
        adv = ad.detach().reshape(-1).double().tolist() if isinstance(ad, torch.Tensor) else list(ad)
        tested, tested_is = tuple(F(x) for x in adv), "ad"
    else:
        tested, tested_is = (exact_ad or ()), "exact_ad"
    return Verdict(
        status="unknown",
        exact=False,
        bouligand=[],
        certificate=None,
        distance=float("nan"),
        kinks=ad_run.sites if ad_run is not None else [],
        exact_ad=exact_ad,
        ad=float_ad,
        tested=tuple(tested),
        tested_is=tested_is,
        reason=reason,
        value=ad_run.value if ad_run is not None else None,
    )


def _exact_ad(fn, w, conventions, forward_gradient):
    """PyTorch's AD evaluated exactly: its backward formulas run on ExactTensor (reverse mode), so custom
    ``torch.autograd.Function`` backward rules count too.  Forward mode (the registry's rules) is the fallback
    when a backward op has no exact implementation.  When the two differ -- a custom backward rule, or a
    registry entry that disagrees with PyTorch's formula -- the reverse mode is what PyTorch computes: it is
    used, and a warning names the difference."""
    import warnings

    from nsverify.errors import UnsupportedOpError
    from nsverify.oracle.backprop import exact_backprop

    try:
        g = exact_backprop(fn, w, conventions)
    except (UnsupportedOpError, InexactError):
        return forward_gradient, "forward"
    exact = all(isinstance(x, Fraction) for x in tuple(g) + tuple(forward_gradient))
    if exact and tuple(g) != tuple(forward_gradient):
        warnings.warn(
            "PyTorch's backward evaluated exactly gives "
            f"{tuple(map(str, g))} but the forward-mode rules of the registry give "
            f"{tuple(map(str, forward_gradient))}: the program has a custom autograd.Function backward (or a "
            "registry entry differs from PyTorch's formula). The reverse-mode value is tested.", stacklevel=3)
        return g, "backward (differs from the registry's forward-mode rules)"
    return g, "backward"


def _follow(fn, w, values, conventions, exact_ad, forward_ad):
    """Certificate "adjacent_piece": AD's own local choices form a piece adjacent to w (see follow_ad).

    The piece's gradient is computed by the same forward-mode arithmetic as the forward-mode AD, so the two
    must agree *identically* (same Fractions, same interval endpoints); the reverse-mode exact AD must agree
    with them (exactly, or with overlapping intervals).  Anything else declines the certificate.
    """
    from nsverify.oracle.pieces import follow_ad

    got = follow_ad(fn, w, values=values, conventions=conventions)
    if got is None:
        return None
    grad, decisions, rows, witness = got
    def same(a, b):
        if isinstance(a, Ival) and isinstance(b, Ival):
            return (a.lo, a.hi) == (b.lo, b.hi)
        return not isinstance(a, Ival) and not isinstance(b, Ival) and a == b

    if not all(same(a, b) for a, b in zip(grad, forward_ad)):
        return None
    for a, b in zip(grad, exact_ad):  # same arithmetic: equal when exact, overlapping intervals otherwise
        lo_a, hi_a = (a.lo, a.hi) if isinstance(a, Ival) else (a, a)
        lo_b, hi_b = (b.lo, b.hi) if isinstance(b, Ival) else (b, b)
        if hi_a < lo_b or hi_b < lo_a or (not isinstance(a, Ival) and not isinstance(b, Ival) and a != b):
            return None
    return {"kind": "adjacent_piece", "decisions": list(decisions), "rows": [enc(r) for r in rows],
            "witness": enc(witness), "gradient": enc(tuple(grad))}
