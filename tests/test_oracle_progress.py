"""Progress appears on every long oracle call, whatever stage it is in (issue #40, item 4).

The oracle's loops report only between their steps; one step (an exact trace, a layered decision, an LP) can be
long, so the default reporter has a background ticker that reports the stage the code last set.  Here a stage
is made slow with a sleep, and the delays are shortened through the module constants of
:mod:`nsverify.oracle.progress`.
"""

from __future__ import annotations

import io
import sys
import threading
import time

import pytest
import torch

import nsverify
from nsverify.oracle import interp, progress

D = torch.float64


def _relu_sum(w):
    return torch.relu(w).sum()


@pytest.fixture
def quick_progress(monkeypatch):
    """Lines after 0.2 s, at most every 0.1 s, the ticker every 0.05 s."""
    monkeypatch.setattr(progress, "AFTER", 0.2)
    monkeypatch.setattr(progress, "EVERY", 0.1)
    monkeypatch.setattr(progress, "TICK", 0.05)


@pytest.fixture
def slow_forward(monkeypatch):
    """The exact forward-mode trace takes 0.8 s (one long step: no report of the oracle's own loops in it)."""
    real = interp.Evaluation.forward

    def forward(self):
        time.sleep(0.8)
        return real(self)

    monkeypatch.setattr(interp.Evaluation, "forward", forward)


def _tickers() -> list:
    return [t for t in threading.enumerate() if t.name == "nsverify-progress"]


def test_lines_appear_inside_one_long_stage(quick_progress, slow_forward, capsys):
    v = nsverify.check_gradient(_relu_sum, torch.tensor([0.0, 1.0], dtype=D))
    assert v.status == "member"
    lines = capsys.readouterr().err.splitlines()
    during = [ln for ln in lines if ln.endswith("(exact AD: forward mode)")]
    assert len(during) >= 3, lines  # 0.2 s, then every 0.1 s while the stage sleeps 0.8 s
    assert all(ln.startswith("nsverify: pieces ") and "of the 60 s time limit" in ln for ln in lines)
    assert not _tickers()  # stopped when the call returned


def test_a_fast_call_prints_nothing(capsys):
    nsverify.check_gradient(_relu_sum, torch.tensor([0.0, 1.0], dtype=D))
    nsverify.check_gradient(lambda w: (w * w).sum(), torch.ones(3, dtype=D))
    assert capsys.readouterr().err == ""
    assert not _tickers()


def test_progress_false_silences_a_long_call(quick_progress, slow_forward, capsys):
    nsverify.check_gradient(_relu_sum, torch.tensor([0.0, 1.0], dtype=D), progress=False)
    assert capsys.readouterr().err == ""


def test_a_callable_is_not_called_from_the_ticker(quick_progress, slow_forward):
    seen: list = []
    caller = threading.current_thread()
    threads: set = set()

    def record(p):
        threads.add(threading.current_thread())
        seen.append(p)

    nsverify.check_gradient(_relu_sum, torch.tensor([0.0, 1.0], dtype=D), progress=record)
    assert threads == {caller} and seen[-1].stage == "done"
    assert "exact AD: forward mode" in {p.stage for p in seen}  # the stages the code sets reach a callable too


def test_the_ticker_stops_when_the_call_raises(quick_progress, monkeypatch, capsys):
    def broken(self):
        time.sleep(0.4)
        raise KeyboardInterrupt  # the user pressing Ctrl-C during a long stage

    monkeypatch.setattr(interp.Evaluation, "forward", broken)
    with pytest.raises(KeyboardInterrupt):
        nsverify.check_gradient(_relu_sum, torch.tensor([0.0, 1.0], dtype=D))
    assert not _tickers()
    assert "(exact AD: forward mode)" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_progress_bar(quick_progress, slow_forward, monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    nsverify.check_gradient(_relu_sum, torch.tensor([0.0, 1.0], dtype=D))
    out = term.getvalue()
    assert "nsverify:" in out and "s of the time limit" in out and "exact AD: forward mode: pieces 0" in out
    assert "\r" in out  # redrawn in place (tqdm), not one line per tick
    assert "nsverify: pieces" not in out  # no plain lines on a terminal


def test_stderr_progress_defaults_come_from_the_module_constants(monkeypatch):
    monkeypatch.setattr(progress, "AFTER", 1.5)
    monkeypatch.setattr(progress, "EVERY", 2.5)
    rep = progress.StderrProgress()
    assert (rep.after, rep.every) == (1.5, 2.5)
    assert progress.StderrProgress(after=0.0, every=1.0).after == 0.0
