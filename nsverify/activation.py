"""A pointwise activation: a registry elementwise op with PyTorch's rules at its kinks, or an AD variant of one
(its rules in brackets, in the registry's one rule vocabulary). Network specifications
(:mod:`nsverify.strategies`), Park et al.'s layer engine (:mod:`nsverify.oracle.park`), the monitor and the
premise checkers all name a layer's activation this way."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from nsverify.errors import InexactError


@dataclass(frozen=True)
class Activation:
    """A pointwise activation: ``identity``, a registry elementwise op with PyTorch's rules at its kinks, or an AD
    variant of one: the op with its rules in brackets, in the one rule vocabulary
    (:func:`nsverify.registry.parse_op_rules`).

    ``key`` forms: ``"identity"``, ``"relu"`` (registry name: PyTorch's rules), ``"relu[value=1/2]"`` (one rule
    for every kink: ReLU'(0) = 1/2, Bertoin et al.'s backprop_s), ``"hardtanh[left,right]"`` (one rule per kink:
    ``left``, ``right``, ``inside``, ``mix=<lam>`` = (1-lam) left + lam right, ``value=<d>`` or a number).
    """

    key: str

    def __post_init__(self):
        if self.key != "identity":
            self._parsed  # noqa: B018  (validate the key now: unknown ops and rules raise here)

    @cached_property
    def _parsed(self):
        from nsverify import registry

        return registry.parse_op_rules(self.key)

    @property
    def base(self) -> str:
        """The registry op key (or ``identity``)."""
        return "identity" if self.key == "identity" else self._parsed[0]

    @property
    def variant(self) -> bool:
        """Does the key give its own rules (an AD variant), rather than PyTorch's?"""
        return self.key != "identity" and self._parsed[1] is not None

    @property
    def rules(self) -> tuple:
        """The rule AD uses at each kink (:class:`~nsverify.registry.rules.Rule`; PyTorch's unless a variant)."""
        p = self.primitive()
        if p is None:
            return ()
        return self._parsed[1] if self.variant else p.torch_rules

    def primitive(self):
        from nsverify import registry

        return None if self.base == "identity" else registry.get(self.base)

    @property
    def breakpoints(self) -> tuple[Fraction, ...]:
        p = self.primitive()
        return () if p is None else tuple(p.breakpoints)

    def exact(self, y: Fraction) -> Fraction:
        p = self.primitive()
        if p is None:
            return y
        piece = p.pieces[p.piece_index(y, +1)]
        if not piece.exact:
            raise InexactError(f"activation {self.key!r} has a non-polynomial piece at {y}: no exact value")
        return Fraction(p.value(y))

    def ad_derivatives(self) -> tuple[Fraction, ...]:
        """The derivative this activation's AD uses at each breakpoint (exact)."""
        p = self.primitive()
        if p is None:
            return ()
        return tuple(Fraction(p.kink_derivative(i, r)) for i, r in enumerate(self.rules))

    def flat_low(self) -> Fraction | None:
        """A point on a constant lowest piece ("dead" region), or None when the activation has none."""
        p = self.primitive()
        if p is None or not p.breakpoints:
            return None
        if p.pieces[0].constant:
            return p.breakpoints[0] - 1
        return None

    def torch_fn(self):
        if self.key == "identity":
            return lambda x: x
        if self.variant:
            return _variant_fn(self)
        p = self.primitive()
        fn, kw = p.torch_fn, dict(p.kwargs)
        return (lambda x: fn(x, **kw)) if kw else fn


def _variant_fn(act: Activation):
    """AD-variant activations come from :mod:`nsverify.ad`: ReLU through relu_s, the others through
    piecewise_linear."""
    from nsverify import ad

    if act.base == "relu":
        s = float(act.ad_derivatives()[0])
        return lambda x: ad.relu_s(x, s)
    name, rules = act.base, act.rules
    return lambda x: ad.piecewise_linear(x, name, rules)
