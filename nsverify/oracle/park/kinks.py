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


# ------------------------------------------------------------------------------ the engine's layer activations
# Park et al.'s layer theorems (Theorems 5 and 8) cover an activation by capability, never by name: a registry
# entry with ``park_layer`` (fixed, piecewise linear, a one-sided derivative at every kink under PyTorch's rules).
# Its kinks are every non-differentiable breakpoint of the instance a module or call describes; AD's derivative
# at a kink is the entry's rule's (PyTorch's: the layered decisions run only without ``rules=``).
def layer_entry(entry):
    """``entry`` when Park's layer theorems cover it (:attr:`~nsverify.registry.Elementwise.park_layer`), else
    None (also for None)."""
    return entry if entry is not None and entry.park_layer else None


def kink_sign(inst, i: int) -> int:
    """Park's side at breakpoint ``i`` of ``inst`` under PyTorch's rule as a sign: -1 when AD takes the left
    piece's derivative (Algorithm 1's row is -pi), +1 for the right piece's (row +pi). Raises ValueError when the
    rule is not one-sided (not a Bouligand proxy: Theorem 8 does not apply)."""
    side = inst.kink_side(i)
    if side is None:
        raise ValueError(f"{inst.name}: AD's derivative at the kink {inst.breakpoints[i]} is not a one-sided "
                         "derivative (Theorem 8 needs a Bouligand proxy at every kink)")
    return -1 if side.name == "left" else 1


def _position(v, b) -> int | None:
    """The sign of v - b (v exact or an enclosure), None when an enclosure does not decide it."""
    from nsverify.oracle.numbers import sign, val

    x = val(v)
    if isinstance(x, (Fraction, int)):
        return (x > b) - (x < b)
    return sign(x if b == 0 else x - b)


def kink_touches(inst, values) -> list[tuple[int, int]]:
    """``(position, breakpoint index)`` of every entry of ``values`` (a flat list of exact numbers or
    enclosures) that sits exactly on a kink of ``inst``, in order. Breakpoints where both sides have the same
    derivative are no kinks. Raises ValueError when an enclosure does not decide whether it is on a kink."""
    kinks = {b: i for i, b in enumerate(inst.breakpoints) if b in inst.kinks}
    if not kinks:
        return []
    from nsverify.oracle.context import polled

    out = []
    for pos, v in enumerate(polled(values)):  # a full-width layer's millions of pre-activations: poll the limit
        if isinstance(v, (Fraction, int)):
            i = kinks.get(v)
            if i is not None:
                out.append((pos, i))
            continue
        for b, i in kinks.items():
            s = _position(v, b)
            if s is None:
                raise ValueError(f"{inst.name}: whether a pre-activation sits on the kink {b} is not decided by "
                                 "its enclosure")
            if s == 0:
                out.append((pos, i))
    return out


def ad_derivative(inst, v) -> Fraction:
    """AD's derivative of ``inst`` at the pre-activation ``v`` under PyTorch's rules (the piece's slope off the
    breakpoints, the rule's at one): exact, for a piecewise-linear entry, also when ``v`` is an enclosure whose
    position relative to every breakpoint is decided. Raises ValueError otherwise."""
    for i, b in enumerate(inst.breakpoints):
        s = _position(v, b)
        if s is None:
            raise ValueError(f"{inst.name}: the piece of a pre-activation is not decided by its enclosure")
        if s == 0:
            return Fraction(inst.kink_derivative(i))
        if s < 0:
            return Fraction(inst.pieces[i].derivative(Fraction(b)))
    last = inst.breakpoints[-1] if inst.breakpoints else Fraction(0)
    return Fraction(inst.pieces[-1].derivative(Fraction(last)))
