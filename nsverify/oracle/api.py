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

import math
import time
from fractions import Fraction

import torch

from nsverify.errors import InexactError, NonFiniteError, OracleInputError, TooManyPieces, UnsupportedOpError
from nsverify.oracle import boundary, nonfinite
from nsverify.oracle.callenv import user_environment, warn_user
from nsverify.oracle.certificates import (
    BlockProduct,
    ConvexWeights,
    IntervalBracket,
    Lemma2PairCertificate,
    ParkTheorem5,
    ParkTheorem8,
    ParkTheorem8Enclosed,
    SeparatingDirection,
    adjacent_piece,
    park_proxies,
)
from nsverify.oracle.context import Site, TimeLimitExceeded, deadline, tracking
from nsverify.oracle.interp import Evaluation, module_function
from nsverify.oracle.jets import certify_rays
from nsverify.oracle.membership import (
    distance,
    distinct,
    inseparable,
    interval_member_1d,
    member_weights,
    separating_direction,
)
from nsverify.oracle.numbers import is_exact
from nsverify.oracle.ops.singular import NormForm, Singular
from nsverify.oracle.park import enclosed
from nsverify.oracle.park import exact as layered
from nsverify.oracle.pieces import Enumeration, ad_sites, enumerate_pieces, limit_message
from nsverify.oracle.prepass import random_note
from nsverify.oracle.progress import Tracker, reporter
from nsverify.oracle.separable import Blocks, block_decision, candidate_groups, decompose
from nsverify.oracle.verdict import Verdict
from nsverify.registry.rules import renamed_rules_argument

F = Fraction

__all__ = ["check_gradient", "check_module", "DEFAULT_TIME_LIMIT"]

#: seconds a call may take by default (a person waits about a minute; pass time_limit=None for no limit)
DEFAULT_TIME_LIMIT = 60.0


def check_gradient(
    fn,
    w: torch.Tensor,
    ad=None,
    *,
    rules=None,
    max_pieces: int = 10_000,
    on_limit: str = "raise",
    time_limit: float | None = DEFAULT_TIME_LIMIT,
    progress=None,
    shortcuts: bool = True,
    conventions=None,
) -> Verdict:
    """Decide whether the AD of ``fn`` at ``w`` lies in the Clarke subdifferential of the real function.

    ``fn``: callable on a float tensor (any shape), returning a scalar tensor; ``w`` is taken as the exact
    rationals its floats represent.  ``ad``: a vector to test instead of the program's exact AD (taken as
    exact rationals).  ``rules``: AD rules at kinks and ties for the exact AD, op -> rule (a
    :class:`nsverify.Rules` or anything :func:`nsverify.parse_rules` reads, e.g. ``{"relu": "value=1"}``; see
    :func:`exact_gradient`); ``conventions=`` is its deprecated name (a DeprecationWarning, for one release).
    ``max_pieces`` / ``time_limit`` (seconds, default 60; None: no limit): past them raise
    :class:`TooManyPieces` or, with ``on_limit="unknown"``, return "unknown" (member stays possible on the
    pieces already certified).  ``progress``: None (once a call has run 5 s, whatever its stage: a progress
    bar when stderr is a terminal, else a line on stderr every 5 s), False (silent) or a callable taking a
    :class:`~nsverify.oracle.progress.Progress`.  ``shortcuts=False``:
    the plain enumeration only (no separable blocks), e.g. to cross-check a shortcut's verdict.
    """
    rules = renamed_rules_argument(rules, conventions, "check_gradient")
    return _check(fn, w, ad, rules=rules, max_pieces=max_pieces, on_limit=on_limit,
                  time_limit=time_limit, progress=progress, shortcuts=shortcuts)


