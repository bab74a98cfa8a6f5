"""Public entry points :func:`check_gradient` and :func:`check_module`: the oracle's one path.

    fn, w --> Evaluation --> pieces --> certificate --> Verdict
              (interp)       (pieces)   (certificates)  (verdict)

1. :class:`~nsverify.oracle.interp.Evaluation` holds w's exact values and runs each trace once: float
   autograd, the exact forward-mode AD with its float shadow (which ties the floats saw), and the exact
   reverse-mode AD (PyTorch's backward formulas, custom autograd.Function rules included).
2. :func:`~nsverify.oracle.pieces.enumerate_pieces` replays the program once per piece adjacent to w (no replay
   at all when the AD trace met no kink or tie).
3. :mod:`~nsverify.oracle.certificates` writes the certificate that decides the tested vector: convex weights,
   a 1-D bracket, AD's own adjacent piece, or a separating direction.
4. The :class:`~nsverify.oracle.verdict.Verdict` carries the answer, the sets and the certificate.
"""

from __future__ import annotations

from fractions import Fraction

import torch

from nsverify.errors import InexactError, NsverifyError, TooManyPieces
from nsverify.oracle.certificates import ConvexWeights, IntervalBracket, SeparatingDirection, adjacent_piece
from nsverify.oracle.context import deadline
from nsverify.oracle.interp import Evaluation, module_function
from nsverify.oracle.membership import (
    distance,
    distinct,
    inseparable,
    interval_member_1d,
    member_weights,
    separating_direction,
)
from nsverify.oracle.numbers import Ival, is_exact
from nsverify.oracle.pieces import Enumeration, enumerate_pieces
from nsverify.oracle.verdict import Verdict

F = Fraction

__all__ = ["check_gradient", "check_module"]


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
    # a hard stop slightly after time_limit, for single evaluations too large to finish (huge forward mode)
    with deadline(None if time_limit is None else time_limit * 1.1 + 1):
        ev = Evaluation(fn, w, conventions, shadow=True)
        try:
            return _decide(ev, ad, max_pieces=max_pieces, on_limit=on_limit, time_limit=time_limit)
        except TooManyPieces as e:
            if on_limit != "unknown":
                raise
            return _undecided(str(e), ev.float_ad(), ad)


def check_module(
    model: torch.nn.Module, loss_fn, inputs, targets, wrt: str = "parameters", **kwargs
) -> Verdict:
    """:func:`check_gradient` for ``loss_fn(model(inputs), targets)`` w.r.t. all trainable parameters
    (flattened in ``named_parameters()`` order) or the inputs."""
    fn, w = module_function(model, loss_fn, inputs, targets, wrt)
    return check_gradient(fn, w, **kwargs)


