"""Report section: Park et al.'s Table 1 as properties (counterexample counts) and a small Table 2
reproduction. The experiments and their verdicts are :mod:`nsverify.papers.park.repro`'s; this module picks
the budgets and renders."""

from __future__ import annotations

import time

from nsverify.report import section, table
from nsverify.report.claims_table import render_section

#: budgets: theorem-row examples, lemma-search examples, Scenario 1 steps, Scenario 2 steps / batch / timed steps
QUICK = dict(theorem_examples=6, lemma_examples=200, s1_steps=56, s2_steps=3, batch=16, timing_steps=6)
FULL = dict(theorem_examples=200, lemma_examples=200, s1_steps=2000, s2_steps=40, batch=32, timing_steps=16)


@section(
    "park",
    "Park et al.: when AD is a Clarke subgradient (Table 1 as properties, Table 2 reproduction)",
    order=30,
    description="theorem/lemma rows via the exact oracle; training monitor on digits",
)
def park_section(ctx) -> dict:
    from nsverify.papers import gpu_claims

    b = QUICK if ctx.quick else FULL
    t0 = time.monotonic()
    metrics = []
    t1_tables, t1_claims = _table1(ctx, b, metrics)
    t2_tables, t2_claims, s1, s2 = _table2(ctx, b, metrics, gpu_claims.load())
    claims = t1_claims + t2_claims
    summary = (
        f"Table 1 rows as properties over generated networks at exact ties "
        f"({b['theorem_examples']} examples per theorem row); lemma rows decided by the paper's own counterexamples. "
        f"Table 2 on {s2['data']} inputs with the training monitor; ties counted as Algorithm 2 does (positive max). "
        f"{time.monotonic() - t0:.0f} s."
    )
    return render_section(claims, summary, t1_tables + t2_tables, metrics=metrics,
                          data={"scenario1": s1, "scenario2": s2},
                          claims_title="Claims (Park, Chun, Lee; and ours)")


def _table1(ctx, b: dict, metrics: list) -> tuple[list, list]:
    """Table 1's theorem and lemma rows: their tables and claims; appends their metrics."""
    from nsverify.papers.park import repro

    thm = ctx.checkpoint(f"theorems-{b['theorem_examples']}",
                         lambda: repro.table1_theorem_rows(b["theorem_examples"], progress=ctx.progress))
    th_rows = [[r["row"], r["paper"], r["drawn"], r["premise"], r["member"], r["unknown"], r["not_member"]]
               for r in thm["rows"]]
    for r in thm["rows"]:
        metrics.append({"key": f"table1|{r['row']}|not_member", "kind": "counterexample", "value": r["not_member"]})
        metrics.append({"key": f"table1|{r['row']}|premise_cases", "kind": "info", "value": r["premise"]})
    lem = ctx.checkpoint(f"lemmas-{b['lemma_examples']}",
                         lambda: repro.table1_lemma_rows(b["lemma_examples"], progress=ctx.progress))
    lem_rows = [
        [r["row"], r["paper"], r["found"], r["examples"], r["paper_shape"], r["shape"], r["ad"], r["bouligand"]]
        for r in lem["rows"]
    ]
    for r in lem["rows"]:
        metrics.append({"key": f"table1|{r['row']}|examples_to_counterexample", "kind": "info", "value": r["examples"]})
        metrics.append({"key": f"table1|{r['row']}|found", "kind": "verdict",
                        "value": "not_member" if r["found"] else "none_found"})
        metrics.append({"key": f"table1|{r['row']}|paper_case", "kind": "verdict", "value": r["paper_case"]})
    tables = [
        table("Table 1, theorem rows: oracle verdicts on premise-satisfying generated cases",
              ["row", "paper", "drawn", "premise holds", "member", "unknown", "not_member"], th_rows),
        table("Table 1, lemma rows: counterexample search (Hypothesis, derandomized) and reduction",
              ["row", "paper", "found", "examples needed", "paper's minimal shape", "shape", "AD", "Bouligand set"],
              lem_rows),
    ]
    return tables, thm["claims"] + lem["claims"]


