"""The claim ledger's record: one judged claim, as the report shows it (the single place claims are built).

Every paper package declares its claims once, as a table of :class:`ClaimSpec` (id, source, metric, rule,
budget), and its ``repro`` module returns its experiments' results together with a ``"claims"`` list of
:meth:`ClaimSpec.judge` dicts; the conventions' and the releases' claims are one such table
(:mod:`nsverify.conventions.claims`). The report sections render them (:mod:`nsverify.report.claims_table`) and
never judge. A claim's verdict always comes from a decision rule of :mod:`nsverify.claims.decide` applied to a
measurement of the run (or of a data file with its provenance, :mod:`nsverify.claims.provenance`).

JSON form (``Claim.to_json()``; the report's ``sections.<name>.claims[i]``, documented in docs/report.md)::

    {"id": "zones/table3.2-32bit|natural",      # the declaration's id, "|key" for one of several instances
     "claim": "one-line statement",            # what is claimed (the paper's words, condensed)
     "source": {"paper": "Boustany (2025)", "where": "Table 3.2", "statement": "..."},
     "by": "paper" | "ours",                   # "ours": nsverify's own finding, not the paper's
     "metric": "share of (draw, batch) pairs with D > tau, fp32",
     "paper_value": "46.67%",                  # the paper's figure as printed ("" when it gives none)
     "measured": "12/64 = 18.8% [CP 95% 0.10, 0.30]",   # this run's measurement, in words
     "value": 0.1875, "lo": 0.10, "hi": 0.30, "interval": "Clopper-Pearson 95%",
     "n": 16, "unit": "draw",                  # sample size in its independent unit (pairs of one draw are
                                               #   not independent: n counts draws)
     "n_required": 4, "power": 0.99,           # the least n (same unit) the rule needs, power at n
     "threshold": {"value": 1.2e-7, "origin": "measured", "note": "tau1 = max D(P, P~)"} | null,
     "held": true | false | null,              # reproduced / not reproduced / undecided
     "verdict": "reproduced" | "not reproduced" | "undecided",
     "rule": "between",                        # the decision rule (nsverify.claims.decide)
     "reason": "...",                          # why this verdict (always given; required for null)
     "witness": false,                         # the verdict rests on a counterexample / an occurrence
     "significant": false,                     # the verdict rests on a significant test (decides at any power)
     "erratum": null | "...",                  # set when the claim tests a printed formula that is a paper
                                               # erratum (listed apart from non-reproductions)
     "notes": "kernel path: ...",              # how it was measured (optional)
     "runtime": {"cpu_capability": "AVX512",   # the CPU kernel path it ran with (provenance.runtime()), filled
                 "aten_cpu_capability": null,  #   in when the claim is judged; a stored GPU run's claims say
                 "nsverify_kernels": null}}    #   {"stored_run", "device"} instead (on_stored_run)

Invariants (checked when a claim is built): ``held`` is True/False/None; an undecided claim has a reason; a
decided claim (held not None) rests on a witness, or on a significant test over n >= MIN_N units, or has power
>= :data:`nsverify.claims.decide.POWER` and n >= n_required.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nsverify.claims.decide import POWER, RULES, Decision
from nsverify.claims.provenance import runtime
from nsverify.errors import NsverifyError

ORIGINS = ("paper", "measured", "ours")
BY = ("paper", "ours")
VERDICTS = {True: "reproduced", False: "not reproduced", None: "undecided"}


class ClaimError(NsverifyError, ValueError):
    """A claim record that breaks the ledger's invariants (a decided claim without the power to decide, ...)."""