def _check(fn, w, ad, *, rules, max_pieces, on_limit, time_limit, progress, shortcuts, network=None):
    """:func:`check_gradient`, and for :func:`check_module` the network (model, loss_fn, targets) whose layer
    structure the layered shortcut reads."""
    boundary.check_limits(max_pieces, on_limit, time_limit)
    report = reporter(progress)
    boundary.check_program(fn)
    boundary.check_point(w)
    tracker = Tracker(report, time_limit=time_limit, max_pieces=max_pieces)
    tracker.start()  # the default reporter's ticker: progress appears past 5 s whatever stage the call is in
    try:
        # the hard stop at time_limit: every exact op and every long loop of the oracle polls it (a single large op
        # in chunks), so a call ends within one chunk of work after it; the graceful stops (enumeration, blocks)
        # come first
        with user_environment(), deadline(time_limit), tracking(tracker):
            ev = None
            declined = None
            try:
                v = None
                if network is not None and shortcuts and ad is None and not rules and enclosure_first(w):
                    got = _enclosed_verdict(fn, w, tracker)
                    if isinstance(got, Verdict):
                        v = got
                    else:
                        declined = got
                if v is None:
                    tracker.update(stage="reading w as exact rationals")
                    ev = Evaluation(fn, w, rules, shadow=True)  # millions of parameters take seconds: it polls too
                    with boundary.translated(ev):
                        v = _decide(ev, ad, max_pieces=max_pieces, on_limit=on_limit, time_limit=time_limit,
                                    tracker=tracker, shortcuts=shortcuts, network=network)
            except TooManyPieces as e:
                if isinstance(e, TimeLimitExceeded):  # a poll inside an op or a loop: the message gets the counts
                    e = TooManyPieces(_hard_limit_message(ev, tracker, max_pieces, time_limit))
                if on_limit != "unknown":
                    raise e from None
                ran = ev is not None and ev.ran("float_ad")
                v = _undecided(str(e), ev.float_ad() if ran else None, ad)  # fn is not rerun
        if ev is not None and ev.notes:
            v.stats["notes"] = list(ev.notes)
        if declined:
            v.stats["enclosures_declined"] = declined  # why the enclosed Theorem 8 route did not decide
        tracker.update(stage="done")
    finally:
        tracker.stop()
    return v


#: check_module tries the enclosed Theorem 8 route first from this many parameters (the sizes users train at),
#: before any exact trace; smaller models get the exact route, which also materializes the exact AD
ENCLOSURE_FIRST = 20_000
#: a verdict lists at most this many kink sites (the count is in its stats)
MAX_LISTED_SITES = 1000
#: a verdict records the point (for re-checking with fn) up to this many parameters
MAX_RECORDED_POINT = 2_000_000


def enclosure_first(w: torch.Tensor) -> bool:
    """Whether :func:`check_module` tries :mod:`nsverify.oracle.park.enclosed` before the exact route."""
    return w.numel() >= ENCLOSURE_FIRST