def _table2(ctx, b: dict, metrics: list, run: dict | None) -> tuple[list, list, list, dict]:
    """Sec. 4's Scenarios 1 and 2 and the monitor's overhead (with the stored GPU run's, if any): tables, claims
    and both scenarios' results; appends their metrics."""
    from nsverify.papers.park import repro

    t2 = ctx.checkpoint(f"table2-{b}", lambda: repro.table2(b["s1_steps"], b["s2_steps"], b["batch"],
                                                             b["timing_steps"], progress=ctx.progress))
    s1, s2 = t2["scenario1"], t2["scenario2"]
    s1_rows = [[r["network"], r["steps"], r["kink_touches"], r["touched_steps"], r["rank_ok_steps"], r["correct"]]
               for r in s1]
    for r in s1:
        metrics.append({"key": f"scenario1|{r['network']}|kink_touches", "kind": "info", "value": r["kink_touches"]})
    t2_rows = []
    for r, sh in zip(s2["rows"], t2["tie_shares"]):
        share = f"{100 * sh['share']:.3g}% [{100 * sh['lo']:.3g}, {100 * sh['hi']:.3g}]"
        t2_rows.append([r["network"], r["pool"], share,
                        f"{100 * sh['share_all']:.3g}%", f"{r['steps_nontrivial']}/{r['steps']}",
                        "NA" if r["avg_nontrivial"] is None else f"{r['avg_nontrivial']:.2f}", r["correct"]])
        metrics.append({"key": f"scenario2|{s2['data']}|{r['network']}|{r['pool']}|tie_share_alg2", "kind": "share",
                        "value": sh["share"], "lo": sh["lo"], "hi": sh["hi"]})
    ov_rows, step_rows = _overhead_rows(s2, metrics, run)
    tables = [
        table("Scenario 1: fully connected nets on digits (Theorem 5 rank test at kink touches)",
              ["network", "steps", "kink touches", "steps with touches", "rank test held", "correct?"], s1_rows),
        table(f"Scenario 2 (Table 2 layout) on {s2['data']} inputs: per pooling layer",
              ["network", "pool layer", "max ops with |S_j|>=2 and max > 0 (Alg. 2) [Wilson 95%]",
               "all ties incl. all-zero windows", "steps with S_j\\T_j != {}", "avg |S_j \\ T_j|", "correct?"],
              t2_rows),
        table("Monitor overhead (median step time, same batches, interleaved step by step)",
              ["network", "plain ms", "monitored ms", "ratio", "extra ms per tied window (least squares)"], ov_rows),
        table("Monitor overhead per step against the step's tied windows",
              ["network", "step", "plain ms", "monitored ms", "ratio", "tied windows", "tied, max > 0 (Alg. 2)"],
              step_rows),
    ]
    claims = t2["claims"] + (run["park"]["claims"] if run is not None else [])
    return tables, claims, s1, s2


def _overhead_rows(s2: dict, metrics: list, run: dict | None) -> tuple[list, list]:
    """The overhead table's rows (this run's networks, then the stored GPU run's) and the per-step rows."""
    ov_rows, step_rows = [], []
    for name, o in s2["overhead"].items():
        ov_rows.append([name, f"{1000 * o['plain_s']:.1f}", f"{1000 * o['monitored_s']:.1f}", f"{o['ratio']:.2f}",
                        _per_tie_ms(o["per_step"])])
        metrics.append({"key": f"monitor_overhead|{s2['data']}|{name}", "kind": "bench_ratio", "value": o["ratio"],
                        "unit": "monitored/plain step time", "samples": o["ratio_samples"],
                        # step i is the same step in every run (same seed, data and batch order): the nightly
                        # compares runs step by step, so the steps' spread (tie counts vary) cancels
                        "sample_keys": list(range(len(o["ratio_samples"]))),
                        "paired_by": f"training step ({s2['data']} data, fixed seed)"})
        step_rows += [[name, i, f"{1000 * r['plain_s']:.1f}", f"{1000 * r['monitored_s']:.1f}",
                       f"{r['monitored_s'] / r['plain_s']:.2f}", r["tied"], r["tied_positive"]]
                      for i, r in enumerate(o["per_step"])]
    if run is not None:
        for name, o in run["park"]["overhead"].items():
            ov_rows.append([f"{name} [GPU: {run['provenance']}]", f"{1000 * o['plain_s']:.1f}",
                            f"{1000 * o['monitored_s']:.1f}", f"{o['ratio']:.2f}", _per_tie_ms(o["per_step"])])
    return ov_rows, step_rows


def _per_tie_ms(per_step: list) -> str:
    """Slope of (monitored - plain) step time against the tied windows of the step, in ms per window."""
    xs = [r["tied"] for r in per_step]
    ys = [1000 * (r["monitored_s"] - r["plain_s"]) for r in per_step]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx == 0:
        return "n/a (tie count constant)"
    return f"{sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx:.3g}"