@dataclass(frozen=True)
class Source:
    """Where a claim comes from: the paper, the place in it, and the statement quoted in one line."""

    paper: str
    where: str
    statement: str

    def __post_init__(self):
        for name in ("paper", "where", "statement"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip() or "\n" in v:
                raise ClaimError(f"Source.{name} must be a non-empty one-line string, got {v!r}")


@dataclass(frozen=True)
class Threshold:
    """A threshold a decision compares with, and where it came from: the paper, a measurement of this run, or
    our own choice."""

    value: float | None
    origin: str
    note: str = ""

    def __post_init__(self):
        if self.origin not in ORIGINS:
            raise ClaimError(f"Threshold.origin must be one of {ORIGINS}, got {self.origin!r}")


@dataclass(frozen=True)
class Claim:
    """One claim judged by a measurement (see the module docstring for the JSON form and the invariants)."""

    source: Source
    metric: str
    measured: str
    decision: Decision
    paper_value: str = ""
    threshold: Threshold | None = None
    by: str = "paper"
    notes: str = ""
    extra: dict = field(default_factory=dict)
    #: the stable id of the claim (its :class:`ClaimSpec`'s, with ``|key`` for one of several instances)
    id: str = ""
    #: a paper erratum this claim exhibits (one line: what is misprinted and where), "" when none; the report
    #: lists errata apart from non-reproductions
    erratum: str = ""

    def __post_init__(self):
        if not isinstance(self.id, str) or "\n" in self.id:
            raise ClaimError(f"Claim.id must be a one-line string, got {self.id!r}")
        if self.by not in BY:
            raise ClaimError(f"Claim.by must be one of {BY}, got {self.by!r}")
        if not isinstance(self.erratum, str) or "\n" in self.erratum:
            raise ClaimError(f"Claim.erratum must be a one-line string, got {self.erratum!r}")
        d = self.decision
        if not isinstance(d, Decision):
            raise ClaimError(f"Claim.decision must be a nsverify.claims.decide.Decision, got {type(d).__name__}")
        if d.held is None and not d.reason:
            raise ClaimError(f"undecided claim {self.source.statement!r} has no reason")
        if d.held is not None and not d.witness and d.significant:
            from nsverify.claims.decide import MIN_N

            if d.n < MIN_N:
                raise ClaimError(f"claim {self.source.statement!r} is decided by a significant test on n = {d.n} "
                                 f"< {MIN_N} {d.unit or 'unit'}s")
        elif d.held is not None and not d.witness:
            if d.power is None or d.power < POWER:
                raise ClaimError(f"claim {self.source.statement!r} is decided ({d.held}) with power {d.power} < "
                                 f"{POWER}: its rule must return None")
            if d.n_required is not None and d.n < d.n_required:
                raise ClaimError(f"claim {self.source.statement!r} is decided on n = {d.n} < n_required = "
                                 f"{d.n_required}")

    @property
    def held(self) -> bool | None:
        return self.decision.held

    def to_json(self) -> dict:
        d = self.decision
        return {
            **({"id": self.id} if self.id else {}),
            "claim": self.source.statement,
            "source": {"paper": self.source.paper, "where": self.source.where, "statement": self.source.statement},
            "by": self.by,
            "metric": self.metric,
            "paper_value": self.paper_value,
            "measured": self.measured,
            "value": d.value,
            "lo": d.lo,
            "hi": d.hi,
            "interval": d.interval,
            "n": d.n,
            "unit": d.unit or None,
            "n_required": d.n_required,
            "power": d.power,
            "threshold": None if self.threshold is None else {"value": self.threshold.value,
                                                              "origin": self.threshold.origin,
                                                              "note": self.threshold.note},
            "held": d.held,
            "verdict": VERDICTS[d.held],
            "rule": d.rule,
            "reason": d.reason,
            "witness": d.witness,
            "significant": d.significant,
            "erratum": self.erratum or None,
            "notes": self.notes,
            "runtime": runtime(),
            **self.extra,
        }


def judged(source: Source, metric: str, measured: str, decision: Decision, **kw) -> dict:
    """Build a :class:`Claim` (checking the invariants) and return its JSON form, for a claim without a
    declaration (the ledger's own tests). The library declares every claim it reports in a ``CLAIMS`` table and
    judges it with :meth:`ClaimSpec.judge` (``tests/test_claims.py`` checks that nothing else builds one)."""
    return Claim(source, metric, measured, decision, **kw).to_json()


@dataclass(frozen=True)
class ClaimSpec:
    """One claim as a paper package declares it, before any measurement: its stable ``id``, its source (``paper``,
    ``where`` and the one-line ``statement``), the ``metric`` that measures it, the decision ``rule`` of
    :mod:`nsverify.claims.decide` that judges it, and the ``budget``: what sets the sample the rule decides on.

    ``paper``, ``where``, ``statement``, ``metric`` and ``paper_value`` may hold ``{name}`` fields, filled by
    :meth:`judge` (one declaration for a claim made per dtype, per Table 1 row, ...). Each package keeps its
    declarations in one table, a top-level tuple ``CLAIMS`` (a paper's in its ``repro`` module, the conventions'
    in :mod:`nsverify.conventions.claims`), indexed once as ``SPEC = spec_table(CLAIMS)``; the tests find every
    such table by walking the package."""

    id: str
    paper: str
    where: str
    statement: str
    metric: str
    rule: str
    budget: str
    by: str = "paper"
    paper_value: str = ""
    #: the paper erratum this claim exhibits ("" when none): see :attr:`Claim.erratum`
    erratum: str = ""

    def __post_init__(self):
        if not self.id or any(ch in self.id for ch in " |\n\t"):
            raise ClaimError(f"ClaimSpec.id must be a non-empty string without spaces or '|', got {self.id!r}")
        if self.rule not in RULES:
            raise ClaimError(f"ClaimSpec {self.id}: rule {self.rule!r} is not a decision rule of "
                             f"nsverify.claims.decide ({', '.join(RULES)})")
        if self.by not in BY:
            raise ClaimError(f"ClaimSpec {self.id}: by must be one of {BY}, got {self.by!r}")
        for name in ("paper", "where", "statement", "metric", "budget"):
            if not getattr(self, name).strip():
                raise ClaimError(f"ClaimSpec {self.id}: {name} is empty")

    def judge(self, measured: str, decision: Decision, *, key: str = "", fields: dict | None = None,
              by: str | None = None, **kw) -> dict:
        """The judged claim (checked by :class:`Claim`) as JSON: ``decision`` must come from the declared rule.
        ``key`` tells instances of one declaration apart (id ``"<id>|<key>"``); ``fields`` fill the ``{name}``
        fields of the text; ``by`` overrides the declared origin for one instance (e.g. a bfloat16 stand-in for
        the paper's float16 is "ours"); ``kw``: :class:`Claim`'s optional fields (``threshold``, ``notes``,
        ``extra``; ``paper_value`` overrides the declared one)."""
        if by is not None and by not in BY:
            raise ClaimError(f"claim {self.id}: by must be one of {BY}, got {by!r}")
        if decision.rule != self.rule:
            raise ClaimError(f"claim {self.id}: declared rule {self.rule!r}, decided by {decision.rule!r}")
        decision = undecided_if_short(decision)
        if decision.held is None and UNREACHABLE in self.budget and UNREACHABLE not in decision.reason:
            # the declaration says why full mode cannot decide it: the page shows it (issue 38: n_required is
            # reachable in full mode, or the claim says why not)
            from dataclasses import replace

            decision = replace(decision, reason=f"{decision.reason}; {self.budget[self.budget.index(UNREACHABLE):]}")
        f = fields or {}
        statement = self.statement.format(**f)
        cid = self.id + (f"|{key}" if key else "")
        kw.setdefault("paper_value", self.paper_value.format(**f))
        kw.setdefault("erratum", self.erratum)
        source = Source(self.paper.format(**f), self.where.format(**f), statement)
        return Claim(source, self.metric.format(**f), measured, decision, by=by or self.by, id=cid, **kw).to_json()


#: the phrase a declaration's budget uses when full mode cannot reach the claim's n_required
#: (tests/test_claims_budgets.py checks that every such claim is named in docs/report.md)
UNREACHABLE = "full mode cannot reach"


def undecided_if_short(d: Decision) -> Decision:
    """``d``, or ``d`` made undecided (held None, with the reason) when it decides without a witness on a sample
    short of its own power calculation (power < POWER, or n < n_required): a sample that came out short makes a
    claim undecided, never a failed section (:class:`Claim` still refuses such a decision built directly)."""
    if d.held is None or d.witness:
        return d
    from nsverify.claims.decide import MIN_N

    if d.significant:  # a significant result decides at any power, on MIN_N units
        if d.n >= MIN_N:
            return d
        return replace(d, held=None, significant=False, reason=f"sample too short to decide (n = {d.n} < {MIN_N} "
                                                               f"{d.unit or 'unit'}s); the rule said "
                                                               f"{VERDICTS[d.held]}: {d.reason}")
    short = []
    if d.power is None or d.power < POWER:
        short.append(f"power {d.power if d.power is None else round(d.power, 2)} < {POWER}")
    if d.n_required is not None and d.n < d.n_required:
        short.append(f"n = {d.n} < n_required = {d.n_required}")
    if not short:
        return d
    return replace(d, held=None, reason=f"sample too short to decide ({', '.join(short)}); the rule said "
                                        f"{VERDICTS[d.held]}: {d.reason}")


def spec_table(specs) -> dict[str, ClaimSpec]:
    """``{id: spec}`` over a package's declarations; raises :class:`ClaimError` on a repeated id."""
    out: dict[str, ClaimSpec] = {}
    for s in specs:
        if s.id in out:
            raise ClaimError(f"claim id {s.id!r} declared twice")
        out[s.id] = s
    return out


def on_stored_run(claims: list[dict], origin: str, device: str | None = None) -> list[dict]:
    """``claims`` judged on a stored GPU run: the statement marked ``[GPU]``, the id prefixed with ``origin``
    (the run's file, e.g. ``gpu-zones``), so they stay apart from the same claims judged on this run, and the
    ``runtime`` naming the stored run and its ``device`` (the GPU of its provenance block) instead of this CPU."""
    where = {"stored_run": origin, "device": device}
    return [{**c, "claim": "[GPU] " + c["claim"], "runtime": where,
             **({"id": f"{origin}/{c['id']}"} if c.get("id") else {})} for c in claims]


def summary_counts(claims: list[dict]) -> dict:
    """``{"reproduced", "not reproduced", "undecided"}`` counts over claim dicts."""
    out = dict.fromkeys(VERDICTS.values(), 0)
    for c in claims:
        out[VERDICTS[c.get("held")]] += 1
    return out


def underpowered(claims: list[dict]) -> list[str]:
    """The ids of claim dicts (a report's ``sections.<name>.claims``) decided on n < MIN_N, n < n_required or
    power < POWER, except those refuted by a counterexample (a witness with held False) and deterministic rules
    (``exact``, ``robust``: one run decides).  A report must have none (tests/test_claims.py checks it over a
    report JSON)."""
    from nsverify.claims.decide import MIN_N

    out = []
    for c in claims:
        if c.get("held") is None or (c.get("witness") and c.get("held") is False) or \
                c.get("rule") in ("exact", "robust"):
            continue
        p, n, need = c.get("power"), c.get("n") or 0, c.get("n_required")
        if c.get("significant"):  # a significant result needs MIN_N units, not power
            if n < MIN_N:
                out.append(f"{c.get('id') or c.get('claim')}: significant on n = {n} < {MIN_N}")
            continue
        if p is None or p < POWER or n < MIN_N or (need is not None and n < need):
            out.append(f"{c.get('id') or c.get('claim')}: n = {n}, n_required = {need}, power = {p}")
    return out
