"""The conventions' claims: nsverify's own findings about PyTorch's (and JAX's) derivatives at kinks and ties,
declared once as a :class:`~nsverify.claims.record.ClaimSpec` table like the papers' (``CLAIMS``: id, source,
metric, rule, budget) and judged here by the same path (:meth:`ClaimSpec.judge`) from what the conventions matrix
(:mod:`nsverify.conventions.matrix`), its JAX column (:mod:`nsverify.conventions.sidebyside`), the stored GPU run
and the recorded releases (:mod:`nsverify.conventions.releases`) measured. The report sections
(:mod:`nsverify.sections.conventions`, :mod:`nsverify.sections.releases`) render these claims and never judge.

Every claim here is decided by the ``exact`` rule: a run of the matrix is deterministic, so one run decides; a
difference is a witness, and cells that crashed their process without any other cell differing leave the claim
undecided (they measured nothing)."""
from __future__ import annotations

from typing import Sequence

from nsverify.claims import decide
from nsverify.claims.decide import Decision
from nsverify.claims.record import ClaimSpec, spec_table
from nsverify.registry.types import release_key

OURS = "nsverify (ours)"
#: the source of the release claims (as the release sweep has always written it)
RELEASES = "nsverify"
RELEASES_WHERE = "conventions matrix across torch releases"
#: the first torch release whose clamp gradient at its bounds changed (the release claim's premise)
CLAMP_CHANGE = (2, 14, 0)

#: our own claims about the conventions matrix and its releases, declared once (id, source, metric, rule, budget)
CLAIMS = (
    ClaimSpec("conventions/registry-rules", OURS, "registry",
              "The registry's kink/tie rules hold on torch CPU, fp16/bf16/fp32/fp64, eager/func/jvp",
              "evaluations whose rule differs from the registry's", "exact",
              "every registry kink and tie x dtypes x modes", by="ours"),
    ClaimSpec("conventions/compile-matches-eager", OURS, "conventions matrix",
              "torch.compile matches eager at every kink and tie", "cases whose compiled rule differs from eager",
              "exact", "every registry kink and tie x the compiled dtypes (float32 only in quick mode)", by="ours"),
    ClaimSpec("conventions/jax-in-clarke", OURS, "conventions matrix, JAX column",
              "JAX's derivatives (newest recorded release) lie in the Clarke set at every registry kink and tie",
              "JAX cells outside the Clarke set", "exact",
              "the newest recorded JAX run (nsverify/data/conventions/jax), every case x 4 dtypes x its modes",
              by="ours"),
    ClaimSpec("conventions/gpu-readable", OURS, "conventions matrix", "GPU conventions readable",
              "the GPU data file", "exact", "the stored GPU run (nsverify/data/gpu/conventions.json)", by="ours"),
    ClaimSpec("conventions/cuda-equals-cpu", OURS, "conventions matrix", "CUDA conventions equal CPU conventions",
              "GPU evaluations whose rule differs from the CPU's", "exact",
              "the stored GPU run's evaluations (nsverify/data/gpu/conventions.json)", by="ours"),
    ClaimSpec("releases/clamp-first-release", RELEASES, RELEASES_WHERE,
              "the matrix detects torch 2.14's change of clamp's gradient at its bounds and names its first release",
              "first release of each clamp change", "exact",
              "the recorded torch releases (nsverify/data/conventions), spanning 2.13 -> 2.14", by="ours"),
    ClaimSpec("releases/changes-stay-in-clarke", RELEASES, RELEASES_WHERE,
              "no release change moves a convention out of the Clarke set",
              "changed cells that leave the Clarke set", "exact",
              "the recorded torch releases (nsverify/data/conventions), at least 2", by="ours"),
    ClaimSpec("promised/relu-follows", OURS, "conventions matrix, promised column",
              "relu'(0) = 0 follows PyTorch's documented rule (the minimum-norm element of [0, 1]) in every recorded "
              "release", "recorded releases where relu at 0 breaks the rule", "exact",
              "the recorded torch releases (nsverify/data/conventions), every dtype and mode", by="ours"),
    ClaimSpec("promised/clamp-follows-from-2.14", OURS, "conventions matrix, promised column",
              "clamp's gradient at its scalar bounds breaks the documented rule before torch 2.14 and follows it "
              "from 2.14.0", "the first release following the rule at both bounds", "exact",
              "the recorded torch releases (nsverify/data/conventions), spanning 2.13 -> 2.14", by="ours"),
    ClaimSpec("promised/maximum-x-0-breaks", OURS, "equivalent formulations",
              "maximum(x, 0) at x = 0 returns 1/2, against the documented rule's 0 (relu's formulation with the "
              "one input x)", "maximum(x, 0)'s derivative at 0 (float32, eager)", "exact",
              "the installed torch, the formulation table", by="ours"),
)
SPEC = spec_table(CLAIMS)


