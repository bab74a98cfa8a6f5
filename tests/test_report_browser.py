"""index.html renders in a real browser: headless Chromium loads it; the summary and every section are there.

Needs Debian's ``chromium`` (``apt-get install chromium chromium-driver``); skipped with that advice
otherwise.
"""
import shutil
import subprocess

import pytest

from nsverify.report.nightly import merge_nightly, run_nightly
from nsverify.report.schema import load_report
from tests import report_fakes
from tests.report_fakes import register_conventions

fake_sections, fake_machine = report_fakes.fake_sections, report_fakes.fake_machine  # fixtures

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium not installed (Debian: apt-get install chromium chromium-driver); rendering not checked")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def chromium(tmp_path, *args):
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_index_html_renders_in_chromium(tmp_path, fake_sections, fake_machine):
    state = {"relu0": 0.0}
    register_conventions(state)
    run_nightly(tmp_path / "r", quick=True)
    state["relu0"] = 1.0
    run = run_nightly(tmp_path / "r", quick=True)
    report = load_report(run)
    index = run / "index.html"
    dom = chromium(tmp_path, "--dump-dom", index.as_uri())  # the DOM after Chromium parsed and laid it out
    assert '<div id="summary">' in dom and 'id="summary-status">RED</span>' in dom
    assert '<li class="regression"><a href="#sec-conv">conv</a>' in dom
    for name in report["sections"]:
        assert f'<section id="sec-{name}" class="section">' in dom
    assert dom.count("<svg") >= 1 and 'id="machine"' in dom
    # a merged report (CPU box + GPU box) renders with one column per machine
    fake_machine.update(gpu="NVIDIA H200", machine_id="gpubox|cpu|H200", hostname="gpubox")
    gpu = run_nightly(tmp_path / "g", quick=True)
    merged = merge_nightly(tmp_path / "m", [run, gpu])
    dom = chromium(tmp_path, "--dump-dom", (merged / "index.html").as_uri())
    assert '<div id="summary">' in dom and "<th>gpubox (NVIDIA H200)</th>" in dom
    for name in report["sections"]:
        assert f'<section id="sec-{name}" class="section">' in dom
    png = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={png}", "--window-size=1200,1600", index.as_uri())
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
