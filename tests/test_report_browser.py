"""index.html in a real browser: headless Chromium lays the page out; the first two screens show what matters.

Within the first 2,000 px of a 1280-px-wide window: the status rows (the run's health: a green or red badge of
regressions and failed sections, claim verdicts changed; the claims' state: a neutral badge), the claims table
grouped by paper and the first overview plot; the regressions and convention changes on the first screen; no
``None`` and no raw JSON anywhere in the page's visible text (``innerText``); the thousand raw convention metrics
collapsed in ``<details>``. Legibility at 1280x800 and at a phone's 390x844: no sideways scroll, no visible text
under 11 px (HTML, SVG and the PNG plots' labels), no internal metric key visible. Checked from Chromium's own
layout (element boxes, computed font sizes and text, read by a probe script added to a copy of the page) and from
screenshots of the first two screens.

Needs Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it when it can); skipped with that
advice otherwise.
"""
import html
import json
import re
import shutil
import subprocess

import pytest

from nsverify.report import section
from nsverify.report.nightly import merge_nightly, run_nightly
from nsverify.report.schema import load_report
from tests import report_fakes

fake_sections, fake_machine = report_fakes.fake_sections, report_fakes.fake_machine  # fixtures

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium not installed (Debian: apt-get install chromium chromium-driver); rendering not checked")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars"]
WIDTH, HEIGHT = 1280, 900
RED, GREEN = (0xb0, 0x00, 0x20), (0x17, 0x69, 0x2b)  # the badge backgrounds (html.CSS)
#: the status line, the claims table and the first plot must start within this many pixels of the top
TWO_SCREENS = 2000
PROBE = """<script>
const out = {};
for (const id of ["status-line", "summary-status", "claims-status", "claims-table", "plots", "plot-forest",
                  "regressions", "claim-changes", "convention-changes", "errata"]) {
  const e = document.getElementById(id);
  if (!e) { out[id] = null; continue; }
  const first = e.tagName === "UL" ? e.querySelector("li") : e;
  const r = first.getBoundingClientRect();
  out[id] = {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY, height: r.height,
             text: first.innerText};
}
const plots = [...document.querySelectorAll("#plots figure")];
out.first_plot = plots.length ? plots[0].id : null;
out.body_text = document.body.innerText;
out.rows = document.querySelectorAll("tr").length;
out.visible_rows = [...document.querySelectorAll("tr")].filter(tr => tr.checkVisibility()).length;
document.body.setAttribute("data-layout", JSON.stringify(out));
</script>"""


def chromium(tmp_path, *args):
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def layout(tmp_path, index):
    """Chromium's layout of ``index``: element boxes of the summary (from the top of the page), its visible text,
    row counts (a probe script added to a copy of the page; the report itself has no scripts)."""
    probe = tmp_path / "probe.html"
    shutil.copy(index.parent / "report.json", tmp_path / "report.json")
    probe.write_text(index.read_text().replace("</body>", PROBE + "</body>"))
    dom = chromium(tmp_path, "--dump-dom", probe.as_uri())
    return json.loads(html.unescape(re.search(r'data-layout="([^"]*)"', dom).group(1)))


