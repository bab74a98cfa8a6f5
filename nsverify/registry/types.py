"""The registry's entry types: :class:`Elementwise` (piecewise-smooth scalar functions with kinks),
:class:`Selection` (max-like ops with ties), the :class:`TieCase` inputs that sit exactly on a tie, and the
:class:`Violation` records of PyTorch derivatives outside the Clarke set."""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

import mpmath

from nsverify.errors import NsverifyError
from nsverify.registry.exact import as_fraction_vec, exact_tensor
from nsverify.registry.rules import Rule, parse_rule
from nsverify.registry.windows import Window, bouligand_pieces, gradient, rule_vectors, select

F = Fraction
Vec = tuple[Fraction, ...]


# ----------------------------------------------------------------------------------------------------
# torch releases
# ----------------------------------------------------------------------------------------------------
#: the modes a rule can differ in (as the conventions matrix names them)
AD_MODES = ("eager", "func", "jvp", "compile")


def release_key(release: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch release ("2.14.1"; a local part such as "+cpu" is dropped)."""
    parts = str(release).split("+")[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise NsverifyError(f"{release!r} is not a torch release: write MAJOR.MINOR.PATCH, e.g. 2.14.1.")
    return tuple(int(p) for p in parts)  # type: ignore[return-value]


def release_of(version: str) -> str:
    """The release of a torch version string: "2.13.0+cpu" -> "2.13.0", "2.15.0a0+git1" -> "2.15.0"."""
    nums = []
    for part in str(version).split("+")[0].split(".")[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        nums.append(digits or "0")
    return ".".join(nums + ["0"] * (3 - len(nums)))


@functools.lru_cache(maxsize=1)
def installed_release() -> str:
    """The release of the installed torch ("2.13.0")."""
    import torch

    return release_of(torch.__version__)


def _in_range(release: str, since: str | None, until: str | None) -> bool:
    k = release_key(release)
    return (since is None or release_key(since) <= k) and (until is None or k < release_key(until))


# ----------------------------------------------------------------------------------------------------
# Recorded violations and rule changes across releases
# ----------------------------------------------------------------------------------------------------
VIOLATION_KINDS = ("no", "rounding")


@dataclass(frozen=True)
class Violation:
    """A PyTorch derivative at a kink or tie that is not (exactly) in the Clarke set, with its reason.

    ``kind``: ``"no"`` (outside the Clarke set of the exact function) or ``"rounding"`` (PyTorch applies an
    exact Clarke rule whose value the dtype cannot represent). ``dtypes``: the dtype names it occurs in (empty:
    every dtype). ``since`` / ``until``: the torch releases it occurs in, ``since <= release < until`` (None: no
    bound; ``until`` is the release that fixed it). The property suite (``properties/``, shipped as
    ``nsverify.properties``) fails on a case outside the Clarke set that records no violation for the installed
    release and on a recorded violation that no longer occurs there, and reports one whose range has ended as
    "fixed in <until>"."""

    kind: str
    reason: str
    dtypes: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None

    def __post_init__(self):
        if self.kind not in VIOLATION_KINDS:
            raise NsverifyError(f"violation kind {self.kind!r} is unknown: use one of {VIOLATION_KINDS}.")
        for r in (self.since, self.until):
            if r is not None:
                release_key(r)
        if self.since and self.until and release_key(self.since) >= release_key(self.until):
            raise NsverifyError(f"violation range since={self.since} until={self.until} is empty.")

    def in_dtype(self, dtype: str) -> bool:
        return not self.dtypes or dtype in self.dtypes

    def in_release(self, release: str | None = None) -> bool:
        """Does it occur in ``release`` (default: the installed torch)?"""
        return _in_range(release or installed_release(), self.since, self.until)

    def applies(self, dtype: str, release: str | None = None) -> bool:
        """Does this violation occur in the dtype named ``dtype`` (e.g. "float32") and in ``release`` (default:
        the installed torch)?"""
        return self.in_dtype(dtype) and self.in_release(release)

    @property
    def releases(self) -> str:
        """The release range as text: "< 2.14.0", ">= 2.4.0", "2.4.0 .. < 2.14.0", "every release"."""
        if self.since and self.until:
            return f"{self.since} .. < {self.until}"
        return f">= {self.since}" if self.since else f"< {self.until}" if self.until else "every release"


def _violation_for(violations: Sequence[Violation], dtype: str, release: str | None = None) -> Violation | None:
    return next((v for v in violations if v.applies(dtype, release)), None)


@dataclass(frozen=True)
class RuleChange:
    """PyTorch changed its rule at a kink or tie in release ``since``: ``before`` -> ``after``.

    On an :class:`Elementwise` entry ``before`` and ``after`` hold one rule per kink; on a :class:`TieCase` they
    are tie rules and ``modes`` limits the change to those modes (empty: every mode). ``note`` says what changed
    (and where it was reported). Entries resolve their rules for the installed release (or ``release=``)."""

    since: str
    before: object
    after: object
    modes: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self):
        release_key(self.since)
        bad = [m for m in self.modes if m not in AD_MODES]
        if bad:
            raise NsverifyError(f"rule change modes {bad}: use {AD_MODES}.")

    def covers(self, mode: str) -> bool:
        return not self.modes or mode in self.modes


def _check_chain(name: str, changes: Sequence[RuleChange]) -> None:
    """Consecutive changes must agree: each one starts from the rule the previous one ended with."""
    chs = sorted(changes, key=lambda c: release_key(c.since))
    for a, b in zip(chs, chs[1:]):
        if a.after != b.before:
            raise NsverifyError(f"{name}: rule change at {b.since} starts from {b.before}, but the change at "
                                f"{a.since} ended with {a.after}.")


def _chain(changes: Sequence[RuleChange], release: str, default):
    """The rule in ``release`` along a chain of changes (sorted by release), ``default`` with no changes."""
    chs = sorted(changes, key=lambda c: release_key(c.since))
    if not chs:
        return default
    past = [c for c in chs if release_key(c.since) <= release_key(release)]
    return past[-1].after if past else chs[0].before


# ----------------------------------------------------------------------------------------------------
# Capabilities: what consumers select entries by (never by an op's name)
# ----------------------------------------------------------------------------------------------------
#: every capability an entry states (:meth:`Elementwise.capabilities`, :meth:`Selection.capabilities`), with its
#: meaning; :func:`nsverify.registry.select` filters the table by them (docs/registry.md lists who reads each)
CAPABILITIES: dict[str, str] = {
    "kind": '"elementwise" (kinks) or "selection" (ties)',
    "fixed": "a fixed function of its input (no learnable tensor argument)",
    "learnable": "the name of the tensor argument that is a parameter of the op (prelu: weight), or None",
    "exact": "every piece is a polynomial with rational coefficients (the exact oracle evaluates the op)",
    "piecewise_linear": "every piece is affine",
    "one_sided_rules": "PyTorch's rule takes an adjacent piece's derivative at every kink or tie (a Bouligand "
                       "proxy)",
    "park_layer": "Park et al.'s layer theorems (Theorems 5 and 8) cover it as a layer's activation: fixed, "
                  "piecewise linear, one-sided rules",
    "autograd_nodes": "the autograd node classes its forward calls produce (select with autograd_node=NAME)",
    "jax": "it has a JAX counterpart (the JAX conventions matrix measures it)",
}


# ----------------------------------------------------------------------------------------------------
# Elementwise pieces
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    """One smooth piece of an elementwise function.

    ``poly``: exact polynomial coefficients (c0, c1, c2, ...) when the piece is a polynomial, else ``None``.
    ``mp``/``dmp``: value and derivative in mpmath (used for non-polynomial pieces, and to cross-check).
    """

    poly: tuple[Fraction, ...] | None = None
    mp: Callable | None = None
    dmp: Callable | None = None

    def value(self, x):
        if self.poly is not None:
            return sum((c * x**k for k, c in enumerate(self.poly)), F(0) if isinstance(x, Fraction) else 0)
        return self.mp(x)

    def derivative(self, x):
        """Exact Fraction when the piece is polynomial and x is a Fraction; an mpf (computed with 40 digits)
        otherwise."""
        if self.poly is not None:
            zero = F(0) if isinstance(x, Fraction) else 0
            return sum((k * c * x ** (k - 1) for k, c in enumerate(self.poly) if k), zero)
        with mpmath.workdps(40):
            return +self.dmp(mpmath.mpf(x.numerator) / x.denominator if isinstance(x, Fraction) else x)

    @property
    def exact(self) -> bool:
        return self.poly is not None

    @property
    def constant(self) -> bool:
        """Is the piece a constant (a polynomial of degree 0)?"""
        return self.poly is not None and all(c == 0 for c in self.poly[1:])


def jax_function(expr: str, **names) -> Callable:
    """The registry's JAX expression ``expr`` (in ``x``, over ``jax``, ``jnp``, ``lax`` and ``names``) as a
    function of one array. jax is imported when the function is called, never before (it is optional)."""
    code = compile(expr, f"<jax: {expr}>", "eval")

    def fn(x):
        import jax
        import jax.numpy as jnp
        from jax import lax

        return eval(code, {"jax": jax, "jnp": jnp, "lax": lax, **names}, {"x": x})  # noqa: S307 (registry text)
    fn.expr = expr  # type: ignore[attr-defined]
    return fn


def functional_name(name: str) -> str:
    """The qualified name of a functional form: ``F.x`` abbreviates torch.nn.functional.x and ``T.x``
    torch.Tensor.x; other names are returned as given (``torch.relu``)."""
    for short, full in (("F.", "torch.nn.functional."), ("T.", "torch.Tensor.")):
        if name.startswith(short):
            return full + name[len(short):]
    return name


def lin(slope, intercept=0) -> Piece:
    return Piece(poly=(F(intercept), F(slope)))


@dataclass(frozen=True)
class Elementwise:
    """A piecewise-smooth scalar function x -> f(x), applied entrywise.

    ``breakpoints`` b_1 < ... < b_m (exact), ``pieces`` p_0..p_m with p_i on [b_i, b_{i+1}].
    ``torch_rules[i]`` is PyTorch's :class:`~nsverify.registry.rules.Rule` at b_i (``left``, ``right``,
    ``inside`` for clamp, ``mix=1/2`` for abs) in the installed torch release (or ``release``); text is parsed
    on construction. ``rule_changes`` records the releases where PyTorch changed them (:class:`RuleChange`, one
    rule per kink on each side): the entry then resolves ``torch_rules`` for that release, and
    :meth:`rules_at` gives them for any release. ``violations`` maps a breakpoint to the recorded
    :class:`Violation` records at that kink.

    The entry is the op's one record (in the style of PyTorch's OpInfo): besides its pieces and rules it names
    the op's ATen forward ops (``aten``, bare names, in-place overloads included, e.g. ``relu_``), the ATen
    backward ops whose formula is the entry's derivative (``backward``: ``threshold_backward`` for relu),
    its ``torch.nn`` module classes (``modules``: class names under ``torch.nn``) and its functional forms
    (``functionals``: qualified names such as ``torch.nn.functional.relu``, ``torch.relu``,
    ``torch.Tensor.relu``). ``from_args`` builds the instance an ATen call's scalar arguments describe (the
    arguments after the tensor(s), in ATen's order, which the forward and backward ops share: leaky_relu's
    slope, hardtanh's bounds); None: the op has no such arguments and the entry is the instance. ``shared_with``
    names the entry that shares the op's ATen op for other argument kinds (clamp's ATen op with tensor bounds is
    ``clamp_tensor``): the oracle then dispatches that ATen op itself (``nsverify.oracle.ops.select``).
    The exact forward and backward are the pieces (:meth:`value`, :meth:`derivative_at`) and the families the
    op belongs to are derived from them (:attr:`exact`, :attr:`piecewise_linear`, :meth:`one_sided_rules`,
    :meth:`common_lambda`).
    """

    name: str
    aten: tuple[str, ...]
    torch_fn: Callable | None
    breakpoints: tuple[Fraction, ...]
    pieces: tuple[Piece, ...]
    torch_rules: tuple[Rule, ...]
    kwargs: dict = field(default_factory=dict)
    doc: str = ""
    violations: dict = field(default_factory=dict)
    rule_changes: tuple[RuleChange, ...] = ()
    #: the torch release the rules are resolved for (None: the installed one)
    release: str | None = None
    backward: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    functionals: tuple[str, ...] = ()
    from_args: Callable[..., "Elementwise"] | None = None
    shared_with: str | None = None
    #: the JAX counterpart, next to ``torch_fn``: an expression in ``x`` (the input array) over the names jax,
    #: jnp and lax (:func:`jax_function` makes it a function; jax is imported when it is called, never at
    #: registry import); None when JAX has none, and ``jax_note`` then says why (the JAX matrix lists it)
    jax: str | None = None
    jax_note: str = ""
    #: per-mode exceptions to ``torch_rules`` (one rule per kink each, as text or Rules): prelu's forward mode
    #: takes the right piece at 0 ({"jvp": ("right",)}) where its backward kernel takes the left one
    mode_rules: dict = field(default_factory=dict)
    #: the name of the op's tensor argument that is a learnable parameter of the activation (prelu's ``weight``),
    #: or None. The pieces are then those of its default value in ``kwargs`` (what the conventions matrix
    #: measures); the oracle evaluates the op's ATen ops itself with the actual tensor
    #: (:mod:`nsverify.oracle.ops.kinks`), and Park's layer model, whose activations are fixed functions, declines it
    learnable: str | None = None
    #: the autograd node classes (``type(y.grad_fn).__name__``) the op's forward calls produce in PyTorch, in-place
    #: forms included (``ReluBackward0``; relu6 runs as hardtanh: ``HardtanhBackward0``). Readers of the autograd
    #: graph select the op by them, never by its name
    autograd_nodes: tuple[str, ...] = ()
    #: PyTorch's backward formula reads the op's output, not its input (relu: ``threshold_backward(grad, result,
    #: 0)``, tools/autograd/derivatives.yaml); the oracle then marks an output that sits on a kink, since the
    #: output alone no longer says which side of the kink the input was on
    backward_reads_output: bool = False
    #: PyTorch's own gaps, OpInfo style: a mode ("jvp") or dtype name ("float16") -> the error PyTorch raises
    #: there (measured: multi_margin_loss has no forward-mode formula and no CPU half kernel). The conventions
    #: matrix leaves those cells out, and its tests expect no error elsewhere
    unsupported: dict = field(default_factory=dict)

    kind = "elementwise"

    def __post_init__(self):
        rules = self._kink_rules(self.torch_rules)
        if len(self.pieces) != len(self.breakpoints) + 1:
            raise NsverifyError(f"{self.name}: {len(self.breakpoints)} breakpoints need "
                                f"{len(self.breakpoints) + 1} pieces; got {len(self.pieces)}.")
        changes = tuple(RuleChange(c.since, self._kink_rules(c.before), self._kink_rules(c.after), c.modes, c.note)
                        for c in self.rule_changes)
        _check_chain(self.name, changes)
        object.__setattr__(self, "rule_changes", changes)
        object.__setattr__(self, "torch_rules", _chain(changes, self.release or installed_release(), rules))
        bad = [m for m in self.mode_rules if m not in AD_MODES]
        if bad:
            raise NsverifyError(f"{self.name}: mode_rules for {bad}: use the modes {AD_MODES}.")
        object.__setattr__(self, "mode_rules", {m: self._kink_rules(r) for m, r in self.mode_rules.items()})

    def _kink_rules(self, rules) -> tuple[Rule, ...]:
        out = tuple(parse_rule(r, kind="kink") for r in ((rules,) if isinstance(rules, (str, Rule)) else rules))
        if len(out) != len(self.breakpoints):
            raise NsverifyError(f"{self.name}: {len(self.breakpoints)} kinks need one rule each; got {len(out)}.")
        return out

    def rules_at(self, release: str) -> tuple[Rule, ...]:
        """PyTorch's rule at each kink in torch ``release`` ("2.13.0")."""
        return _chain(self.rule_changes, release, self.torch_rules)

    def rules_for(self, mode: str) -> tuple[Rule, ...]:
        """PyTorch's rule at each kink in ``mode`` ("eager", "func", "jvp", "compile"): ``mode_rules`` or
        ``torch_rules``."""
        return self.mode_rules.get(mode, self.torch_rules)

    @property
    def fixed(self) -> bool:
        """Is the op a fixed function of its input (no ``learnable`` tensor argument)? Only fixed activations are
        in Park et al.'s network model (Sec. 2.2: ``z_l = sigma_l(y_l)``), its strategies and AD variants."""
        return self.learnable is None

    @property
    def park_layer(self) -> bool:
        """Do Park et al.'s layer theorems (Theorems 5 and 8: pointwise activations sigma_l that are fixed and
        piecewise linear, with a one-sided derivative -- a Bouligand proxy -- at every kink) cover the op under
        PyTorch's rules? Park's engine, the monitor and the premise checkers select activations by this
        capability, never by name."""
        return self.fixed and self.piecewise_linear and self.one_sided_rules()

    def capabilities(self) -> dict:
        """The entry's capabilities (:data:`CAPABILITIES`), each derived from its fields and pieces."""
        return _capabilities(self)

    # ------------------------------------------------------------------------------------------ OpInfo fields
    @property
    def aten_forward(self) -> tuple[str, ...]:
        """The ATen forward ops (bare names) of the op: ``aten`` without its backward ops."""
        return tuple(a for a in self.aten if a not in self.backward)

    def instance(self, args: Sequence = (), kwargs: dict | None = None) -> Elementwise:
        """The instance an ATen call with scalar ``args`` / ``kwargs`` (after the tensors) describes: built by
        ``from_args``, or the entry itself for an op without arguments."""
        if self.from_args is None:
            return self
        if not kwargs:
            return self.from_args(*args)
        names = set(inspect.signature(self.from_args).parameters)
        return self.from_args(*args, **{k: v for k, v in (kwargs or {}).items() if k in names})

    # ------------------------------------------------------------------------- families, derived from the pieces
    @property
    def exact(self) -> bool:
        """Are all pieces polynomials with rational coefficients (the exact oracle evaluates the op)?"""
        return all(p.exact for p in self.pieces)

    @property
    def piecewise_linear(self) -> bool:
        """Are all pieces affine (exact polynomials of degree at most 1)?"""
        return all(p.exact and all(c == 0 for c in p.poly[2:]) for p in self.pieces)

    @property
    def kinks(self) -> tuple[Fraction, ...]:
        """The breakpoints where the one-sided derivatives differ (the non-differentiable points, ndf)."""
        out = []
        for b in self.breakpoints:
            left, right = self.one_sided(b)
            if left != right:
                out.append(b)
        return tuple(out)

    def _rules(self, rules) -> tuple[Rule, ...]:
        """``rules`` as one Rule per kink: None (PyTorch's), one rule for every kink, or one per kink."""
        if rules is None:
            return self.torch_rules
        if isinstance(rules, (str, Rule)):
            return (parse_rule(rules, kind="kink"),) * len(self.breakpoints)
        return self._kink_rules(rules)

    def one_sided_rules(self, rules=None) -> bool:
        """Does AD under ``rules`` (default: PyTorch's; one rule per kink, or one for every kink) take a one-sided
        derivative -- an adjacent piece's -- at every kink (a Bouligand proxy)? Derived from the pieces: the
        derivative the rule gives equals the left or the right derivative there."""
        rs = self._rules(rules)
        return all(self.derivative_piece(i, r) is not None for i, r in enumerate(rs))

    def kink_lambda(self, i: int, rule: Rule | None = None):
        """Park et al.'s lambda at kink i (Sec. 3, Theorem 4) in the direction of the rule ``mix=lambda``: the
        weight of the RIGHT derivative in the derivative ``rule`` gives, D = (1 - lambda) D^- + lambda D^+, so
        ``Rule("mix", lambda)`` gives the same derivative (PyTorch's relu, ``left``: 0; abs, ``mix=1/2``: 1/2).
        ``"any"`` where the two sides agree (no kink); None when the derivative is not such a convex combination
        (or, for irrational sides, cannot be shown to be one exactly)."""
        rule = self.torch_rules[i] if rule is None else parse_rule(rule, kind="kink")
        left, right = self.one_sided(self.breakpoints[i])
        if left == right:
            return "any"
        piece = self.rule_piece(i, rule)
        if piece is not None:
            return F(0) if piece == i else F(1)
        if rule.name == "mix":
            return rule.param if 0 <= rule.param <= 1 else None
        d = self.kink_derivative(i, rule)
        if not all(isinstance(v, Fraction) for v in (d, left, right)):
            return None
        lam = (d - left) / (right - left)
        return lam if 0 <= lam <= 1 else None

    def kink_side(self, i: int, rule: Rule | None = None) -> Rule | None:
        """Park et al.'s side at kink i as a Rule: ``left`` / ``right`` when the derivative ``rule`` (default:
        PyTorch's) gives there is the left / right derivative (Algorithm 1's Bouligand proxies; ``inside`` and
        fixed values that equal a side count as that side), else None."""
        piece = self.derivative_piece(i, rule)
        return None if piece is None else Rule("left") if piece == i else Rule("right")

    def common_lambda(self, rules=None):
        """A lambda shared by every kink under ``rules`` (default: PyTorch's), as Park et al.'s Theorem 4 asks
        (D^AD = (1 - lambda) D^- + lambda D^+ at every non-differentiable point: the rule ``mix=lambda``, see
        :meth:`kink_lambda`), or None when there is none.
        ``"any"`` when the op has no kink."""
        lams = {self.kink_lambda(i, r) for i, r in enumerate(self._rules(rules))} - {"any"}
        if not lams:
            return "any"
        return lams.pop() if len(lams) == 1 and None not in lams else None

    def admits_common_lambda(self, rules=None) -> bool:
        """Is there a common lambda under ``rules`` (default: PyTorch's)? See :meth:`common_lambda`."""
        return self.common_lambda(rules) is not None

    # ------------------------------------------------------------------------------- exact forward and backward
    def derivative_at(self, x: Fraction, rules=None):
        """The exact derivative AD uses at x under ``rules`` (default: PyTorch's, one per kink): the active piece's
        derivative off the breakpoints, the rule's at a breakpoint. This is the op's exact backward formula."""
        rs = self._rules(rules)
        for i, b in enumerate(self.breakpoints):
            if x == b:
                return self.kink_derivative(i, rs[i])
            if x < b:
                return self.pieces[i].derivative(x)
        return self.pieces[-1].derivative(x)

    def piece_index(self, x: Fraction, side: int = 0) -> int:
        """Index of the piece active at x; at a breakpoint, side=-1 gives the left piece, +1 the right."""
        for i, b in enumerate(self.breakpoints):
            if x < b or (x == b and side < 0):
                return i
        return len(self.breakpoints)

    def value(self, x):
        return self.pieces[self.piece_index(x, +1)].value(x)

    def one_sided(self, b: Fraction) -> tuple:
        """(left derivative, right derivative) at breakpoint b, exact when both pieces are polynomial."""
        i = self.breakpoints.index(b)
        left, right = self.pieces[i].derivative(b), self.pieces[i + 1].derivative(b)
        if isinstance(left, mpmath.mpf) != isinstance(right, mpmath.mpf):  # compare like with like
            with mpmath.workdps(40):
                left, right = (mpmath.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else v
                               for v in (left, right))
        return left, right

    def clarke(self, x: Fraction) -> tuple:
        """Clarke subdifferential at x as an interval (lo, hi)."""
        if x in self.breakpoints:
            left, right = self.one_sided(x)
            return (min(left, right), max(left, right))
        d = self.pieces[self.piece_index(x)].derivative(x)
        return (d, d)

    def kink_label(self, i: int) -> str:
        """The case label of kink i ("x=<breakpoint>"), as the conventions matrix and the violations name it."""
        return f"x={self.breakpoints[i]}"

    def inside_piece(self, i: int) -> int:
        """The piece adjacent to kink i that lies inside the clamped range: the non-constant one (clamp at its
        lower bound: the right piece; at its upper bound: the left piece)."""
        if self.pieces[i].constant and not self.pieces[i + 1].constant:
            return i + 1
        return i

    def rule_piece(self, i: int, rule: Rule | None = None) -> int | None:
        """The piece whose derivative ``rule`` (default: PyTorch's) takes at kink i -- ``left``, ``right``,
        ``inside`` -- or None when the rule is a fixed value or a mix of the two sides."""
        rule = self.torch_rules[i] if rule is None else parse_rule(rule, kind="kink")
        return {"left": i, "right": i + 1, "inside": self.inside_piece(i)}.get(rule.name)

    def derivative_piece(self, i: int, rule: Rule | None = None) -> int | None:
        """The adjacent piece whose derivative AD takes at kink i under ``rule`` (default: PyTorch's): the rule's
        own piece (left, right, inside), else the side whose derivative equals the rule's value (left first:
        ``value=1`` at relu's kink is the right piece), else None (abs's ``mix=1/2``: no piece has slope 0)."""
        piece = self.rule_piece(i, rule)
        if piece is not None:
            return piece
        d = self.kink_derivative(i, rule)
        left, right = self.one_sided(self.breakpoints[i])
        return i if d == left else i + 1 if d == right else None

    def kink_derivative(self, i: int, rule: Rule | None = None):
        """The derivative ``rule`` (default: PyTorch's rule) gives at kink i: exact when the pieces are
        polynomial, an mpf otherwise."""
        rule = self.torch_rules[i] if rule is None else parse_rule(rule, kind="kink")
        b = self.breakpoints[i]
        if rule.name == "inside":
            return self.pieces[self.inside_piece(i)].derivative(b)
        left, right = self.one_sided(b)
        if rule.name == "mix" and isinstance(left, mpmath.mpf):
            with mpmath.workdps(40):
                lam = mpmath.mpf(rule.param.numerator) / rule.param.denominator
                return left + lam * (right - left)
        return rule.kink_derivative(left, right)

    def torch_derivative(self, x: Fraction):
        """The derivative PyTorch's rule gives at x (exact where possible)."""
        if x not in self.breakpoints:
            return self.pieces[self.piece_index(x)].derivative(x)
        return self.kink_derivative(self.breakpoints.index(x))

    def violation(self, i: int, dtype: str, release: str | None = None) -> Violation | None:
        """The recorded violation at kink i in dtype ``dtype`` (a name such as "float32") and torch ``release``
        (default: the entry's), or None."""
        return _violation_for(self.violations.get(self.breakpoints[i], ()), dtype, release or self.release)

    def mp_value(self, x):
        """High-precision value at an mpf point (for difference quotients)."""
        xf = mpmath.mpf(x)
        for i, b in enumerate(self.breakpoints):
            if xf < mpmath.mpf(b.numerator) / b.denominator:
                return self._mp_piece(self.pieces[i], xf)
        return self._mp_piece(self.pieces[-1], xf)

    @staticmethod
    def _mp_piece(p: Piece, x):
        if p.poly is not None:
            return sum(mpmath.mpf(c.numerator) / c.denominator * x**k for k, c in enumerate(p.poly))
        return p.mp(x)