def _enclosed_verdict(fn, w, tracker) -> Verdict | str:
    """member from Park et al.'s Theorem 8 decided on rigorous float enclosures, or why not (a string)."""
    from nsverify.oracle.interp import float_autograd

    got = enclosed.decide(fn, w, tracker)
    if isinstance(got, str):
        return got
    tracker.update(stage="PyTorch's float autograd")
    float_ad = float_autograd(fn, w)
    if not all(math.isfinite(x) for x in float_ad):
        return "enclosures: PyTorch's float gradient holds NaN or inf (diagnosed by the exact route)"
    n = w.numel()
    point = tuple(Fraction(x) for x in w.detach().double().tolist()) if n <= MAX_RECORDED_POINT else None
    where = dict(point=point, shape=tuple(w.shape) if point is not None else None,
                 dtype=str(w.dtype).removeprefix("torch.") if point is not None else None)
    if isinstance(got, enclosed.Lemma2Pair):
        cert = Lemma2PairCertificate(got.coordinate, tuple(got.calls), tuple(got.delta))
        j, (lo, hi) = got.coordinate, got.delta
        stats = {"pieces": 0, "shortcut": "lemma2_pair", "coordinate": j, "delta": [lo, hi],
                 "exact_ad_from": "not materialized (PyTorch's rule, decided as a rule)", **got.stats}
        reason = (f"Park, Chun and Lee's Lemma 2: relu(y) - relu(-y) = y sits at y = 0 and coordinate {j} reaches no "
                  f"other kink; the Clarke set's projection on it is one number, and the exact AD misses it by "
                  f"[{lo:.6g}, {hi:.6g}] (PyTorch's float gradient there: {float_ad[j]:.6g})")
        return Verdict(status="not_member", exact=False, bouligand=[], certificate=cert.to_json(), distance=math.nan,
                       kinks=[Site("relu", c, (), Fraction(0)) for c in got.calls], exact_ad=None, ad=float_ad,
                       tested=(), tested_is="exact_ad", outer=[], reason=reason, value=None, stats=stats,
                       ad_distance=None, distance_bounds=(min(abs(lo), abs(hi)), math.inf), **where)
    cert = ParkTheorem8Enclosed(tuple((L.call, L.kinks, tuple(L.channels), dict(L.direction)) for L in got.layers),
                                {"relu": park_proxies()["relu"]})
    sites = []
    for L in got.layers:
        for c in L.channels:
            if len(sites) >= MAX_LISTED_SITES:
                break
            sites.append(Site("relu", L.call, (c,), Fraction(0), extra={"channel": c, "layer_call": L.call}))
    kinks = sum(L.kinks for L in got.layers)
    stats = {"pieces": 0, "shortcut": "park_theorem8_enclosed", "kink_touches": kinks,
             "layers": [{"call": L.call, "kinks": L.kinks, "channels": len(L.channels)} for L in got.layers],
             "enclosures": got.stats, "enclosure_bits": got.stats.get("enclosure_bits"),
             "float_only_ties": got.stats.get("float_only_ties"),
             "exact_ad_from": "not materialized (PyTorch's rule, decided as a rule)",
             "question": (f"the exact AD -- PyTorch's backward formulas applied in exact arithmetic at w's "
                          f"{str(w.dtype).removeprefix('torch.')} values read exactly (constants as PyTorch computed "
                          "them in the program's dtype) -- against the Clarke subdifferential of the exact function; "
                          "PyTorch's float gradient is reported as ad" + _float_only_text(got.stats, w.dtype))}
    return Verdict(status="member", exact=False, bouligand=[], certificate=cert.to_json(), distance=0.0,
                   kinks=sites, exact_ad=None, ad=float_ad, tested=(), tested_is="exact_ad", outer=[], reason="",
                   value=None, stats=stats, ad_distance=None, distance_bounds=(0.0, 0.0), **where)


def _float_only_text(stats: dict, dtype) -> str:
    """What the verdict says of the ties that exist only in the program's dtype (``stats["float_only_ties"]`` of
    the enclosed route): none, or how many, and that the exact question does not see them."""
    fo = stats.get("float_only_ties") or {}
    if not any(fo.values()):
        return ""
    name = str(dtype).removeprefix("torch.")
    return (f"; {fo.get('relu', 0)} ReLU inputs are 0 and {fo.get('max_pool', 0)} max-pool windows tie only once "
            f"rounded to {name} (their exact values differ, so they are no kinks or ties of the exact function: "
            f"ties of {name} alone)")


