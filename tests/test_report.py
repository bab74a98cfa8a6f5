"""The report framework: section registration, failure isolation, atomic writes, bad output dirs."""
import html
import json
import os
import re

import pytest

from nsverify.errors import OutputDirError
from nsverify.report import SECTIONS, section
from nsverify.report.nightly import build_report, ensure_writable_dir, run_nightly, run_sections, write_report
from tests import report_fakes
from tests.report_fakes import FAKE_MACHINE

fake_sections, fake_machine = report_fakes.fake_sections, report_fakes.fake_machine  # fixtures


@pytest.fixture
def temp_sections():
    saved = dict(SECTIONS)
    SECTIONS.clear()
    yield
    SECTIONS.clear()
    SECTIONS.update(saved)


def test_failing_section_is_recorded_and_others_survive(temp_sections, tmp_path):
    @section("good", "Good", order=1)
    def good(ctx):
        ctx.progress("working", 1, 1)
        return {"summary": "fine", "tables": [{"title": "t", "columns": ["a"], "rows": [[1]]}]}

    @section("bad", "Bad", order=2)
    def bad(ctx):
        raise RuntimeError("boom")

    res = run_sections(quick=True, scratch=tmp_path)
    assert res["good"]["status"] == "ok"
    assert res["bad"]["status"] == "failed"
    assert "RuntimeError: boom" in res["bad"]["traceback"]
    run = write_report(tmp_path, build_report(res, quick=True))
    data = json.loads((run / "report.json").read_text())
    assert data["schema"] == "nsverify.report/1"
    assert set(data["sections"]) == {"good", "bad"}
    html = (run / "index.html").read_text()
    assert 'id="sec-bad"' in html and "boom" in html and 'class="badge red"' in html
    assert os.readlink(tmp_path / "latest") == run.name
    # a second run repoints latest and leaves no temporary directory behind
    run2 = write_report(tmp_path, build_report(res, quick=True), stamp=run.name)
    assert run2 != run and os.readlink(tmp_path / "latest") == run2.name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_unwritable_output_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputDirError, match="--out"):
        ensure_writable_dir(blocker / "sub")


def test_cli_unwritable_out(tmp_path, capsys):
    from nsverify.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["nightly", "--out", str(blocker / "x"), "--quick"]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_cli_unknown_only_section(tmp_path, capsys):
    from nsverify.cli import main

    assert main(["nightly", "--out", str(tmp_path), "--quick", "--only", "no-such-section"]) == 2
    err = capsys.readouterr().err
    assert "unknown report section 'no-such-section'" in err and "--only" in err
    assert not (tmp_path / "latest").exists()


def test_section_modules_import():
    """Every section module in nsverify/sections imports, and none registers a name twice."""
    from nsverify.sections import load_sections

    names = [s.name for s in load_sections()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700),
                                                      (0o002, 0o664, 0o775)])