# ----------------------------------------------------------------------------------------------------
# Selection ops and tie cases
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TieCase:
    """A concrete input sitting exactly on a kink/tie of a primitive.

    ``values``: the flattened input (exact dyadic Fractions, exactly representable in every float dtype);
    ``shape``: its shape; ``cotangent``: weights (exact) turning the op's output into the scalar
    ``sum(cotangent * op(x))`` (None: the output is already scalar or has one entry);
    ``pieces``: the exact gradients of that scalar w.r.t. the input on each adjacent smooth piece
    (the Bouligand set; the Clarke set is its convex hull);
    ``rules``: named candidate AD outputs ("first", "last", "even"), each an exact vector;
    ``torch_rule``: PyTorch's :class:`~nsverify.registry.rules.Rule` at this case in the installed torch
    release (or ``release``); ``mode_rules``: per-mode exceptions (e.g. {"jvp": Rule("last")}: forward mode may
    pick another piece); ``rule_changes``: the releases where PyTorch changed them (:class:`RuleChange`, tie
    rules, optionally per mode), from which both are resolved; ``violations``: the recorded :class:`Violation`
    records of this case.
    """

    label: str
    values: Vec
    shape: tuple[int, ...]
    pieces: tuple[Vec, ...]
    rules: dict
    torch_rule: Rule
    cotangent: Vec | None = None
    extra: dict = field(default_factory=dict)
    #: the op's outputs as selection windows (see :class:`Window`), for exact directional derivatives
    windows: tuple = ()
    mode_rules: dict = field(default_factory=dict)
    violations: tuple[Violation, ...] = ()
    rule_changes: tuple[RuleChange, ...] = ()
    #: the torch release the rules are resolved for (None: the installed one)
    release: str | None = None

    def __post_init__(self):
        declared = parse_rule(self.torch_rule, kind="tie")
        modes = {m: parse_rule(r, kind="tie") for m, r in self.mode_rules.items()}
        changes = tuple(RuleChange(c.since, parse_rule(c.before, kind="tie"), parse_rule(c.after, kind="tie"),
                                   c.modes, c.note) for c in self.rule_changes)
        object.__setattr__(self, "rule_changes", changes)
        per_mode = self._resolve(self.release or installed_release(), declared, modes)
        object.__setattr__(self, "torch_rule", per_mode["eager"])
        object.__setattr__(self, "mode_rules", {m: r for m, r in per_mode.items() if r != per_mode["eager"]})

    def _resolve(self, release: str, declared: Rule, modes: dict) -> dict:
        out = {}
        for m in AD_MODES:
            chs = [c for c in self.rule_changes if c.covers(m)]
            _check_chain(self.label, chs)
            out[m] = _chain(chs, release, modes.get(m, declared))
        return out

    def rules_at(self, release: str) -> dict[str, Rule]:
        """PyTorch's rule at this case in each mode in torch ``release``."""
        return self._resolve(release, self.torch_rule, self.mode_rules)

    @property
    def weights(self) -> Vec:
        return self.cotangent if self.cotangent is not None else (F(1),) * len(self.windows)

    def rule_for(self, mode: str) -> Rule:
        """PyTorch's rule in ``mode`` ("eager", "func", "jvp", "compile")."""
        return self.mode_rules.get(mode, self.torch_rule)

    def directional(self, tangent: Sequence) -> Fraction:
        """Exact one-sided directional derivative of sum_j w_j op(x)_j at the tie along ``tangent``: the
        piece selected by ordering tied entries by the tangent (then by index)."""
        v = as_fraction_vec(tangent)
        n = len(self.values)
        # along x + t v (t -> 0+), tied entries are ordered by their tangent: the larger v the more extreme for a
        # max window, the smaller v for a min window
        keys = {d: {i: (s * v[i], -i) for i in range(n)} for d, s in (("max", 1), ("min", -1))}
        g = gradient(n, self.weights, [select(self.values, w, keys[w.direction]) for w in self.windows])
        return sum(a * b for a, b in zip(g, v))

    def rule_vector(self, rule, returned: Sequence[int] | None = None) -> Vec | None:
        """The exact gradient ``rule`` gives at this tie, or None when the rule does not determine it here
        (``inside`` where the clamped input is not tied with the output). ``returned``: per output, the index
        PyTorch returned (needed by ``returned``)."""
        rule = parse_rule(rule, kind="tie")
        n = len(self.values)
        if rule.name in self.rules:
            return self.rules[rule.name]
        if rule.name == "hybrid":
            b = rule.param
            return tuple((1 - b) * f + b * e for f, e in zip(self.rules["first"], self.rules["even"]))
        if rule.name == "returned":
            if returned is None or len(returned) != len(self.windows):
                raise NsverifyError(f"{self.label}: rule 'returned' needs one returned index per output "
                                    f"({len(self.windows)}), got {returned!r}.")
            return gradient(n, self.weights, [int(i) for i in returned])
        if rule.name != "inside":
            raise NsverifyError(f"rule {rule} has no vector of its own: resolve 'torch' with the registry first.")
        # inside: each output's weight goes to the clamped input (the window's first entry) when it is tied
        # with the output, i.e. when the output equals it
        chosen = []
        first = {i: -i for i in range(n)}
        for win in self.windows:
            out = self.values[select(self.values, win, first)]
            if self.values[win.indices[0]] != out:
                return None
            chosen.append(win.indices[0])
        return gradient(n, self.weights, chosen)

    @property
    def clarke_vertices(self) -> tuple[Vec, ...]:
        return self.pieces

    def in_clarke(self, vec: Sequence) -> bool:
        """Exact: is ``vec`` (exact values, e.g. Fractions of a float gradient) in the Clarke set?"""
        from nsverify.rational import in_hull

        return in_hull(as_fraction_vec(vec), self.pieces)

    def violation(self, dtype: str, release: str | None = None) -> Violation | None:
        """The recorded violation of this case in dtype ``dtype`` (a name such as "float32") and torch
        ``release`` (default: the case's), or None."""
        return _violation_for(self.violations, dtype, release or self.release)

    def tensor(self, dtype, device="cpu"):
        """The input as a tensor of ``dtype``; raises InexactError if a value is not representable."""
        return exact_tensor(self.values, dtype, device).reshape(self.shape)

    def cotangent_tensor(self, dtype, device="cpu"):
        return None if self.cotangent is None else exact_tensor(self.cotangent, dtype, device)


