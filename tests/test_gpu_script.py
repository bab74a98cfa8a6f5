"""The GPU run of issue 39, prepared on CPU: ``scripts/gpu/perf.py --parts monitor,pool`` (its dry run, its time
budget, its JSON written after every part) and the reading of the stored GPU runs of the monitor's overhead
(:func:`nsverify.papers.park.overhead.newest_gpu_run`: the newest run is read, the older ones are stale)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from nsverify.claims.provenance import DATA_DIR, ProvenanceError, load_measurement
from nsverify.papers.park.overhead import gpu_overhead_runs, newest_gpu_run

ROOT = Path(__file__).resolve().parent.parent


def _perf_script():
    spec = importlib.util.spec_from_file_location("gpu_perf_script_i39", ROOT / "scripts" / "gpu" / "perf.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------------------------------------------
# stored runs: newest and stale
# ------------------------------------------------------------------------------------------------------------------
def _step(plain, monitored, tied=3, positive=1):
    return {"plain_s": plain, "monitored_s": monitored, "tied_windows": positive, "tied_windows_all": tied}


def _perf_run(date, ratio_vgg=2.0, dry=False, prov_style="new"):
    prov = ({"date": date, "commit": "a" * 40, "device": "cuda", "gpu": "GPU-P", "torch": "2.x",
             "command": "perf.py --out o"} if prov_style == "new" else
            {"date_utc": date, "git_commit": "b" * 40, "device": "cuda", "gpu": "GPU-P", "torch": "2.x",
             "command": "perf.py --out o"})
    monitor = [{"model": "vgg11", "width": 1.0, "batch": 64, "plain_s": 0.01, "monitored_s": 0.01 * ratio_vgg,
                "ratio": ratio_vgg, "per_step": [_step(0.01, 0.01 * ratio_vgg)] * 3},
               {"model": "resnet18", "width": 0.25, "batch": 64, "plain_s": 0.01, "monitored_s": 0.012,
                "ratio": 1.2, "per_step": [_step(0.01, 0.012)] * 3}]
    return {"schema": "nsverify.gpu.perf/1", "dry_run": dry, "provenance": prov, "monitor": monitor}


def _claims_run(date, ratio=4.0):
    steps = [{"plain_s": 0.008, "monitored_s": 0.008 * ratio, "tied": 10, "tied_positive": 2}] * 3
    return {"provenance": {"device": "GPU-C", "torch": "2.y", "date": date, "command": "claims.py --out o",
                           "commit": "c" * 40},
            "sizes": {"park_width": 1.0, "park_batch": 64},
            "park_overhead": {"ResNet18": {"per_step": steps, "plain_s": 0.008, "monitored_s": 0.008 * ratio,
                                           "ratio": ratio}}}


def _write(d: Path, name: str, data: dict):
    (d / f"{name}.json").write_text(json.dumps(data))


def test_newest_run_is_read_and_the_older_marked_stale(tmp_path):
    _write(tmp_path, "perf", _perf_run("2026-11-27T04:56:41+00:00"))
    _write(tmp_path, "claims", _claims_run("2026-11-26T21:40:34+00:00"))
    runs = gpu_overhead_runs(tmp_path)
    assert [r.name for r in runs] == ["perf", "claims"] and [r.stale for r in runs] == [False, True]
    assert "stale" in runs[1].describe() and "perf.json" in runs[1].describe() and "stale" not in runs[0].describe()
    new = newest_gpu_run(tmp_path)
    assert new.name == "perf" and new.gpu == "GPU-P" and new.commit == "a" * 40
    assert set(new.at_width(1.0)) == {"VGG11"} and set(new.at_width(0.25)) == {"ResNet18"}
    vgg = new.at_width(1.0)["VGG11"]  # in the shape repro.overhead_claims reads
    assert vgg["ratio"] == 2.0 and vgg["per_step"][0] == {"plain_s": 0.01, "monitored_s": 0.02, "tied": 3,
                                                           "tied_positive": 1}


def test_dates_compare_as_instants_across_time_zones(tmp_path):
    # 01:00 at UTC+5 on the 27th is 20:00 UTC on the 26th: older than the claims run at 21:40 UTC on the 26th
    _write(tmp_path, "perf", _perf_run("2026-11-27T01:00:00+05:00", prov_style="old"))
    _write(tmp_path, "claims", _claims_run("2026-11-26T21:40:34+00:00"))
    runs = gpu_overhead_runs(tmp_path)
    assert [(r.name, r.stale) for r in runs] == [("claims", False), ("perf", True)]
    assert runs[1].commit == "b" * 40 and runs[0].at_width(1.0)["ResNet18"]["ratio"] == 4.0  # older spelling read


def test_dry_runs_and_runs_without_the_overhead_are_not_runs(tmp_path):
    assert newest_gpu_run(tmp_path) is None  # no file at all
    _write(tmp_path, "perf", _perf_run("2026-11-28T00:00:00+00:00", dry=True))
    no_overhead = _claims_run("2026-11-20T00:00:00+00:00")
    del no_overhead["park_overhead"]
    _write(tmp_path, "claims", no_overhead)
    assert gpu_overhead_runs(tmp_path) == []


def test_a_run_without_its_provenance_is_refused_by_name(tmp_path):
    bad = _perf_run("2026-11-27T00:00:00+00:00")
    del bad["provenance"]["gpu"], bad["provenance"]["device"], bad["provenance"]["command"]
    _write(tmp_path, "perf", bad)
    with pytest.raises(ProvenanceError, match=r"perf\.json.*missing gpu, command"):
        gpu_overhead_runs(tmp_path)
    bad = _perf_run("yesterday")
    _write(tmp_path, "perf", bad)
    with pytest.raises(ProvenanceError, match="not ISO 8601"):
        gpu_overhead_runs(tmp_path)


def test_the_shipped_runs_newest_is_the_perf_run():
    """The shipped files, read independently: perf.json's date is later than claims.json's, so the claims run's
    overhead (measured before the monitor's rewrite) is stale."""
    perf = json.loads((DATA_DIR / "perf.json").read_text())
    claims = json.loads((DATA_DIR / "claims.json").read_text())
    perf_date = perf["provenance"].get("date") or perf["provenance"]["date_utc"]
    assert perf_date > claims["provenance"]["date"]  # both ISO 8601 in UTC: the strings order as the instants
    runs = gpu_overhead_runs()
    assert [(r.name, r.stale) for r in runs] == [("perf", False), ("claims", True)]
    want = {(m["model"], m["width"]): m["ratio"] for m in perf["monitor"]}
    got = {(n, w): m["ratio"] for (n, w), m in runs[0].networks.items()}
    assert got == {({"vgg11": "VGG11", "resnet18": "ResNet18"}[k[0]], k[1]): v for k, v in want.items()}


# ------------------------------------------------------------------------------------------------------------------
# scripts/gpu/perf.py: the dry run of issue 39's parts, the budget, the JSON after every part
# ------------------------------------------------------------------------------------------------------------------
def test_dry_run_of_monitor_and_pool(tmp_path):
    """``--parts monitor,pool`` on CPU at tiny sizes: both parts land with the standard provenance block, the
    monitor's ratios with their interquartile range, and (with the dry-run mark removed) the file reads as a
    stored run of both networks."""
    assert _perf_script().main(["--out", str(tmp_path), "--dry-run", "--parts", "monitor,pool"]) == 0
    data = load_measurement(tmp_path / "perf.json")  # refuses a file without device, torch, date, command
    assert data["dry_run"] is True and set(data) >= {"monitor", "pool_ratios"}
    assert not {"cuda_tests", "kernel_equality", "monitor_agreement"} & set(data)
    assert data["provenance"]["commit"] == data["provenance"]["git_commit"]
    for m in data["monitor"]:
        b = m["breakdown"]
        assert b["rounds"] == 2 and set(b["median_s"]) == {"forward", "forward_hooks", "forward_check"}
        assert b["hooks_ratio"] == b["median_s"]["forward_hooks"] / b["median_s"]["forward"] > 0
        lo, hi = m["round_ratio_iqr"]
        ratios = sorted(p["monitored_s"] / p["plain_s"] for p in m["per_step"])
        assert ratios[0] <= lo <= hi <= ratios[-1]
    assert {r["candidate"] for r in data["pool_ratios"]} >= {"maxpool_minimal", "maxpool_hybrid"}
    assert gpu_overhead_runs(tmp_path) == []  # a rehearsal is not a run
    data["dry_run"] = False
    (tmp_path / "perf.json").write_text(json.dumps(data))
    run = newest_gpu_run(tmp_path)
    assert {n for n, _w in run.networks} == {"VGG11", "ResNet18"} and not run.stale


def test_json_is_written_after_every_part_and_the_budget_stops_parts(tmp_path, monkeypatch):
    mod = _perf_script()
    seen = {}

    def kernel_equality(device, small):
        return [{"equal": True}]

    def pool_ratios(device, small, repeat):  # by the time the second part starts, the first is on disk
        seen.update(json.loads((tmp_path / "perf.json").read_text()))
        return [{"candidate": "maxpool_minimal"}]

    monkeypatch.setattr(mod, "kernel_equality", kernel_equality)
    monkeypatch.setattr(mod, "pool_ratios", pool_ratios)
    assert mod.main(["--out", str(tmp_path), "--dry-run", "--parts", "kernel_equality,pool"]) == 0
    assert seen["kernel_equality"] == [{"equal": True}] and "provenance" in seen and "pool_ratios" not in seen

    clock = iter([0.0, 0.0, 0.0])  # start, first part's log line, its budget check; 100 s from then on
    monkeypatch.setattr(mod, "time", SimpleNamespace(time=lambda: next(clock, 100.0)))
    assert mod.main(["--out", str(tmp_path), "--dry-run", "--parts", "kernel_equality,pool", "--budget-s",
                     "50"]) == 0
    data = json.loads((tmp_path / "perf.json").read_text())
    assert data["kernel_equality"] == [{"equal": True}] and "--budget-s 50" in data["pool_ratios"]["skipped"]


@pytest.mark.parametrize("argv, message", [(["--budget-s", "0"], "--budget-s 0"),
                                           (["--parts", "pool,poll"], "unknown part(s) poll"),
                                           (["--parts", "poll"], "pool = pool_ratios")])
def test_bad_budget_and_part_names_are_refused(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        _perf_script().main(["--out", str(tmp_path), "--dry-run", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------------------
# CPU and GPU side by side: the stored CPU run, the README's numbers, the nightly's table
# ------------------------------------------------------------------------------------------------------------------
def _quantile(xs, p):  # linear interpolation between order statistics, as numpy's default percentile
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def test_the_stored_cpu_run_is_its_samples_median_and_iqr():
    """The stored CPU run (asv_bench/ratios.py --area monitor), recomputed from its per-round samples: the median
    monitored step over the median plain step, the IQR of the per-round ratios, >= 15 rounds, both networks at
    both widths."""
    import statistics

    from nsverify.papers.park.overhead import CPU_RUN, cpu_overhead_run

    raw = json.loads(CPU_RUN.read_text())
    run = cpu_overhead_run()
    assert run["date"] == raw["provenance"]["date"] and run["commit"] == raw["provenance"]["commit"]
    assert set(run["networks"]) == {(n, w) for n in ("VGG11", "ResNet18") for w in (0.25, 1.0)}
    for c in raw["cases"]:
        plain, mon = c["samples_s"]["plain"], c["samples_s"]["monitored"]
        assert len(plain) == len(mon) >= 15
        got = run["networks"][({"vgg11": "VGG11", "resnet18": "ResNet18"}[c["model"]], c["width"])]
        assert got["ratio"] == pytest.approx(statistics.median(mon) / statistics.median(plain), rel=1e-12)
        per_round = [m / p for m, p in zip(mon, plain)]
        assert got["iqr"] == pytest.approx((_quantile(per_round, 0.25), _quantile(per_round, 0.75)), rel=1e-12)


def test_side_by_side_rows_and_the_comparison_at_full_width(tmp_path):
    from nsverify.papers.park.overhead import side_by_side

    _write(tmp_path, "perf", _perf_run("2026-11-27T04:56:41+00:00", ratio_vgg=1.5))
    gpu = newest_gpu_run(tmp_path)
    cpu = {"date": "2026-11-28T12:00:00+00:00", "commit": "d" * 40, "device": "cpu",
           "networks": {("VGG11", 1.0): {"ratio": 1.1, "iqr": (1.0, 1.2), "rounds": 15}}}
    t = side_by_side(cpu, gpu)
    rows = {(r[0], r[1]): r for r in t["rows"]}
    assert set(rows) == {("VGG11", "1"), ("ResNet18", "0.25")}
    vgg = rows[("VGG11", "1")]
    assert "1.10x" in vgg[2] and "2026-11-28, ddddddd" in vgg[2] and "15 rounds" in vgg[2]
    assert "1.50x" in vgg[3] and "GPU-P" in vgg[3] and "2026-11-27, aaaaaaa" in vgg[3] and vgg[4] == "within 1.77x"
    assert rows[("ResNet18", "0.25")][2] == "not measured" and rows[("ResNet18", "0.25")][4].startswith("n/a")
    _write(tmp_path, "perf", _perf_run("2026-11-27T04:56:41+00:00", ratio_vgg=1.8))
    assert side_by_side(None, newest_gpu_run(tmp_path))["rows"][-1][4] == "above 1.77x"  # Park: 419/237 = 1.77
    assert side_by_side(cpu, None)["rows"][0][3:] == ["not measured", "pending (no GPU run)"]


def test_the_nightly_adds_the_side_by_side_table_to_the_park_section():
    from nsverify.report.nightly import build_report

    rep = build_report({"park": {"summary": "s", "tables": []}, "zones": {"summary": "z", "tables": []}}, True,
                       machine={"id": "m"})
    (tab,) = rep["sections"]["park"]["tables"]
    assert "side by side" in tab["title"] and rep["sections"]["zones"]["tables"] == []
    perf = json.loads((DATA_DIR / "perf.json").read_text())
    vgg1 = next(m for m in perf["monitor"] if m["model"] == "vgg11" and m["width"] == 1.0)
    row = next(r for r in tab["rows"] if r[:2] == ["VGG11", "1"])
    assert f"{vgg1['ratio']:.2f}x" in row[3] and perf["provenance"]["gpu"] in row[3]
    assert build_report({"park": {"error": "boom"}}, True, machine={"id": "m"})["sections"]["park"] == {
        "error": "boom"}


def test_the_monitor_part_times_its_steps_without_the_profiler(monkeypatch):
    """cProfile slows the Python it watches: the timed steps run with the plain Monitor.check, and the profile
    comes from further, untimed steps."""
    from nsverify.papers.park.monitor import Monitor

    mod = _perf_script()
    plain_check, timed_with = Monitor.check, []

    def fake_overhead(name, **kw):
        timed_with.append(Monitor.check is plain_check)
        return {"model": name, "width": kw["width"]}

    monkeypatch.setattr(mod, "monitor_overhead", fake_overhead)
    monkeypatch.setattr(mod, "forward_breakdown", lambda *a: {})
    out = mod.monitor("cpu", True, 2)
    assert timed_with == [True, True] and Monitor.check is plain_check
    for m in out:
        calls = {r["function"].rsplit("(", 1)[-1]: r["calls"] for r in m["check_profile"]}
        assert m["check_profile"] and max(calls.values()) >= mod.PROFILE_STEPS


def test_a_stored_run_stopped_mid_part_and_a_bad_file_in_the_nightly(tmp_path, monkeypatch):
    """A perf run whose monitor part failed is no overhead run (the claims run is then the newest); a stored CPU
    run without its provenance puts the error in the nightly's table instead of stopping the nightly."""
    from nsverify.papers.park import overhead
    from nsverify.report.nightly import build_report

    failed = _perf_run("2026-11-28T00:00:00+00:00")
    failed["monitor"] = {"error": "RuntimeError: CUDA out of memory"}
    _write(tmp_path, "perf", failed)
    _write(tmp_path, "claims", _claims_run("2026-11-26T21:40:34+00:00"))
    assert [(r.name, r.stale) for r in gpu_overhead_runs(tmp_path)] == [("claims", False)]
    (tmp_path / "cpu.json").write_text(json.dumps({"cases": []}))
    monkeypatch.setattr(overhead, "CPU_RUN", tmp_path / "cpu.json")
    monkeypatch.setattr(overhead.cpu_overhead_run, "__defaults__", (tmp_path / "cpu.json",))
    (tab,) = build_report({"park": {"summary": "s", "tables": []}}, True, machine={"id": "m"})["sections"]["park"][
        "tables"]
    assert tab["rows"] and "cpu.json" in tab["rows"][0][0] and "provenance" in tab["rows"][0][0]
