"""One run, two CPU capabilities: the nightly run under several ``ATEN_CPU_CAPABILITY`` values on this machine,
and every claim's verdict under each, flagging the claims whose verdict depends on the CPU kernel (issue 24).

    python scripts/capabilities.py --only conventions --out /tmp/caps              # quick nightly, native vs avx2
    python scripts/capabilities.py --capabilities native,avx2,default --full --out runs/caps

Each capability runs ``python -m nsverify nightly`` in a child process with ``ATEN_CPU_CAPABILITY`` set
(``native``: unset, the CPU's own level) and its own report directory ``OUT/<capability>``; torch.compile gets one
Inductor cache per capability (``nsverify.conventions.inductor.capability_cache_dir``). The reports are then
matched claim by claim on their ids, as ``nsverify compare`` matches them (``nsverify.report.compare.claim_key``),
and compared metric by metric with ``nsverify.report.compare.compare_reports`` (the first capability is the
baseline). ``OUT/capabilities.json`` holds every claim's verdict and measurement under each capability, and
``OUT/capabilities.md`` the table; a claim whose verdict differs is marked "depends on the CPU kernel" with both
results. Exit status 0, or 1 with ``--fail-on-difference`` when a verdict differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nsverify.report.compare import VERDICT_WORDS, claim_key, compare_reports, format_comparison  # noqa: E402
from nsverify.report.schema import load_report  # noqa: E402

DEPENDS = "depends on the CPU kernel"


def run_nightly(capability: str, out: Path, nightly_args: list[str]) -> tuple[Path, float]:
    """Run the nightly under ``capability`` in a child process; (its run directory, seconds)."""
    return finish_nightly(*start_nightly(capability, out, nightly_args))


def start_nightly(capability: str, out: Path, nightly_args: list[str]):
    """Start the nightly under ``capability`` in a child process (see :func:`finish_nightly`)."""
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability != "native":
        env["ATEN_CPU_CAPABILITY"] = capability
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, "-m", "nsverify", "nightly", "--out", str(out / capability), *nightly_args]
    print(f"[capabilities] {capability}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    return capability, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True), time.monotonic()


def finish_nightly(capability: str, proc, t0: float) -> tuple[Path, float]:
    """Wait for a child of :func:`start_nightly`; (its run directory, seconds)."""
    stdout, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the nightly under {capability} exited with status {proc.returncode}")
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    return Path(lines[-1].strip()), time.monotonic() - t0


def claim_rows(reports: dict[str, dict]) -> list[dict]:
    """One row per claim (matched by id across the reports): its verdict and measurement under each capability,
    and ``depends`` when the verdicts differ (a claim missing under one capability counts as differing)."""
    rows: dict = {}
    for cap, report in reports.items():
        for name, sec in report["sections"].items():
            for c in sec.get("claims") or []:
                row = rows.setdefault((name, claim_key(c)), {"section": name, "id": claim_key(c),
                                                             "claim": c.get("claim", ""), "by": {}})
                row["by"][cap] = {"verdict": VERDICT_WORDS.get(c.get("held"), "undecided"),
                                  "measured": c.get("measured", ""), "reason": c.get("reason", ""),
                                  "runtime": c.get("runtime")}
    out = []
    for row in rows.values():
        verdicts = [row["by"].get(cap, {}).get("verdict", "absent") for cap in reports]
        row["depends"] = len(set(verdicts)) > 1
        out.append(row)
    return out


def format_markdown(rows: list[dict], caps: list[str], header: str) -> str:
    flagged = [r for r in rows if r["depends"]]
    lines = [header, "", f"{len(rows)} claims, {len(flagged)} whose verdict {DEPENDS}.", "",
             "| section | claim | " + " | ".join(caps) + " | |", "|---|---|" + "---|" * len(caps) + "---|"]
    for r in rows:
        cells = []
        for cap in caps:
            b = r["by"].get(cap)
            cells.append("absent" if b is None else
                         b["verdict"] + (f": {b['measured']}" if r["depends"] else ""))
        lines.append(f"| {r['section']} | {r['id']} | " + " | ".join(c.replace("|", "/") for c in cells)
                     + f" | {DEPENDS.upper() if r['depends'] else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--capabilities", default="native,avx2",
                   help="comma list of ATEN_CPU_CAPABILITY values (native = unset). Default: native,avx2")
    p.add_argument("--out", required=True, help="directory for the reports and the comparison")
    p.add_argument("--only", nargs="+", metavar="SECTION", help="nightly sections to run (default: all)")
    p.add_argument("--full", action="store_true", help="the full nightly (default: --quick)")
    p.add_argument("--jobs", type=int, default=1,
                   help="capabilities run at once (default 1: one after another, so that the timing claims of one "
                        "do not run beside the other; 2 on a machine with cores to spare)")
    p.add_argument("--fail-on-difference", action="store_true", help="exit 1 when a claim's verdict differs")
    args = p.parse_args(argv)
    caps = [c.strip() for c in args.capabilities.split(",") if c.strip()]
    if len(caps) < 2 or len(set(caps)) != len(caps):
        p.error("--capabilities: name at least two different capabilities")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nightly_args = ([] if args.full else ["--quick"]) + (["--only", *args.only] if args.only else [])
    if args.jobs < 1:
        p.error("--jobs: at least 1")
    reports, seconds, dirs = {}, {}, {}
    for i in range(0, len(caps), args.jobs):
        running = [start_nightly(cap, out, nightly_args) for cap in caps[i:i + args.jobs]]
        for child in running:
            cap = child[0]
            dirs[cap], seconds[cap] = finish_nightly(*child)
            reports[cap] = load_report(dirs[cap])
    rows = claim_rows(reports)
    comparisons = {cap: compare_reports(reports[caps[0]], reports[cap], base_path=str(dirs[caps[0]]))
                   for cap in caps[1:]}
    machine = {cap: {k: reports[cap]["machine"].get(k) for k in ("cpu", "cpu_capability", "aten_cpu_capability")}
               for cap in caps}
    doc = {"capabilities": caps, "reports": {c: str(d) for c, d in dirs.items()}, "seconds": seconds,
           "machine": machine, "claims": rows, "depends_on_cpu_kernel": [r["id"] for r in rows if r["depends"]],
           "comparisons": comparisons}
    (out / "capabilities.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    header = (f"# One run, {len(caps)} CPU capabilities ({'full' if args.full else 'quick'} nightly"
              f"{', sections ' + ', '.join(args.only) if args.only else ''})\n\n"
              + "\n".join(f"* {cap}: capability {machine[cap]['cpu_capability']}, {seconds[cap]:.0f} s, {dirs[cap]}"
                          for cap in caps))
    text = format_markdown(rows, caps, header)
    text += "".join(f"\n\n## {caps[0]} -> {cap}: metrics\n\n{format_comparison(c)}" for cap, c in comparisons.items())
    (out / "capabilities.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if args.fail_on_difference and doc["depends_on_cpu_kernel"] else 0


if __name__ == "__main__":
    sys.exit(main())