def selection_case(label: str, values, shape, windows: Sequence[Window], torch_rule, cotangent=None,
                   mode_rules: dict | None = None, violations: Sequence[Violation] = (),
                   rule_changes: Sequence[RuleChange] = (), **extra) -> TieCase:
    """Build a TieCase from exact input values and the op's windows (pieces and rules computed exactly).
    ``torch_rule`` and the values of ``mode_rules``: anything :func:`~nsverify.registry.rules.parse_rule`
    reads as a tie rule; ``rule_changes``: :class:`RuleChange` records of the releases that changed them."""
    vals = as_fraction_vec(values)
    weights = as_fraction_vec(cotangent) if cotangent is not None else (F(1),) * len(windows)
    if len(weights) != len(windows):
        raise ValueError(f"{label}: {len(windows)} outputs but {len(weights)} cotangent weights")
    return TieCase(label=label, values=vals, shape=tuple(shape),
                   pieces=bouligand_pieces(vals, windows, weights),
                   rules=rule_vectors(vals, windows, weights), torch_rule=torch_rule,
                   cotangent=None if cotangent is None else weights, extra=dict(extra),
                   windows=tuple(windows), mode_rules=dict(mode_rules or {}), violations=tuple(violations),
                   rule_changes=tuple(rule_changes))