# ----------------------------------------------------------------------------------------------------------
# this run's matrix
# ----------------------------------------------------------------------------------------------------------
def _undecided(crashed, where: str) -> Decision:
    """The exact rule without a verdict: cells that crashed measured nothing, and no other cell differs."""
    what = f"{len(crashed)} {where + ' ' if where else ''}cell(s)"
    return Decision("exact", None, 0, None, 1, reason=f"{what} crashed their process (see the crashed cells), and "
                    f"no evaluated cell differs: the crashed ones are unmeasured")


def matrix_claims(results: Sequence, unexpected: Sequence, compile_vs_eager: Sequence,
                  compile_dtypes: Sequence[str]) -> list[dict]:
    """The two claims about this run's matrix (``results``: its cells; ``unexpected``: the evaluated cells whose
    rule is not the registry's; ``compile_vs_eager``: the cases whose compiled rule differs from eager over
    ``compile_dtypes``): a difference decides (a witness); a crash without one leaves the claim undecided."""
    every = [r for r in results if r.rule == "crashed"]
    compiled = [r for r in results if r.rule == "crashed" and r.mode in ("eager", "compile")
                and r.dtype in compile_dtypes]
    evaluated = len(results) - len(every)
    return [
        SPEC["conventions/registry-rules"].judge(
            f"{len(unexpected)} of {evaluated} evaluations differ from the expected rule",
            decide.exact(False) if unexpected else _undecided(every, "") if every else
            decide.exact(True)),
        SPEC["conventions/compile-matches-eager"].judge(
            f"{len(compile_vs_eager)} cases differ (compiled dtypes: {', '.join(compile_dtypes)})",
            decide.exact(False) if compile_vs_eager else _undecided(compiled, "eager or compile") if compiled else
            decide.exact(True)),
    ]


def jax_claim(jax_results: Sequence, version) -> dict:
    """JAX's derivatives (``jax_results``: the cells of the newest recorded JAX run, release ``version``) lie in
    the Clarke set."""
    out = [r for r in jax_results if r.in_clarke == "no"]
    return SPEC["conventions/jax-in-clarke"].judge(
        f"{len(out)} of {len(jax_results)} JAX cells outside the Clarke set (jax {version})", decide.exact(not out))


def gpu_unreadable_claim(problem: str) -> dict:
    """The stored GPU run could not be read (``problem``: why)."""
    return SPEC["conventions/gpu-readable"].judge(problem, decide.exact(False))


def cuda_claim(differ: int, evaluations: int, device_name: str, torch_version, against: str = "") -> dict:
    """The stored GPU run's rules equal the CPU rules ``against`` names (the stored run's own CPU rows, same
    torch; or this run's): ``differ`` of its ``evaluations`` differ (run on ``device_name`` with torch
    ``torch_version``). The measured text names both sides, so a release change cannot pass for a device one."""
    return SPEC["conventions/cuda-equals-cpu"].judge(
        f"{differ} of {evaluations} GPU evaluations differ from CPU ({device_name}, torch {torch_version}"
        + (f"; against {against}" if against else "") + ")", decide.exact(differ == 0))


