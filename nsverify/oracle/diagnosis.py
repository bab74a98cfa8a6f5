"""What a non-finite (NaN or +-inf) gradient means at the point where it appeared: the one record that
:func:`nsverify.check_gradient` / :func:`nsverify.check_module` attach to their answer (``Verdict.diagnosis``) or to
the error they raise (``NotLipschitzError.diagnosis``, ``NonFiniteError.diagnosis``), and that the training-time
guard reports.

The four classes follow PyTorch's documented rule for non-differentiable functions (autograd notes, "Gradients for
non-differentiable functions"):

- ``"lipschitz"``: the function is locally Lipschitz at w, so it has a Clarke set and the rule promises a finite
  value; a NaN/inf gradient there is a bug (the verdict is ``not_member``);
- ``"not_lipschitz"``: an infinite one-sided slope, a jump or a value undefined in a neighbourhood: there is no
  Clarke set, and NaN or inf is allowed by the rule;
- ``"undefined"``: the value itself is undefined at w (0/0, NaN): the program has to change;
- ``"overflow"``: the exact derivative is finite but PyTorch's float gradient overflowed to inf.
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: the classes a diagnosis can have, in the order of the autograd notes' rule
KINDS = ("lipschitz", "not_lipschitz", "undefined", "overflow")


@dataclass
class NonFiniteDiagnosis:
    kind: str  # one of KINDS
    op: str | None  # the op that produced the first non-finite value (e.g. "aten.where", "aten.sqrt")
    message: str  # one plain sentence: what happened, whether it is a bug, what the value should be
    #: the value PyTorch's documented rule gives at w (the minimum-norm Clarke element where it applies), exact
    expected: tuple | None = None
    #: the non-finite entries of the returned gradient: indices into the flattened w
    nonfinite_entries: tuple = ()
    #: the exact magnitude of the derivative whose float evaluation overflowed ("overflow" only)
    magnitude: object = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"NonFiniteDiagnosis kind {self.kind!r} is not one of {KINDS}")

    @property
    def allowed(self) -> bool:
        """Whether PyTorch's documented rule allows a NaN/inf gradient here (no Clarke set at w)."""
        return self.kind in ("not_lipschitz", "undefined")

    def to_json(self) -> dict:
        from nsverify.oracle.jsonio import enc

        return {"kind": self.kind, "op": self.op, "message": self.message,
                "expected": enc(self.expected) if self.expected is not None else None,
                "nonfinite_entries": list(self.nonfinite_entries),
                "magnitude": enc(self.magnitude) if self.magnitude is not None else None,
                "allowed": self.allowed, **({"extra": self.extra} if self.extra else {})}