def _hard_limit_message(ev: Evaluation | None, tracker: Tracker, max_pieces: int, time_limit: float) -> str:
    """The message of a stop at the hard time limit: where it stopped (the stage), the pieces enumerated so far,
    the kink/tie sites of the AD trace (when that trace had finished), and how far the decision got (the ATen ops
    into the trace; the layers decided and the kink/tie sites left when the layered decision was running).  ``ev``
    is None when reading w itself ran out."""
    far = [f"{tracker.ops} ATen ops into its exact trace"] if tracker.ops else []
    if tracker.how_far():
        far.append(tracker.how_far())
    if ev is None:
        if tracker.stage.startswith("enclosures"):
            far.append("the enclosed route's one float64 run over the whole model did not finish (a model this "
                       "size needs a longer limit on this machine)")
        else:
            far.append("w has too many coordinates to be read as exact rationals in that time")
        what = f"the time limit of {time_limit:g} s ran out during {tracker.stage} after 0 pieces"
        return limit_message(what, 0, max_pieces, time_limit, "; ".join(far))
    first = not ev.ran("forward") and tracker.stage.startswith(("exact AD", "PyTorch's float autograd"))
    where = "the first exact trace (the AD trace)" if first and tracker.stage.startswith("exact AD") else \
        tracker.stage
    what = f"the time limit of {time_limit:g} s ran out during {where} after {tracker.pieces} pieces"
    if first:
        what += "; the AD trace had not finished, so its kink/tie sites are not counted yet"
    return limit_message(what, ad_sites(ev), max_pieces, time_limit, "; ".join(far))


def check_module(
    model: torch.nn.Module, loss_fn, inputs, targets, wrt: str = "parameters", **kwargs
) -> Verdict:
    """:func:`check_gradient` for ``loss_fn(model(inputs), targets)`` w.r.t. all trainable parameters
    (flattened in ``named_parameters()`` order) or the inputs.  Keyword arguments go to
    :func:`check_gradient` (``max_pieces``, ``time_limit``, ``on_limit``, ``rules``, ``progress``)."""
    boundary.check_module_args(model, inputs, loss_fn)
    fn, w = module_function(model, loss_fn, inputs, targets, wrt)
    opts = dict(ad=None, rules=None, max_pieces=10_000, on_limit="raise", time_limit=DEFAULT_TIME_LIMIT,
                progress=None, shortcuts=True)
    if "conventions" in kwargs:
        kwargs["rules"] = renamed_rules_argument(kwargs.get("rules"), kwargs.pop("conventions"), "check_module")
    unknown = set(kwargs) - set(opts)
    if unknown:
        raise OracleInputError(f"check_module got unknown keyword argument(s) {', '.join(sorted(unknown))}; "
                               f"it takes {', '.join(opts)}")
    opts.update(kwargs)
    ad = opts.pop("ad")
    # every call of fn runs the model: a module in training mode updates its buffers (BatchNorm's running
    # statistics) each time; the user's model is left as it was
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        return _check(fn, w, ad, **opts, network=(model, loss_fn, targets) if wrt == "parameters" else None)
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)


def _decide(ev: Evaluation, ad, *, max_pieces: int, on_limit: str, time_limit: float | None,
            tracker: Tracker, shortcuts: bool = True, network=None) -> Verdict:
    """The work of :func:`check_gradient` (arguments already validated there): PyTorch's float AD, then the
    NaN/inf diagnosis (:mod:`nsverify.oracle.nonfinite`) when it holds NaN/inf, else :func:`_decide_exact`."""
    tracker.update(stage="PyTorch's float autograd")
    float_ad = ev.float_ad()
    refusal = ev.survey.refusal() if ev.survey is not None else None
    if refusal is not None:  # every unsupported op at once, before the exact run
        raise refusal
    _refuse_integer_output(ev)
    drawn = random_note(ev.survey)
    if drawn is not None:  # dropout in training mode, weights drawn inside fn: say which function is judged
        ev.notes.append(drawn)
        warn_user(drawn)

    def exact():
        return _decide_exact(ev, ad, float_ad, max_pieces=max_pieces, on_limit=on_limit, time_limit=time_limit,
                             tracker=tracker, shortcuts=shortcuts, network=network)

    if all(math.isfinite(x) for x in float_ad):
        try:
            return exact()
        except ZeroDivisionError as e:  # a pole (a divisor crossing 0) or a value undefined at w: named, classified
            nonfinite.pole_or_undefined(e)
        except NonFiniteError as e:  # an op could not form the value at w (a fully masked softmax row, ...)
            nonfinite.name_undefined(e)
            raise
    tracker.update(stage="NaN/inf diagnosis")
    tested = None if ad is None else boundary.tested_vector(ad, ev.n, allow_nonfinite=True)
    if tested is not None and nonfinite.finite(tested):  # a finite vector to test: the ordinary decision
        return nonfinite.about_pytorch(ev, exact(), float_ad)
    return nonfinite.decide(ev, float_ad, ad, tested, "ad" if ad is not None else "exact_ad", exact)


