"""A NaN/inf gradient, decided exactly: :func:`decide` is what :func:`nsverify.check_gradient` does when PyTorch's
gradient (or the tested vector) holds NaN or +-inf, and :func:`norm_verdict` decides a function whose output is a
norm at its zero (:class:`~nsverify.oracle.ops.singular.NormForm`), whatever its gradient.

The classes (:mod:`nsverify.oracle.diagnosis`, docs/oracle.md "What status answers"):

(a) locally Lipschitz at w (the exact trace proved it: every singular op's argument was a norm at 0, a branch of
    ``torch.where`` not taken, ...): ``not_member`` -- a vector with a NaN/inf entry is in no Clarke set -- with the
    op that made the first non-finite value in PyTorch's backward and the value PyTorch's documented rule gives;
(b) not locally Lipschitz: :class:`~nsverify.errors.NotLipschitzError` naming the op (NaN/inf is allowed there);
(c) the value at w is undefined (0/0, NaN): :class:`~nsverify.errors.NonFiniteError` naming the op and the fix;
(d) the exact derivative is finite, PyTorch's float one overflowed: the ordinary verdict about the exact AD, with
    the exact magnitude in its diagnosis.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import torch

from nsverify.errors import InexactError, NonFiniteError, NotLipschitzError, UnsupportedOpError
from nsverify.oracle import callenv
from nsverify.oracle.diagnosis import NonFiniteDiagnosis
from nsverify.oracle.numbers import Ival
from nsverify.oracle.ops.singular import NormForm, Singular
from nsverify.oracle.verdict import Verdict
from nsverify.rational import solve_any

F = Fraction


def finite(v) -> bool:
    return all(isinstance(x, (Fraction, int, Ival)) or (isinstance(x, float) and math.isfinite(x)) for x in v)


def _bad(v) -> tuple:
    return tuple(i for i, x in enumerate(v) if not (isinstance(x, (Fraction, int, Ival))
                                                    or (isinstance(x, float) and math.isfinite(x))))


# ------------------------------------------------------------------------------------ the culprit in the backward
def _op_of(node) -> str:
    name = re.sub(r"Backward\d*$", "", type(node).__name__)
    return "aten." + re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def culprit(ev) -> tuple:
    """``(op, detail)``: the autograd node of PyTorch's own float backward at w that made the first non-finite value
    from finite incoming gradients; detail says when its incoming gradient was 0 (0 times inf or NaN), and names
    the ``torch.where`` whose branch not taken it came through.  fn runs once more (float)."""
    with callenv.user_environment():
        wf = ev.w.detach().clone().requires_grad_(True)
        y = ev._call(wf)
        if not isinstance(y, torch.Tensor) or not y.requires_grad:
            return None, ""
        seen, stack, nodes = set(), [y.grad_fn], []
        while stack:
            n = stack.pop()
            if n is None or n in seen:
                continue
            seen.add(n)
            nodes.append(n)
            stack.extend(f for f, _ in n.next_functions)
        order = []
        handles = [n.register_hook(lambda gi, go, n=n: order.append((n, gi, go))) for n in nodes]
        try:
            torch.autograd.grad(y.reshape(()), wf, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
    fin = lambda ts: all(t is None or bool(torch.isfinite(t).all()) for t in ts)  # noqa: E731
    wheres = []
    for n, gi, go in order:
        if type(n).__name__.startswith("Where"):
            wheres.append(n)
        if not fin(gi) and fin(go):
            zero_in = all(t is None or not bool(t.any()) for t in go)
            op = _op_of(n)
            if zero_in and wheres:
                return "aten.where", (f"torch.where took its other branch, but the branch not taken ({op} there is "
                                      f"not finite) back-propagates 0 x inf = NaN through {op}'s backward")
            if zero_in:
                return op, f"{op}'s backward multiplies an incoming gradient of 0 by an infinite local derivative"
            return op, f"{op}'s backward made the first non-finite value from finite incoming gradients"
    return None, ""


# ------------------------------------------------------------------------------------------------- the classes
def not_lipschitz(e: Singular, entries=()) -> NotLipschitzError:
    msg = (f"fn is not locally Lipschitz at w: {e.reason} (aten.{e.op}). It has no Clarke set there, so no "
           "gradient can be judged; PyTorch's documented rule allows NaN or inf here. Move w off the singular point "
           "or smooth the op (e.g. sqrt(x + eps))")
    return NotLipschitzError(msg, diagnosis=NonFiniteDiagnosis("not_lipschitz", f"aten.{e.op}", msg,
                                                               nonfinite_entries=tuple(entries)))


def undefined(op: str, reason: str, entries=()) -> NonFiniteError:
    msg = (f"fn's value at w is undefined: {reason} ({op}). Fix the program: add an epsilon (normalize/layer_norm "
           "eps > 0, x / (y + eps)) or mask the input before the op (torch.where on the input, not the output)")
    return NonFiniteError(msg, diagnosis=NonFiniteDiagnosis("undefined", op, msg, nonfinite_entries=tuple(entries)))


def name_undefined(e: NonFiniteError, entries=()) -> None:
    """Give a NonFiniteError raised by an exact op (a value it cannot form at w) its "undefined" diagnosis."""
    if e.diagnosis is None:
        from nsverify.oracle import context

        op = context.last_failure()[0]
        e.diagnosis = NonFiniteDiagnosis("undefined", f"aten.{op}" if op else None, str(e),
                                         nonfinite_entries=tuple(entries))


def raise_singular(e: Singular, entries=()):
    if e.kind == "not_lipschitz":
        raise not_lipschitz(e, entries) from None
    raise undefined(f"aten.{e.op}", e.reason, entries) from None


def pole_or_undefined(err: ZeroDivisionError, entries=()):
    """A division by an exact zero in the exact trace: a divisor that varies with w crosses 0 there (a pole: not
    locally Lipschitz); a constant zero divisor makes the value undefined at w."""
    from nsverify.oracle import context

    op = context.last_failure()[0] or "div"
    if "varies with w" in str(err):
        e = Singular("not_lipschitz", op, "fn divides by an exact zero at w, by a value that crosses 0 there: a pole "
                     "(no bound nearby); guard the division (e.g. x / (y + eps)) or move w")
        raise not_lipschitz(e, entries) from None
    raise undefined(f"aten.{op}", "fn divides by an exact zero at w (a divisor that is 0 near w); guard the division "
                    "(e.g. x / (y + eps))", entries) from None


# ------------------------------------------------------------------------------------------- the Clarke set
def _ellipsoid_member(y, sq, n) -> bool:
    """y in {M^(1/2) u : |u| <= 1}, M = sq.matrix(n): y in range(M) and y^T M^+ y <= 1, exactly."""
    m = sq.matrix(n)
    x = solve_any(m, list(y))
    if x is None:
        return False
    return sum(a * b for a, b in zip(y, x)) <= 1


def clarke_of_form(form: NormForm, n: int):
    """``(member(t) -> bool | None, description, expected)``: the exact Clarke set of a NormForm output (one norm
    term, or several of one sign sharing... only one is decided), the min-norm element where it is rational."""
    if not form.terms:
        g = tuple(form.sg.get(i, F(0)) for i in range(n))
        return (lambda t: tuple(t) == g), f"the single gradient {g}", g
    if len(form.terms) != 1:
        return None, "a sum of several norms at their zero (not decided)", None
    s, sq = form.terms[0]
    if not isinstance(s, Fraction):
        return None, "a norm term with an irrational coefficient (not decided)", None
    c = tuple(form.sg.get(i, F(0)) for i in range(n))

    def member(t):
        if any(not isinstance(x, Fraction) for x in t):
            return None
        return _ellipsoid_member(tuple((a - b) / abs(s) for a, b in zip(t, c)), sq, n)

    zero_in = member((F(0),) * n)
    expected = (F(0),) * n if zero_in else (c if not sq.comps else None)
    ball = "the unit ball" if sq.matrix(n) == [[F(int(i == j)) for j in range(n)] for i in range(n)] else \
        "the ellipsoid {M^(1/2) u : |u| <= 1}, M = sum_i c_i g_i g_i^T"
    desc = (f"{_v(c)} + {s} * {ball}" if any(c) or s != 1 else ball)
    return member, desc, expected


def _v(v) -> str:
    """A vector for people (exact entries as fractions, enclosures as rounded digits, long vectors shortened)."""
    from nsverify.oracle.verdict import _vec

    return _vec(tuple(v), False)


def _cert(desc, form, n, entries, extra=None) -> dict:
    d = {"kind": "nonfinite_diagnosis", "clarke": desc, "nonfinite_entries": list(entries)}
    if form is not None and len(form.terms) <= 1:
        s, sq = form.terms[0] if form.terms else (F(1), None)
        d["center"] = [str(form.sg.get(i, F(0))) for i in range(n)]
        d["scale"] = str(s)
        d["squares"] = [[str(c), {str(k): str(v) for k, v in g.items()}] for c, g in (sq.comps if sq else ())]
    d.update(extra or {})
    return d


# ------------------------------------------------------------------------------------------------- decisions
def decide(ev, float_ad, ad, tested, tested_is, normal):
    """The verdict (or error) when PyTorch's gradient, or the tested vector, holds NaN/inf.  ``normal()``: the
    ordinary decision (for the overflow class, whose exact AD is finite)."""
    bad = _bad(tested) if tested is not None else _bad(float_ad)
    try:
        fw = ev.forward()
    except Singular as e:
        raise_singular(e, bad)
    except ZeroDivisionError as err:
        pole_or_undefined(err, bad)
    except NonFiniteError as e:  # a value the exact trace cannot form at w (a fully masked softmax row, ...)
        name_undefined(e, bad)
        raise
    except InexactError as e:
        return _unknown(ev, float_ad, tested, tested_is, f"whether fn is locally Lipschitz at w is not decided: {e}")
    if tested is None:  # PyTorch's AD, exactly: finite means the float one overflowed (class d)
        try:
            g, _ = ev.reverse()
            exact_finite = finite(g)
        except (ZeroDivisionError, Singular):
            exact_finite = False  # an exact division by 0 (or 0 x undefined) in PyTorch's own backward
        except (UnsupportedOpError, InexactError):
            exact_finite = None
        if exact_finite:
            v = normal()
            return overflowed(v, float_ad, g)
        tested, tested_is = tuple(F(x) if math.isfinite(x) else x for x in float_ad), "float_ad"
        bad = _bad(float_ad)
    op, detail = culprit(ev)
    if fw.form is not None:  # a norm at its zero: Lipschitz when no kink was met
        if fw.sites:
            return _unknown(ev, float_ad, tested, tested_is, "a norm at its zero together with kinks: whether the "
                            "Clarke set is reached is not decided", fw)
        member, desc, expected = clarke_of_form(fw.form, ev.n)
        form = fw.form
    else:
        try:
            if fw.sites:
                from nsverify.oracle.pieces import enumerate_pieces

                en = enumerate_pieces(ev, limit=10_000, on_limit="unknown")
                if en.discontinuous:
                    raise NotLipschitzError(f"fn is not locally Lipschitz at w: {en.discontinuous}",
                                            diagnosis=NonFiniteDiagnosis("not_lipschitz", op, en.discontinuous,
                                                                         nonfinite_entries=bad))
                if en.incomplete or not en.exact:
                    return _unknown(ev, float_ad, tested, tested_is, "the pieces around w could not all be certified "
                                    f"({en.incomplete or 'outer-only pieces'}), so the Clarke set is not known", fw)
                verts = sorted({tuple(leaf.gradient) for leaf in en.leaves}, key=str)
            else:
                verts = [tuple(fw.gradient)]
        except Singular as e:
            raise_singular(e, bad)
        desc = (f"the single gradient {_v(verts[0])}" if len(verts) == 1 else
                f"the convex hull of {len(verts)} piece gradients")
        expected = verts[0] if len(verts) == 1 else None
        if expected is None and all(isinstance(x, Fraction) for v in verts for x in v):
            from nsverify.oracle.membership import member_weights

            if member_weights((F(0),) * ev.n, verts) is not None:
                expected = (F(0),) * ev.n
        form = None
    rule = ("the minimum-norm element of the Clarke set" if expected is not None else
            "the minimum-norm Clarke element (not rational here, or the function is not locally convex/concave: "
            "the rule does not fix a value)")
    exp_txt = _v(expected) if expected is not None else "not given exactly"
    who = "PyTorch's gradient" if tested_is != "ad" else "the vector you gave"
    msg = (f"{who} has NaN/inf in entr{'y' if len(bad) == 1 else 'ies'} {list(bad)[:8]} although fn is locally "
           f"Lipschitz at w (Clarke set: {desc}): a bug. {detail or 'The first non-finite value: ' + str(op)}. "
           f"PyTorch's documented rule gives {rule}: {exp_txt}")
    diag = NonFiniteDiagnosis("lipschitz", op, msg, expected=expected, nonfinite_entries=bad,
                              extra={"clarke": desc})
    return Verdict(status="not_member", exact=True, bouligand=[expected] if expected is not None and form is None
                   and "single" in desc else [], certificate=_cert(desc, form, ev.n, bad),
                   distance=math.inf, kinks=fw.sites, exact_ad=None, ad=float_ad, tested=tuple(tested),
                   tested_is=tested_is, reason="", value=fw.value, stats={"nonfinite": True},
                   ad_distance=math.inf, diagnosis=diag, **_where(ev))


def _where(ev) -> dict:
    return {"point": tuple(ev.values), "shape": tuple(ev.w.shape), "dtype": str(ev.w.dtype).removeprefix("torch.")}


def _unknown(ev, float_ad, tested, tested_is, reason, fw=None) -> Verdict:
    return Verdict(status="unknown", exact=False, bouligand=[], certificate=None, distance=float("nan"),
                   kinks=fw.sites if fw is not None else [], exact_ad=None, ad=float_ad,
                   tested=tuple(tested or ()), tested_is=tested_is, reason=reason,
                   value=fw.value if fw is not None else None)


def overflowed(v: Verdict, float_ad, exact) -> Verdict:
    """Class (d): the verdict about the exact AD, with the overflow's diagnosis (the exact magnitude)."""
    bad = _bad(float_ad)
    mags = [exact[i] for i in bad]
    big = max(mags, key=lambda x: max(abs(x.lo), abs(x.hi)) if isinstance(x, Ival) else abs(x))
    from nsverify.oracle.verdict import _s

    msg = (f"PyTorch's {v.dtype or 'float'} AD overflowed to inf/NaN in entr{'y' if len(bad) == 1 else 'ies'} "
           f"{list(bad)[:8]}; the exact derivative is finite (largest magnitude {_s(big)}). The verdict is about the "
           "exact AD")
    v.diagnosis = NonFiniteDiagnosis("overflow", None, msg, nonfinite_entries=bad, magnitude=big)
    return v