_CASE_CACHE: dict[str, tuple] = {}


@dataclass(frozen=True)
class Selection:
    """A max-like op: each output entry equals one input entry (or a fixed average, for median).

    ``torch_rule``: PyTorch's tie :class:`~nsverify.registry.rules.Rule` (text is parsed on construction);
    ``indices_fn``: for the ``returned`` rule, a function of the input returning, per output, the index
    PyTorch returned."""

    name: str
    aten: tuple[str, ...]
    torch_fn: Callable
    torch_rule: Rule
    #: the tie cases, or a zero-argument function building them (computed on first use: exact Bouligand
    #: enumeration is too slow for import time)
    case_source: tuple[TieCase, ...] | Callable[[], tuple[TieCase, ...]] = ()
    kwargs: dict = field(default_factory=dict)
    doc: str = ""
    #: how to read the input: "single" tensor, or "pair" (maximum/minimum: rows 0 and 1 are x and y),
    #: or "triple" (clamp with tensor bounds: rows x, min, max)
    packing: str = "single"
    indices_fn: Callable | None = None
    #: releases where PyTorch changed the op's tie rule (:class:`RuleChange`); per-case changes live on the cases
    rule_changes: tuple[RuleChange, ...] = ()
    release: str | None = None
    #: the JAX counterpart, next to ``torch_fn``: an expression in ``x`` (the input array, packed as for torch_fn)
    #: over jax, jnp, lax and the case's ``extra`` (max_pool2d's ``geom``), see :func:`jax_function`; None when
    #: JAX has none, and ``jax_note`` then says why
    jax: str | None = None
    jax_note: str = ""
    #: the autograd node classes (``type(y.grad_fn).__name__``) the op's forward calls produce in PyTorch
    #: (measured on torch 2.13: max_pool2d's ``MaxPool2DWithIndicesBackward0``; max_pool1d with a gradient runs
    #: the 2-d kernel). Readers of the autograd graph select the op by them, never by its name
    autograd_nodes: tuple[str, ...] = ()
    #: PyTorch's own gaps: a mode or dtype name -> the error PyTorch raises there (see :class:`Elementwise`)
    unsupported: dict = field(default_factory=dict)

    kind = "selection"
    #: a selection is a fixed function of its input, its pieces the affine maps "output = input i": exact and
    #: piecewise linear
    learnable = None
    fixed = True
    exact = True
    piecewise_linear = True
    #: Park et al.'s layer theorems cover pointwise activations sigma_l (Sec. 2.2); a selection is not one
    park_layer = False

    def one_sided_rules(self, rules=None) -> bool:
        """Does AD under the tie rule ``rules`` (default: PyTorch's) give every output's weight to one tied entry
        -- an adjacent piece's gradient, a Bouligand proxy (``first``, ``last``, ``returned``, ``inside``,
        ``hybrid=0``) -- rather than a split (``even``, ``hybrid=beta`` with beta > 0)?"""
        rule = self.torch_rule if rules is None else parse_rule(rules, kind="tie")
        if rule.name == "hybrid":
            return rule.param == 0
        return rule.name in ("first", "last", "returned", "inside")

    def capabilities(self) -> dict:
        """The entry's capabilities (:data:`CAPABILITIES`)."""
        return _capabilities(self)

    def __post_init__(self):
        changes = tuple(RuleChange(c.since, parse_rule(c.before, kind="tie"), parse_rule(c.after, kind="tie"),
                                   c.modes, c.note) for c in self.rule_changes)
        _check_chain(self.name, changes)
        object.__setattr__(self, "rule_changes", changes)
        rule = _chain(changes, self.release or installed_release(), parse_rule(self.torch_rule, kind="tie"))
        if rule.name == "returned" and self.indices_fn is None:
            raise NsverifyError(f"{self.name}: the rule 'returned' needs indices_fn (the indices PyTorch returns).")
        object.__setattr__(self, "torch_rule", rule)

    def rules_at(self, release: str) -> Rule:
        """PyTorch's tie rule for this op in torch ``release``."""
        return _chain(self.rule_changes, release, self.torch_rule)

    @property
    def cases(self) -> tuple[TieCase, ...]:
        if callable(self.case_source):
            if self.name not in _CASE_CACHE:
                _CASE_CACHE[self.name] = tuple(self.case_source())
            return _CASE_CACHE[self.name]
        return tuple(self.case_source)


Primitive = Elementwise | Selection


def _capabilities(entry: Primitive) -> dict:
    return {"kind": entry.kind, "fixed": entry.fixed, "learnable": entry.learnable, "exact": entry.exact,
            "piecewise_linear": entry.piecewise_linear, "one_sided_rules": entry.one_sided_rules(),
            "park_layer": entry.park_layer, "autograd_nodes": tuple(entry.autograd_nodes),
            "jax": entry.jax is not None}
