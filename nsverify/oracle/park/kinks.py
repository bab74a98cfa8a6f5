"""What AD picks at an activation's kinks, relative to its one-sided derivatives (Park, Chun and Lee).

* :func:`common_lambda` -- the lambda with D^AD rho = lambda D^- rho + (1 - lambda) D^+ rho at every kink
  (the premise of Theorems 4 and 6), or None;
* :func:`ad_side` -- whether AD's derivative at a kink is the left or the right derivative (Algorithm 1's
  Bouligand proxies);
* :func:`proxy_in_clarke`, :func:`proxy_is_bouligand` -- the activation-level premises of Theorems 1 and 5
  (D^AD rho in the Clarke set of rho) and of Theorem 8 (D^AD rho a one-sided derivative at every kink).
"""

from __future__ import annotations

from fractions import Fraction

from nsverify.strategies.netspec import Activation


def common_lambda(act: Activation | str) -> Fraction | None:
    """The lambda in [0, 1] shared by every kink of ``act`` (Theorem 4/6 premise), or None when none exists.

    At a kink b with one-sided derivatives D^-, D^+ and AD derivative d: lambda_b = (d - D^+) / (D^- - D^+).
    An activation without kinks (identity) returns 1 (any lambda works)."""
    act = Activation(act) if isinstance(act, str) else act
    p = act.primitive()
    if p is None:
        return Fraction(1)
    lams = set()
    for b, d in zip(p.breakpoints, act.ad_derivatives()):
        left, right = (Fraction(v) for v in p.one_sided(b))
        if left == right:
            continue
        lam = (Fraction(d) - right) / (left - right)
        if not 0 <= lam <= 1:
            return None
        lams.add(lam)
    if len(lams) > 1:
        return None
    return lams.pop() if lams else Fraction(1)


def ad_side(act: Activation, y: Fraction) -> str | None:
    """'-' or '+' when AD's derivative at the kink y equals the left/right derivative, None otherwise."""
    p = act.primitive()
    d = dict(zip(p.breakpoints, act.ad_derivatives()))[Fraction(y)]
    left, right = (Fraction(v) for v in p.one_sided(Fraction(y)))
    if d == left:
        return "-"
    if d == right:
        return "+"
    return None


def proxy_in_clarke(key: str) -> bool:
    """D^AD rho(b) lies between the one-sided derivatives at every kink b (Theorems 1 and 5)."""
    act = Activation(key)
    p = act.primitive()
    if p is None:
        return True
    for b, d in zip(p.breakpoints, act.ad_derivatives()):
        left, right = (Fraction(v) for v in p.one_sided(b))
        if not min(left, right) <= Fraction(d) <= max(left, right):
            return False
    return True


def proxy_is_bouligand(key: str) -> bool:
    """D^AD rho(b) equals a one-sided derivative at every kink b (Theorem 8)."""
    act = Activation(key)
    p = act.primitive()
    return p is None or all(ad_side(act, b) is not None for b in p.breakpoints)