def _refuse_integer_output(ev: Evaluation) -> None:
    """An integer (or boolean) output computed from w is a step function: refused, never decided."""
    out = ev.record.float_out
    if out is not None and not out[0].startswith("torch.float") and not out[0].startswith("torch.bfloat"):
        raise UnsupportedOpError(
            f"fn returns a {out[0].removeprefix('torch.')} value: an integer-valued output computed from w (a count "
            "such as (w > 0).sum()) is piecewise constant with jumps, so it has no Clarke set where it jumps and "
            "no gradient to check anywhere; return a float function of w (e.g. relu(w).sum() instead of a count)")


def _decide_exact(ev: Evaluation, ad, float_ad, *, max_pieces: int, on_limit: str, time_limit: float | None,
                  tracker: Tracker, shortcuts: bool = True, network=None) -> Verdict:
    """The exact decision of :func:`check_gradient` (the float AD already run)."""
    if ad is not None:
        tested, tested_is = _vector(ad, ev.n), "ad"
    layers_declined = None
    if network is not None and shortcuts and ad is None and not ev.rules:
        got = layered.decide(ev, *network, tracker=tracker)
        if isinstance(got, layered.Layered):
            return _layered_verdict(ev, got, float_ad)
        layers_declined = got
        tracker.no_layers()
    tracker.update(stage="exact AD: forward mode")
    try:
        fw = ev.forward()
    except Singular as e:  # no Clarke set (not locally Lipschitz) or no value (0/0) at w
        nonfinite.raise_singular(e)
    except InexactError as e:
        return _undecided(f"the exact AD could not be evaluated: {e}", float_ad, ad)
    tracker.update(stage="exact AD: reverse mode")
    exact_ad, how = ev.exact_ad(warn=ad is None)
    if ad is None:
        tested, tested_is = exact_ad, "exact_ad"
    if isinstance(fw.form, NormForm):  # a norm at its zero: its Clarke set is a ball (or an ellipsoid)
        return nonfinite.norm_verdict(ev, fw, tested, tested_is, float_ad, how)
    if any(getattr(x, "is_marker", False) for x in tested):  # PyTorch's backward met a singular value exactly
        return _undecided("PyTorch's backward, evaluated exactly, meets a value at a singular point (NaN/inf there) "
                          "although its float gradient is finite", float_ad, ad, fw)
    declined = None
    if (shortcuts and fw.sites and not fw.nonaffine and all(is_exact(x) for x in tested)
            and candidate_groups(fw.sites) >= 2):
        tracker.update(stage="separable blocks")
        blk = decompose(ev, limit=max_pieces, time_limit=time_limit, t0=tracker.t0, tracker=tracker)
        if isinstance(blk, Blocks):
            return _block_verdict(ev, blk, tested, tested_is, fw, exact_ad, how, float_ad, max_pieces)
        declined = blk
    tracker.update(stage="pieces")
    try:
        en = enumerate_pieces(ev, limit=max_pieces, on_limit=on_limit, time_limit=time_limit, tracker=tracker,
                              t0=tracker.t0)
    except Singular as e:
        nonfinite.raise_singular(e)
    except InexactError as e:
        return _undecided(f"the pieces could not be enumerated exactly: {e}", float_ad, ad, fw)
    if en.discontinuous:  # no Clarke set to be a member of: never member/not_member
        return _undecided(en.discontinuous, float_ad, ad, fw)
    if any(type(x) is float for leaf in en.leaves for x in leaf.gradient) or any(type(x) is float for x in tested):
        # exact arithmetic never yields a float; one that slipped in (an op's bug) must not decide anything
        return _undecided("internal error: a float entered the exact arithmetic (please report the program)",
                          float_ad, ad, fw)
    rays, t_rays = None, 0.0
    if en.incomplete is None and not en.exact:  # outer-only pieces: try to certify them along rays (jets)
        tracker.update(stage="rays")
        # at most as long again as the enumeration took (2 s at least), and within half the time limit
        t_rays = time.perf_counter()
        stop = t_rays + max(2.0, en.seconds)
        rays = certify_rays(ev, en.leaves, deadline_s=stop if time_limit is None else
                            min(stop, tracker.t0 + time_limit / 2))
        t_rays = time.perf_counter() - t_rays
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
    if rays is not None:
        stats["ray_pieces"] = rays  # outer-only pieces certified along a ray (second-order sites, jets)
        stats["ray_seconds"] = t_rays
    if declined:
        stats["blocks_declined"] = declined  # why the separable-blocks shortcut did not apply
    if layers_declined:
        stats["layers_declined"] = layers_declined  # why the layered network shortcut did not apply
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
        ad_distance=_float_distance(float_ad, ref) if ref else None,
        distance_bounds=bounds,
        **_where(ev),
    )