def about_pytorch(ev, v: Verdict, float_ad) -> Verdict:
    """The verdict about a finite ``ad=`` vector where PyTorch's own gradient is non-finite: the overflow's
    diagnosis when PyTorch's backward, evaluated exactly, is finite; else a note (its diagnosis is a call without
    ``ad=``)."""
    try:
        g, _ = ev.reverse()
        ok = finite(g)
    except (ZeroDivisionError, UnsupportedOpError, InexactError):
        ok = False
    if ok:
        return overflowed(v, float_ad, g)
    ev.notes.append(
        "PyTorch's float gradient holds NaN/inf here (entries " + str(list(_bad(float_ad))[:8]) + "); call "
        "check_gradient without ad= for its diagnosis")
    return v


def norm_verdict(ev, fw, tested, tested_is, float_ad, how) -> Verdict:
    """A finite tested vector against the Clarke set of a norm at its zero (no kink met): exact membership."""
    if fw.sites:
        return _unknown(ev, float_ad, tested, tested_is, "a norm at its zero together with kinks: not decided", fw)
    member, desc, expected = clarke_of_form(fw.form, ev.n)
    if not fw.form.ad_zero and tested_is == "exact_ad":  # PyTorch's sqrt at 0: test what it returned
        tested, tested_is = tuple(F(x) for x in float_ad), "float_ad"
    got = member(tested) if member is not None else None
    if got is None:
        return _unknown(ev, float_ad, tested, tested_is, f"the Clarke set is {desc}: membership not decided", fw)
    status = "member" if got else "not_member"
    return Verdict(status=status, exact=True, bouligand=[], certificate=_cert(desc, fw.form, ev.n, (),
                   {"kind": "norm_ball", "member": got}), distance=0.0 if got else float("nan"), kinks=fw.sites,
                   exact_ad=tuple(fw.gradient), ad=float_ad, tested=tuple(tested), tested_is=tested_is,
                   reason="", value=fw.value, stats={"clarke": desc, "expected": None if expected is None else
                   [str(x) for x in expected], "exact_ad_from": how}, **_where(ev))