def register_project(state: dict) -> None:
    """A project-like report: a conventions section with 1200 raw metrics, claims with rich fields (held True,
    False, None), a benchmark ratio with samples."""

    @section("conventions", "PyTorch's conventions at kinks and ties", order=1)
    def conventions(ctx):
        ms = [{"key": f"op{i}|x=0|float32|cpu|eager", "kind": "convention", "value": "left"} for i in range(1200)]
        ms[0]["value"] = state["relu0"]
        return {"summary": "1200 evaluations", "data": {"metrics": ms},
                "tables": [{"title": "Matrix", "columns": ["op", "rule"], "rows": [[f"op{i}", "left"]
                                                                                   for i in range(1200)]}]}

    @section("zones", "Zone volumes", order=2)
    def zones(ctx):
        claims = [{"claim": "Table 3.2: 64 bits -> 0% of minibatches impacted", "measured": "0/48", "held": True},
                  {"claim": "Table 3.2: 32 bits -> strictly between 0% and 100% of minibatches",
                   "source": "Boustany, thesis, Table 3.2", "measured": 1.0, "interval": [0.93, 1.0], "n": 48,
                   "power": 0.8, "threshold": 1e-8, "held": False},
                  {"claim": "Fig 3.6: the share grows with the batch size", "measured": "2 sizes", "held": None}]
        s = [state["ratio"] * f for f in (1.0, 1.02, 0.98, 1.05, 0.97, 1.01, 0.99)]
        return {"summary": "zone shares", "claims": claims,
                "data": {"metrics": [{"key": "d_over_forward", "kind": "bench_ratio", "value": min(s),
                                      "samples": s}]}}


def screenshot(tmp_path, index, height=2 * HEIGHT):
    """A screenshot of the first ``height`` px of the page (two screens by default), as an RGB image."""
    from PIL import Image

    png = tmp_path / "screens.png"
    chromium(tmp_path, f"--screenshot={png}", f"--window-size={WIDTH},{height}", index.as_uri())
    with Image.open(png) as im:
        assert im.size == (WIDTH, height)
        return im.convert("RGB")