# ----------------------------------------------------------------------------------------------------------
# the recorded releases
# ----------------------------------------------------------------------------------------------------------
def release_claims(recorded: Sequence[str], changes: Sequence) -> list[dict]:
    """The claims the release data decides (``recorded``: the measured releases; ``changes``: every
    :class:`~nsverify.conventions.baselines.Change` between consecutive ones): the matrix sees torch 2.14's clamp
    change and names its first release; no release change moves a convention out of the Clarke set."""
    clamp = [c for c in changes if c.op == "clamp"]
    spans = any(release_key(r) < CLAMP_CHANGE for r in recorded) and any(release_key(r) >= CLAMP_CHANGE
                                                                         for r in recorded)
    if not spans:
        d = Decision("exact", None, 0, None, None,
                     reason="premise not exercised: the recorded releases do not span 2.13 -> 2.14")
    else:
        d = decide.exact(any(c.since.startswith("2.14.") for c in clamp),
                         reason="" if clamp else "no clamp change found between the recorded releases")
    firsts = sorted({c.since if c.exact else f"{c.prev}..{c.since}" for c in clamp})
    left = [c for c in changes if c.after.in_clarke == "no" and c.before.in_clarke != "no"]
    d2 = (decide.exact(not left) if len(recorded) >= 2 else
          Decision("exact", None, 0, None, None, reason="premise not exercised: fewer than 2 releases"))
    return [SPEC["releases/clamp-first-release"].judge(
                f"{len(clamp)} clamp cells changed; first release {', '.join(firsts) or '-'}", d),
            SPEC["releases/changes-stay-in-clarke"].judge(f"{len(left)} of {len(changes)} changed cells leave it",
                                                          d2)]


# ----------------------------------------------------------------------------------------------------------
# the documented rule's promise (nsverify.conventions.promised, .findings, .formulations)
# ----------------------------------------------------------------------------------------------------------
def promise_claims(history: Sequence[dict], recorded: Sequence[str], maximum_x0: Sequence[float] | None) -> list:
    """The promise claims: ``history`` is :func:`nsverify.conventions.findings.promise_history` over the
    ``recorded`` torch releases; ``maximum_x0`` the derivative maximum(x, 0) returned at 0 (float32, eager; None
    when not measured)."""
    hist = {(h["op"], h["case"]): h for h in history}
    relu = hist.get(("relu", "x=0"))
    claims = [SPEC["promised/relu-follows"].judge(
        f"breaks in {len(relu['breaks']) if relu else 0} of {len(recorded)} recorded releases",
        decide.exact(relu is None) if recorded else Decision("exact", None, 0, None, None,
                                                             reason="premise not exercised: no recorded release"))]
    clamp = [hist.get(("clamp", c)) for c in ("x=0", "x=1")]
    spans = any(release_key(r) < CLAMP_CHANGE for r in recorded) and any(release_key(r) >= CLAMP_CHANGE
                                                                         for r in recorded)
    firsts = sorted({str(h["follows_from"]) for h in clamp if h})
    d = (decide.exact(all(h is not None and h["follows_from"] is not None and h["follows_from"].startswith("2.14.")
                          and all(release_key(r) < CLAMP_CHANGE for r in h["breaks"]) for h in clamp))
         if spans else Decision("exact", None, 0, None, None,
                                reason="premise not exercised: the recorded releases do not span 2.13 -> 2.14"))
    claims.append(SPEC["promised/clamp-follows-from-2.14"].judge(f"follows from {', '.join(firsts) or '-'}", d))
    if maximum_x0 is None:
        d = Decision("exact", None, 0, None, None, reason="premise not exercised: maximum(x, 0) not measured")
    else:
        d = decide.exact(list(maximum_x0) == [0.5])
    claims.append(SPEC["promised/maximum-x-0-breaks"].judge(f"maximum(x, 0)'(0) = {maximum_x0}", d))
    return claims