def _decide(ev: Evaluation, ad, *, max_pieces: int, on_limit: str, time_limit: float | None) -> Verdict:
    """The work of :func:`check_gradient` (arguments already validated there)."""
    float_ad = ev.float_ad()
    try:
        fw = ev.forward()
    except InexactError as e:
        return _undecided(f"the exact AD could not be evaluated: {e}", float_ad, ad)
    exact_ad, how = ev.exact_ad()
    if ad is None:
        tested, tested_is = exact_ad, "exact_ad"
    else:
        tested, tested_is = _vector(ad), "ad"
        if len(tested) != ev.n:
            raise NsverifyError(
                f"ad has {len(tested)} entries but w has {ev.n}; give one entry per coordinate of w"
            )
    try:
        en = enumerate_pieces(ev, limit=max_pieces, on_limit=on_limit, time_limit=time_limit)
    except InexactError as e:
        return _undecided(f"the pieces could not be enumerated exactly: {e}", float_ad, ad, fw)
    inner_leaves = [leaf for leaf in en.leaves if leaf.inner]
    inner = distinct(leaf.gradient for leaf in inner_leaves)
    outer = distinct(leaf.gradient for leaf in en.leaves)
    # the bracket closes when every combinatorially possible gradient is also certified
    exact = en.exact or (en.incomplete is None and set(outer) == set(inner))
    status, cert, reason = "unknown", None, ""
    clash = inseparable(outer)
    lam = member_weights(tested, inner) if clash is None else None
    bracket = interval_member_1d(tested, inner) if lam is None and clash is None else None
    if clash is not None:  # never merged, never decided: they may be one Bouligand gradient or two
        reason = (f"two piece gradients, {_fmt(outer[clash[0]])} and {_fmt(outer[clash[1]])}, cannot be separated "
                  "by their interval enclosures (one vertex or two?)")
    elif lam is not None:
        status, cert = "member", ConvexWeights.of(lam, inner, en.leaves, en.incomplete is None)
    elif bracket is not None:
        status, cert = "member", IntervalBracket.of(*bracket, inner, en.leaves, en.incomplete is None)
    elif clash is None and tested_is == "exact_ad" and _piece_may_decide(en, tested, inner) and (
        piece := adjacent_piece(ev, exact_ad)
    ) is not None:
        status, cert = "member", piece
    elif en.incomplete:
        reason = en.incomplete
    else:
        h = separating_direction(tested, outer)
        if h is not None:
            status, cert = "not_member", SeparatingDirection.of(h, "bouligand" if exact else "outer", outer, en.leaves)
        elif exact and (lam := member_weights(tested, inner, exact=True)) is not None:  # a gap the float LP missed
            status, cert = "member", ConvexWeights.of(lam, inner, en.leaves)
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
        certificate=None if cert is None else cert.to_json(),
        distance=dist,
        kinks=fw.sites,
        exact_ad=exact_ad,
        ad=float_ad,
        tested=tuple(tested),
        tested_is=tested_is,
        outer=outer,
        reason=reason,
        value=fw.value,
        stats=stats,
        ad_distance=distance([F(x) for x in float_ad], ref) if ref else None,
        distance_bounds=bounds,
        point=tuple(ev.values),
        shape=tuple(ev.w.shape),
        dtype=str(ev.w.dtype).removeprefix("torch."),
    )


def _fmt(v) -> str:
    return "(" + ", ".join(str(x) for x in v) + ")"


def _piece_may_decide(en: Enumeration, tested, inner) -> bool:
    """Whether AD's own adjacent piece can certify membership where convex weights did not.

    Not when the enumeration is exact and every vector is an exact rational: AD's piece, if it existed, would
    be one of the enumerated leaves (no option on its path can be pruned, its cone being open), so its gradient
    -- the tested exact AD -- would be a vertex, found by the weights.  The follow trace is skipped then."""
    return not (en.exact and all(is_exact(x) for x in tested) and all(is_exact(x) for v in inner for x in v))


def _vector(ad) -> tuple:
    """A user-given vector to test, as exact numbers (floats taken as the rationals they represent)."""
    adv = ad.detach().reshape(-1).double().tolist() if isinstance(ad, torch.Tensor) else list(ad)
    return tuple(x if isinstance(x, (Fraction, Ival)) else F(x) for x in adv)


def _undecided(reason, float_ad, ad, fw=None) -> Verdict:
    """An "unknown" verdict when intervals (or an inexact value) cannot decide."""
    exact_ad = fw.gradient if fw is not None else None
    if ad is not None:
        tested, tested_is = _vector(ad), "ad"
    else:
        tested, tested_is = (exact_ad or ()), "exact_ad"
    return Verdict(
        status="unknown",
        exact=False,
        bouligand=[],
        certificate=None,
        distance=float("nan"),
        kinks=fw.sites if fw is not None else [],
        exact_ad=exact_ad,
        ad=float_ad,
        tested=tuple(tested),
        tested_is=tested_is,
        reason=reason,
        value=fw.value if fw is not None else None,
    )