def test_first_two_screens_show_status_claims_and_plots(tmp_path, fake_sections, fake_machine):
    """A report with a section of every shape (tests/report_fakes.py) and a claim regression: the status line,
    the claims table and the first plot in the first 2,000 px, no None and no raw JSON visible."""
    state = {"held": True}
    report_fakes.register_every_section(state)
    run_nightly(tmp_path / "r", quick=True)
    state["held"] = False
    index = run_nightly(tmp_path / "r", quick=True) / "index.html"
    box = layout(tmp_path, index)
    assert box["first_plot"] == "plot-forest"
    for element in ("status-line", "claims-table", "plot-forest"):
        b = box[element]
        assert b is not None and b["height"] > 0, element
        assert 0 <= b["top"] < TWO_SCREENS, (element, b["top"])
    assert box["status-line"]["bottom"] <= HEIGHT and box["claim-changes"]["bottom"] <= HEIGHT
    assert box["summary-status"]["text"] == "1 regression"
    assert box["claims-status"]["text"] == "2 reproduced, 1 not reproduced, 1 erratum, 2 undecided"
    assert "1 regression" in box["status-line"]["text"] and "1 claim verdict changed" in box["status-line"]["text"]
    assert "32 bits: strictly between 0% and 100%" in box["claim-changes"]["text"]
    assert "Després et al. (2024)" in box["claims-table"]["text"]
    assert "sign error" in box["errata"]["text"] and "sign error" not in box["claims-table"]["text"]
    text = box["body_text"]
    assert re.findall(r"\bNone\b", text) == [] and report_fakes.RAW_JSON.findall(text) == []
    im = screenshot(tmp_path, index)
    count = {c: n for n, c in im.getcolors(maxcolors=WIDTH * 2 * HEIGHT)}
    assert count.get(RED, 0) > 500  # the RED badge is drawn
    top = im.crop((0, 0, WIDTH, TWO_SCREENS - HEIGHT + HEIGHT // 2))
    assert len(top.getcolors(maxcolors=WIDTH * HEIGHT) or []) > 200  # plots (many colours), not only text


def test_first_screen_shows_verdict_regressions_and_unreproduced_claims(tmp_path, fake_sections, fake_machine):
    state = {"relu0": "left", "ratio": 1.3}
    register_project(state)
    run_nightly(tmp_path / "r", quick=True)
    state.update(relu0="right", ratio=2.9)  # one convention changed, one benchmark 2.2x slower
    run = run_nightly(tmp_path / "r", quick=True)
    index = run / "index.html"
    box = layout(tmp_path, index)
    for element in ("status-line", "regressions", "convention-changes"):
        b = box[element]
        assert b is not None and b["height"] > 0, element
        assert 0 <= b["top"] and b["bottom"] <= HEIGHT, (element, b)  # on the first screen
    assert box["claims-table"]["top"] < TWO_SCREENS
    assert box["summary-status"]["text"] == "2 regressions"
    assert box["claims-status"]["text"] == "1 reproduced, 1 not reproduced, 0 errata, 1 undecided"
    assert box["regressions"]["text"].startswith("zones: d over forward") and "slower" in box["regressions"]["text"]
    assert "strictly between 0% and 100%" in box["claims-table"]["text"]
    assert "op0 \u00b7 x = 0 \u00b7 float32 \u00b7 cpu \u00b7 eager" in box["convention-changes"]["text"]
    assert box["rows"] > 2400 and box["visible_rows"] < 60  # raw metrics and the 1200-row table collapsed
    im = screenshot(tmp_path, index, HEIGHT)
    count = {c: n for n, c in im.getcolors(maxcolors=WIDTH * HEIGHT)}
    assert count.get(RED, 0) > 500  # the badge is drawn on the first screen


def test_green_report_and_merged_report_render(tmp_path, fake_sections, fake_machine):
    state = {"relu0": "left", "ratio": 1.3}
    register_project(state)
    run_nightly(tmp_path / "r", quick=True)
    run = run_nightly(tmp_path / "r", quick=True)
    box = layout(tmp_path, run / "index.html")
    assert box["summary-status"]["text"] == "no regressions" and box["regressions"] is None
    assert box["claims-status"]["text"] == "1 reproduced, 1 not reproduced, 0 errata, 1 undecided"  # its own badge
    assert box["claims-table"]["top"] < TWO_SCREENS and box["plots"]["top"] < HEIGHT
    fake_machine.update(gpu="NVIDIA H200", machine_id="gpubox|cpu|H200", hostname="gpubox")
    gpu = run_nightly(tmp_path / "g", quick=True)
    merged = merge_nightly(tmp_path / "m", [run, gpu])
    dom = chromium(tmp_path, "--dump-dom", (merged / "index.html").as_uri())
    assert '<div id="summary">' in dom and "<th>gpubox (NVIDIA H200)</th>" in dom
    for name in load_report(run)["sections"]:
        assert f'<section id="sec-{name}" class="section">' in dom
    assert "2 reproduced, 2 not reproduced, 0 errata, 2 undecided" in dom  # one refuted claim per machine


#: legibility, measured by Chromium: the page's width against the window's, the smallest rendered font of any
#: visible text (HTML text from its computed style; SVG text scaled by its drawing's rendered width over its
#: viewBox; PNG plots from their label size, ``data-font-px``, scaled by their rendered width over their natural
#: width), and the visible text (``innerText``: closed ``<details>`` excluded)
LEGIBILITY = """<script>
window.addEventListener("load", () => {
const out = {inner: window.innerWidth, scroll: document.documentElement.scrollWidth, small: []};
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const e = n.parentElement;
  if (!n.textContent.trim() || !e || e.closest("script,style,title") || !e.checkVisibility()) continue;
  let px = parseFloat(getComputedStyle(e).fontSize);
  const svg = e.closest("svg");
  if (svg) px *= svg.getBoundingClientRect().width / (svg.viewBox.baseVal.width || svg.width.baseVal.value);
  if (px < 11) out.small.push([e.tagName, px, n.textContent.trim().slice(0, 40)]);
}
out.images = [...document.querySelectorAll("img[data-font-px]")].map(i => [i.closest("figure").id,
  parseFloat(i.dataset.fontPx) * i.getBoundingClientRect().width / i.naturalWidth]);
out.wide = [...document.body.querySelectorAll("*")].filter(e => e.getBoundingClientRect().right > innerWidth
  && !e.parentElement.closest(".scroll,figure,pre,details:not([open])")).map(e => e.tagName + "#" + e.id + "."
  + e.className).slice(0, 10);
out.text = document.body.innerText;
document.body.setAttribute("data-legibility", JSON.stringify(out));
});
</script>"""
#: an internal metric key (``table2.1|mul|cR1|nNone``, ``relu|0|float32|cpu|eager``) or a JSON ``null``
INTERNAL_KEY = re.compile(r"[\w.=-]+\|[\w.= -]+|\bnull\b|\bnNone\b")


#: headless Chromium's windows are at least 500 px wide: a phone's width is a frame of that width in a window
PHONE_FRAME = """<!DOCTYPE html><html><body style="margin:0"><iframe id="phone" src="{src}" width="{width}"
height="{height}" style="border:0"></iframe><script>window.addEventListener("load", () =>
document.body.setAttribute("data-legibility",
  document.getElementById("phone").contentDocument.body.getAttribute("data-legibility")));</script></body></html>"""


def legibility(tmp_path, index, width, height):
    """What :data:`LEGIBILITY` measures on ``index`` in a ``width`` x ``height`` window (a frame of that size
    under 500 px)."""
    probe = tmp_path / f"legible-{width}.html"
    probe.write_text(index.read_text().replace("</body>", LEGIBILITY + "</body>"))
    page, window = probe, (width, height)
    if width < 500:
        page, window = tmp_path / f"phone-{width}.html", (800, height + 20)
        page.write_text(PHONE_FRAME.format(src=probe.name, width=width, height=height))
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run([CHROMIUM, *FLAGS, "--allow-file-access-from-files", f"--user-data-dir={profile}",
                           f"--window-size={window[0]},{window[1]}", "--virtual-time-budget=5000", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(html.unescape(re.search(r'data-legibility="([^"]*)"', proc.stdout).group(1)))


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)])
def test_the_page_is_legible_at_a_laptop_and_a_phone_width(tmp_path, fake_sections, fake_machine, width, height):
    """At 1280x800 and at a phone's 390x844: the page never scrolls sideways (wide tables and plots scroll in
    their own box), no visible text (HTML, the SVG forest plot, the PNG plots' labels) is under 11 px, and no
    internal metric key or JSON ``null`` is visible; the first screen says the run's health and the claims' state
    apart, in words."""
    report_fakes.register_every_section({"held": False})
    run_nightly(tmp_path / "r", quick=True)
    index = run_nightly(tmp_path / "r", quick=True) / "index.html"
    out = legibility(tmp_path, index, width, height)
    assert out["inner"] == width
    assert out["scroll"] <= out["inner"], f"the page is {out['scroll']} px wide in a {width}-px window: {out['wide']}"
    assert out["small"] == [], out["small"][:10]
    assert {fid for fid, _ in out["images"]} >= {"plot-conventions", "plot-releases", "plot-zones"}
    assert all(px >= 11 for _, px in out["images"]), out["images"]
    assert INTERNAL_KEY.findall(out["text"]) == []
    assert "Run health" in out["text"] and "Claims" in out["text"]
    box = layout(tmp_path, index)
    assert box["summary-status"]["text"] == "no regressions"
    assert box["claims-status"]["text"] == "2 reproduced, 1 not reproduced, 1 erratum, 2 undecided"


def test_the_claims_and_the_plots_are_drawn_whole(tmp_path, fake_sections, fake_machine):
    """A screenshot at 1280x800 of the first screens (looked at: the status rows, the forest plot across the page,
    the heatmap's labels); the claims table's cells wrap (no text clipped, none only in a tooltip)."""
    report_fakes.register_every_section({"held": False})
    index = run_nightly(tmp_path / "r", quick=True) / "index.html"
    page = index.read_text()
    table = page.split('id="claims-table"')[1].split("</table>")[0]
    assert "title=" not in table and "nowrap" not in page and "ellipsis" not in page
    assert "very often&#x27; read as a majority" in table  # the threshold's note, in the cell, not in a tooltip
    im = screenshot(tmp_path, index)
    assert im.size == (WIDTH, 2 * HEIGHT)