def test_report_files_follow_the_umask(tmp_path, umask, file_mode, dir_mode):
    """A web server must be able to serve the report: files and the run directory get what the umask gives,
    as with open()/mkdir (tempfile alone would make them 0600/0700)."""
    import stat

    old = os.umask(umask)
    try:
        run = write_report(tmp_path, build_report({}, quick=True, machine=dict(FAKE_MACHINE)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(run.stat().st_mode) == dir_mode
    for name in ("report.json", "index.html"):
        assert stat.S_IMODE((run / name).stat().st_mode) == file_mode


# ------------------------------------------------------------------------------------ what a reader sees
def test_report_of_every_section_shows_no_none_and_no_raw_json(tmp_path, fake_sections, fake_machine):
    """A report with a section of every shape: 0 visible ``None``, 0 raw-JSON cells, proper Unicode, the claims
    in one table grouped by paper, the erratum in its own list, the four overview plots."""
    state = {"held": True}
    report_fakes.register_every_section(state)
    run_nightly(tmp_path / "r", quick=True)
    state["held"] = False  # a claim regression: reproduced -> not reproduced
    page = (run_nightly(tmp_path / "r", quick=True) / "index.html").read_text(encoding="utf-8")
    text = report_fakes.visible_text(page)
    assert re.findall(r"\bNone\b", text) == []
    assert report_fakes.RAW_JSON.findall(text) == []
    assert "Després et al. (2024)" in text and "known answers (Park, Després, Boustany)" in text
    assert "L: 1, widths: [2], pool: [\u2013]" in text  # a dict cell in words
    for fid in ("plot-forest", "plot-conventions", "plot-releases", "plot-zones"):
        assert f'<figure id="{fid}"' in page, fid
    table = page.split('id="claims-table"')[1].split("</table>")[0]
    errata = page.split('id="errata"')[1].split("</ul>")[0]
    assert "the printed Jacobian has a sign error" in errata and "sign error" not in table
    papers = re.findall(r'<tr class="paper-head"><th colspan="7">([^<]+?) <span', table)
    assert papers == ["Boustany (2025)", "Després et al. (2024)", "Park et al. (2023)", "nsverify (ours)"]
    assert "0.188 [0.1, 0.3]" in table and "64 / 4" in table
    status = report_fakes.visible_text(page.split('id="status-line"')[1].split("</div>")[0])
    assert "Run health 1 regression 1 claim verdict changed since the baseline" in " ".join(status.split())
    assert "Claims 2 reproduced, 1 not reproduced, 1 erratum, 2 undecided" in " ".join(status.split())
    assert 'class="badge red" id="summary-status"' in page
    assert page.index('id="status-line"') < page.index('id="plots"') < page.index('id="claims-table"')


def test_the_papers_errata_are_listed_apart_from_the_claims():
    """The errata the papers declare (``ClaimSpec(erratum=...)``), judged by the real code path: ``Claim.to_json``
    writes the erratum's text, and the page lists each in the errata list, not among the claims not reproduced
    (DINAdam's Algorithm 6 sign, Boustany's Tables 2.2-2.3 bounds, Arnekvist et al.'s Sec. 5 prose)."""
    from nsverify.claims import decide
    from nsverify.papers.arnekvist.repro import SPEC as ARNEKVIST
    from nsverify.papers.costs.repro import SPEC as COSTS
    from nsverify.papers.innaprop.repro import SPEC as INNAPROP
    from nsverify.report.claims_table import is_erratum
    from nsverify.report.html import render_claims, status_line

    errata = [INNAPROP["innaprop/alg6-dinadam"].judge("largest distance 0.3", decide.exact(False)),
              COSTS["costs/tables2.2-2.3-bounds"].judge("3 grid points exceed the bound", decide.exact(False)),
              ARNEKVIST["arnekvist/fig4-majority-converges"].judge(
                  "a minority converges", decide.robust({"tol 1e-6": False, "tol 1e-3": False}, 100))]
    plain = COSTS["costs/table2.1-omega"].judge("omega differs", decide.exact(False))
    assert all(isinstance(c["erratum"], str) and is_erratum(c) for c in errata)
    assert plain["erratum"] is None and not is_erratum(plain)
    assert not is_erratum({"erratum": ""}) and not is_erratum({})
    report = {"sections": {"s": {"status": "ok", "claims": errata + [plain]}}, "regressions": []}
    page = render_claims(report)
    listed = page.split('id="errata"')[1].split("</ul>")[0]
    table = page.split('id="claims-table"')[1].split("</table>")[0]
    assert listed.count("<li>") == 3 and 'Paper errata (3)' in page
    for c in errata:
        assert html.escape(c["erratum"], quote=True) in listed and html.escape(c["claim"], quote=True) not in table
    assert "Claims (1: reproduced 0 / not reproduced 1 / undecided 0)" in page
    assert "0 reproduced, 1 not reproduced, 3 errata, 0 undecided" in status_line(report)


def test_status_badge_never_contradicts_the_status_line():
    """Green ("no regressions") exactly when there is no regression and no failed section; the claims'
    state is a second, neutral badge in other words (never green or red)."""
    from nsverify.report.html import status_line

    claims = [report_fakes.fake_claim("a", False), report_fakes.fake_claim("b", True)]
    rep = {"sections": {"s": {"status": "ok", "claims": claims}}, "regressions": []}
    line = status_line(rep)
    assert 'class="badge green" id="summary-status">no regressions</span>' in line
    assert '<span class="badge claims" id="claims-status">1 reproduced, 1 not reproduced, 0 errata, 0 undecided' \
        '</span>' in line
    assert "no baseline" in line
    rep["sections"]["t"] = {"status": "failed"}
    assert 'class="badge red" id="summary-status">1 failed section</span>' in status_line(rep)
    rep["sections"].pop("t")
    rep["regressions"] = [{"section": "s", "kind": "claim", "key": "a"}]
    rep["comparison"] = {"regressions": rep["regressions"], "changes": [{"section": "s", "kind": "claim",
                                                                         "key": "b", "verdict": "changed"}]}
    line = status_line(rep)
    assert 'class="badge red" id="summary-status">1 regression</span>' in line
    assert "2 claim verdicts changed since the baseline" in line


def test_plain_text_of_values():
    from nsverify.report.claims_table import plain

    assert plain(None) == "\u2013" and plain(0.123456) == "0.1235" and plain(True) == "yes"
    assert plain({"paper": "Després", "n": [1, None]}) == "paper: Després, n: [1, \u2013]"
    assert plain([]) == "\u2013" and plain("Despr\u00e9s") == "Després"
