"""The report framework: section registration, failure isolation, atomic writes, bad output dirs."""
import json
import os

import pytest

from nsverify.errors import OutputDirError
from nsverify.report import SECTIONS, section
from nsverify.report.nightly import build_report, ensure_writable_dir, run_sections, write_report
from tests.report_fakes import FAKE_MACHINE


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
    assert 'id="sec-bad"' in html and "boom" in html and "RED" in html
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