def _fmt(v) -> str:
    return "(" + ", ".join(str(x) for x in v) + ")"


def _float_distance(float_ad, ref) -> float:
    """Distance of PyTorch's float AD to a vertex set; inf when the float AD overflowed (inf or NaN entries)."""
    if not all(math.isfinite(x) for x in float_ad):
        return math.inf
    return distance([F(x) for x in float_ad], ref)


def _where(ev) -> dict:
    """The point, shape and dtype a verdict records, for re-checking its certificate with the program."""
    return {"point": tuple(ev.values), "shape": tuple(ev.w.shape), "dtype": str(ev.w.dtype).removeprefix("torch.")}


def _layered_verdict(ev, got, float_ad) -> Verdict:
    """member, certified by Park et al.'s Theorem 5 or 8: the exact AD is a Bouligand subgradient.  Only that
    vertex is known (``exact`` is False: the inner set is the AD itself); no piece was enumerated."""
    layers = got.layers
    touched = {s.op for s in got.sites}  # the activations at a kink: their sides are what the theorem used
    proxies = {name: sides for name, sides in park_proxies().items() if name in touched}
    if got.theorem == "park_theorem5":
        cert = ParkTheorem5(tuple((c.name, c.kink_touches, c.rank_columns, c.rank_minor) for c in layers), proxies)
    else:
        cert = ParkTheorem8(tuple((c.name, tuple(c.rows), c.witness, c.kink_touches, c.tied_windows) for c in layers),
                            proxies)
    stats = {
        "pieces": 0,
        "inner_pieces": 0,
        "lps": got.stats.lps,
        "gordan": got.stats.gordan,
        "uncertain": got.stats.uncertain,
        "lp_seconds": got.stats.lp_seconds,
        "shortcut": got.theorem,
        "layers": [{"layer": c.name, "kinks": c.kink_touches, "tied_windows": c.tied_windows,
                    "nontrivial_windows": c.nontrivial_windows, "rows": len(c.rows), "components": c.components}
                   for c in layers],
        "exact_ad_from": "backward",
        "layers_from": got.source,
    }
    if got.modules_declined:
        stats["layers_declined"] = got.modules_declined  # why the module reading did not apply
    return Verdict(
        status="member",
        exact=False,
        bouligand=[got.exact_ad],
        certificate=cert.to_json(),
        distance=0.0,
        kinks=got.sites,
        exact_ad=got.exact_ad,
        ad=float_ad,
        tested=got.exact_ad,
        tested_is="exact_ad",
        outer=[],
        reason="",
        value=got.value,
        stats=stats,
        ad_distance=None,
        distance_bounds=(0.0, 0.0),
        **_where(ev),
    )


