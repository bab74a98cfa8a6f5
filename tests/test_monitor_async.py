"""The training monitor's asynchronous mode (``Monitor(..., asynchronous=True)``): each step's record arrives one
step late; a step without kink touches or counted ties gets the synchronous mode's record exactly, a step whose
counts show them after its graph is gone gets those layers unchecked ("unknown", with the reason), and the steps
after it are checked synchronously, with the synchronous mode's records."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from nsverify.papers.park.monitor import Monitor
from tests.test_monitor import _plateau_images, _vgg_like
from tests.test_monitor_gpu_path import _same_records


def _quiet(seed):  # continuous inputs: the pools' only ties are the ReLU's zeros, which Algorithm 2 leaves out
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def _run(model, xs, asynchronous):
    """Forward, check, backward per input (no optimizer step: both modes see the same parameters); the records
    as returned, and the flushed last one."""
    returned = []
    with Monitor(model, asynchronous=asynchronous) as mon:
        for x in xs:
            loss = nn.functional.cross_entropy(model(x), torch.zeros(len(x), dtype=torch.long, device=x.device))
            returned.append(mon.check())
            loss.backward()
            model.zero_grad()
        last = mon.flush()
        steps = list(mon.steps)
    return returned, last, steps


@pytest.fixture
def model():
    torch.manual_seed(0)
    return _vgg_like()


def test_quiet_steps_arrive_one_step_late_and_equal(model):
    xs = [_quiet(s) for s in range(4)]
    sync, none, sync_steps = _run(model, xs, False)
    got, last, steps = _run(model, xs, True)
    assert none is None and got[0] is None and all(r is not None for r in got[1:])
    assert all(c.tied_positive == 0 and c.kink_touches == 0 for r in sync for c in r.layers)
    for want, rec in zip(sync, got[1:] + [last], strict=True):
        _same_records(want, rec)
        assert rec.note == ""
    assert [r.step for r in steps] == [0, 1, 2, 3] and [r.step for r in sync_steps] == [0, 1, 2, 3]


def test_a_tied_step_after_quiet_ones_is_unknown_then_checked_synchronously(model):
    """Steps: quiet, quiet, ties, ties, quiet. The first step waits (nothing known yet); the second is sent without
    waiting and is exact; the third, sent without waiting, shows counted ties after its graph is gone: unknown with
    the reason, its counts kept; the fourth and fifth wait and equal the synchronous records."""
    plateau = _plateau_images(seed=0)
    xs = [_quiet(0), _quiet(1), plateau, plateau.flip(-1), _quiet(2)]
    sync, _none, _ = _run(model, xs, False)
    assert [sum(c.tied_positive for c in r.layers) > 0 for r in sync] == [False, False, True, True, False]
    got, last, steps = _run(model, xs, True)
    recs = got[1:] + [last]
    assert [r.step for r in recs] == [0, 1, 2, 3, 4] == [r.step for r in steps]
    for i in (0, 1, 3, 4):
        _same_records(sync[i], recs[i])
        assert recs[i].note == ""
    tied = recs[2]
    assert tied.correct == "unknown" and "asynchronous mode" in tied.note and "graph" in tied.note
    for want, c in zip(sync[2].layers, tied.layers, strict=True):
        assert (c.windows, c.tied_windows, c.tied_positive, c.kink_touches) == (
            want.windows, want.tied_windows, want.tied_positive, want.kink_touches)
        assert c.status == ("unknown" if want.tied_positive or want.kink_touches else want.status)
        assert c.unchecked == c.tied_positive + c.kink_touches and c.rows == []


def test_flush_without_steps_and_the_synchronous_mode_unchanged(model):
    with Monitor(model, asynchronous=True) as mon:
        assert mon.flush() is None
    with Monitor(model) as mon:
        model(_quiet(0))
        rec = mon.check()
        assert rec is not None and rec.step == 0 and mon.flush() is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_counts_travel_without_waiting_and_the_records_equal_the_synchronous_ones(model):
    """Pinned host memory and an event carry the counts on CUDA; the records equal the synchronous mode's on the
    same device (deterministic cuDNN, no TF32: both modes see the same numbers), the tied step after quiet ones
    unknown."""
    plateau = _plateau_images(seed=0)
    xs = [x.cuda() for x in (_quiet(0), _quiet(1), plateau, plateau, _quiet(2))]
    mc = model.cuda()
    flags = (torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32,
             torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32 = True, False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        sync, _none, _ = _run(mc, xs, False)
        got, last, _ = _run(mc, xs, True)
    finally:
        (torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_tf32) = flags
    assert sum(c.tied_positive for c in sync[2].layers) > 0
    recs = got[1:] + [last]
    for i in (0, 1, 3, 4):
        _same_records(sync[i], recs[i])
    assert recs[2].correct == "unknown" and recs[2].note
