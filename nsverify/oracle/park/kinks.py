"""What AD picks at an activation's kinks, relative to its one-sided derivatives (Park, Chun and Lee).

* :func:`common_lambda` -- the lambda with D^AD rho = (1 - lambda) D^- rho + lambda D^+ rho at every kink
  (the premise of Theorems 4 and 6; the direction of the rule ``mix=lambda``), or None;
* :func:`ad_side` -- whether AD's derivative at a kink is the left or the right derivative, as the Rule
  ``left`` / ``right`` (Algorithm 1's Bouligand proxies);
* :func:`proxy_in_clarke`, :func:`proxy_is_bouligand` -- the activation-level premises of Theorems 1 and 5
  (D^AD rho in the Clarke set of rho) and of Theorem 8 (D^AD rho a one-sided derivative at every kink).
"""

from __future__ import annotations

from fractions import Fraction

from nsverify.ad import Activation
from nsverify.registry.rules import Rule


def common_lambda(act: Activation | str) -> Fraction | None:
    """The lambda in [0, 1] shared by every kink of ``act`` (Theorem 4/6 premise), or None when none exists.

    lambda runs in the direction of the rule ``mix=lambda``: AD's derivative at every kink is
    (1 - lambda) D^- + lambda D^+, so ``Rule("mix", lambda)`` gives it (PyTorch's relu: 0, abs: 1/2). Read from
    the registry (:meth:`nsverify.registry.Elementwise.common_lambda`). An activation without kinks (identity)
    returns 0 (any lambda works)."""
    act = Activation(act) if isinstance(act, str) else act
    p = act.primitive()
    lam = "any" if p is None else p.common_lambda(act.rules)
    return Fraction(0) if lam == "any" else lam


def ad_side(act: Activation, y: Fraction) -> Rule | None:
    """Park's side at the kink y as a Rule: ``left`` / ``right`` when AD's derivative there is the left / right
    derivative, None otherwise (:meth:`nsverify.registry.Elementwise.kink_side`)."""
    p = act.primitive()
    i = p.breakpoints.index(Fraction(y))
    return p.kink_side(i, act.rules[i])


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
    return p is None or p.one_sided_rules(act.rules)