def _block_verdict(ev, blk: Blocks, tested, tested_is, fw, exact_ad, how, float_ad, max_pieces) -> Verdict:
    """The verdict of a separable program: membership decided block by block (the Clarke set is the product of
    the blocks' Clarke sets), with a :class:`BlockProduct` certificate."""
    weights, sep = [], None
    for k, v in blk.fixed.items():
        if tested[k] != v and sep is None:
            sep = ("fixed", k)
    dist2, ad2 = 0.0, 0.0
    finite_ad = all(math.isfinite(x) for x in float_ad)
    for k, v in blk.fixed.items():
        dist2 += float(tested[k] - v) ** 2
        ad2 += (float_ad[k] - float(v)) ** 2 if finite_ad else 0.0
    for i, b in enumerate(blk.blocks):
        t = tuple(tested[k] for k in b.coords)
        lam, h = block_decision(t, b.vertices)
        weights.append(lam)
        if lam is None:
            dist2 += distance(t, b.vertices) ** 2
            if sep is None:
                sep = ("block", i, h) if h is not None else ("undecided", i)
        if finite_ad:
            ad2 += distance([F(float_ad[k]) for k in b.coords], b.vertices) ** 2
    blocks = tuple((b.coords, tuple(b.vertices), lam, tuple(b.witnesses)) for b, lam in zip(blk.blocks, weights))
    reason = ""
    if sep is None:
        status, cert = "member", BlockProduct("member", blocks, dict(blk.fixed))
    elif sep[0] == "undecided":
        status, cert = "unknown", None
        reason = f"no exact separating direction was found on block {sep[1]}"
    else:
        status, cert = "not_member", BlockProduct("not_member", blocks, dict(blk.fixed), sep)
    bouligand = blk.product(max_pieces)
    stats = {
        "pieces": sum(b.pieces for b in blk.blocks),
        "inner_pieces": sum(b.pieces for b in blk.blocks),
        "product_pieces": math.prod(b.pieces for b in blk.blocks),
        "blocks": len(blk.blocks),
        "block_sizes": [len(b.coords) for b in blk.blocks],
        "lps": blk.stats.lps,
        "witness_reuse": blk.stats.witness_reuse,
        "gordan": blk.stats.gordan,
        "nogood_reuse": blk.stats.nogood_reuse,
        "uncertain": blk.stats.uncertain,
        "branch_sites": sum(1 for s in fw.sites if s.slopes),
        "seconds": blk.seconds,
        "lp_seconds": blk.stats.lp_seconds,
        "curved": False,
        "exact_ad_from": how,
        "traces": blk.traces,
    }
    if bouligand is None:
        stats["bouligand_omitted"] = blk.count  # the product is listed per block in the certificate
    return Verdict(
        status=status,
        exact=True,
        bouligand=bouligand or [],
        certificate=None if cert is None else cert.to_json(),
        distance=0.0 if status == "member" else math.sqrt(dist2),
        kinks=fw.sites,
        exact_ad=exact_ad,
        ad=float_ad,
        tested=tuple(tested),
        tested_is=tested_is,
        outer=bouligand or [],
        reason=reason,
        value=fw.value,
        stats=stats,
        ad_distance=math.sqrt(ad2) if finite_ad else math.inf,
        **_where(ev),
    )


def _piece_may_decide(en: Enumeration, tested, inner) -> bool:
    """Whether AD's own adjacent piece can certify membership where convex weights did not.

    Not when the enumeration is exact and every vector is an exact rational: AD's piece, if it existed, would
    be one of the enumerated leaves (no option on its path can be pruned, its cone being open), so its gradient
    -- the tested exact AD -- would be a vertex, found by the weights.  The follow trace is skipped then."""
    return not (en.exact and all(is_exact(x) for x in tested) and all(is_exact(x) for v in inner for x in v))


def _vector(ad, n: int | None = None) -> tuple:
    """A user-given vector to test, as exact numbers (floats taken as the rationals they represent)."""
    return boundary.tested_vector(ad, n)


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
