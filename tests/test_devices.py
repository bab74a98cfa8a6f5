"""The one timing helper (nsverify.devices): interleaving, samples, statistics and ratios, against a fake clock.

No assertion depends on the speed of this machine: each candidate advances a fake clock by a known amount, so
the expected samples are written down from the schedule, not measured.
"""
import math
import statistics

import pytest
import torch

from nsverify.devices import (
    STATISTICS,
    SideBySide,
    TimingArgumentError,
    synchronize,
    time_call,
    time_side_by_side,
    torch_threads,
)
from nsverify.errors import NsverifyError


class FakeClock:
    """A clock that only moves when a candidate says how long it took."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, seconds, log=None, name=None):
        def fn():
            self.now += seconds
            if log is not None:
                log.append(name)
        return fn


def test_candidates_are_interleaved_after_warmup():
    clock, log = FakeClock(), []
    t = time_side_by_side({"a": clock.work(1.0, log, "a"), "b": clock.work(3.0, log, "b")}, repeat=3, warmup=2,
                          clock=clock)
    assert log == ["a", "b"] * 5  # 2 untimed warm-up rounds, then 3 timed rounds, a and b alternating
    assert t.rounds == 3 and t.samples == {"a": [1.0, 1.0, 1.0], "b": [3.0, 3.0, 3.0]}
    assert t.ratio("b", "a") == 3.0 and t.ratio("a", "b") == pytest.approx(1 / 3)


def test_samples_keep_every_measurement_in_order_and_statistics_use_them():
    clock = FakeClock()
    durations = iter([5.0, 1.0, 2.0, 9.0, 3.0])

    def varying():
        clock.now += next(durations)

    samples = time_call(varying, repeat=5, warmup=0, clock=clock)
    assert samples == [5.0, 1.0, 2.0, 9.0, 3.0]
    t = SideBySide({"v": samples, "c": [2.0] * 5}, rounds=5)
    assert t.stat("v", "min") == 1.0 and t.stat("v", "max") == 9.0
    assert t.stat("v", "median") == 3.0 and t.stat("v", "mean") == 4.0  # (5+1+2+9+3)/5
    assert t.ratio("v", "c", "median") == 1.5 and t.ratio("v", "c") == 0.5
    assert set(STATISTICS) == {"min", "median", "mean", "max"}
    assert t.to_json() == {"rounds": 5, "samples_s": {"v": samples, "c": [2.0] * 5}}


def test_number_divides_a_block_of_calls():
    clock, log = FakeClock(), []
    samples = time_call(clock.work(0.5, log, "x"), repeat=2, warmup=1, number=4, clock=clock)
    assert samples == [0.5, 0.5] and len(log) == 1 + 2 * 4


def test_min_time_adds_rounds_until_each_candidate_has_enough_and_max_repeat_caps_them():
    clock = FakeClock()
    # dyadic durations: the fake clock's sums are exact
    t = time_side_by_side({"fast": clock.work(0.125), "slow": clock.work(1.0)}, repeat=2, warmup=0,
                          min_time=0.5, clock=clock)
    assert t.rounds == 4 and len(t.samples["fast"]) == len(t.samples["slow"]) == 4  # 4 x 0.125 s reaches 0.5 s
    capped = time_side_by_side({"fast": clock.work(0.125)}, repeat=2, warmup=0, min_time=8.0, max_repeat=7,
                               clock=clock)
    assert capped.rounds == 7


def test_zero_baseline_gives_infinite_ratio():
    t = SideBySide({"a": [1.0], "b": [0.0]}, rounds=1)
    assert t.ratio("a", "b") == math.inf


def test_real_clock_returns_nonnegative_samples():
    samples = time_call(lambda: sum(range(100)), repeat=3)
    assert len(samples) == 3 and all(s >= 0 for s in samples)
    assert statistics.median(samples) >= min(samples)


@pytest.mark.parametrize("kwargs, match", [
    ({"fns": {}}, "at least one callable"),
    ({"fns": {"a": 3}}, "not callable"),
    ({"fns": [lambda: None]}, "mapping {name: callable}, got list"),
    ({"repeat": 0}, "repeat=0"),
    ({"repeat": 2.5}, "repeat=2.5"),
    ({"repeat": True}, "repeat=True"),
    ({"warmup": -1}, "warmup=-1"),
    ({"number": 0}, "number=0"),
    ({"repeat": 10, "max_repeat": 3}, "max_repeat=3 is below repeat=10"),
    ({"min_time": -1.0}, "min_time=-1.0"),
    ({"min_time": float("nan")}, "min_time=nan"),
])
def test_bad_arguments_are_clear_errors(kwargs, match):
    fns = kwargs.pop("fns", {"a": lambda: None})
    with pytest.raises(TimingArgumentError, match=match) as info:
        time_side_by_side(fns, **kwargs)
    assert isinstance(info.value, NsverifyError) and isinstance(info.value, ValueError)


def test_unknown_candidate_or_statistic_names_the_choices():
    t = SideBySide({"a": [1.0], "b": [2.0]}, rounds=1)
    with pytest.raises(TimingArgumentError, match="'c'.*a, b"):
        t.ratio("c", "a")
    with pytest.raises(TimingArgumentError, match="unknown statistic 'p90'.*min, median"):
        t.stat("a", "p90")


def test_synchronize_on_cpu_is_a_no_op_and_cuda_is_waited_for(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    synchronize("cpu")
    synchronize(torch.device("cpu"))
    synchronize(None)
    assert calls == []
    synchronize("cuda:0")
    synchronize(torch.device("cuda"))
    assert calls == ["cuda:0", torch.device("cuda")]
    calls.clear()
    clock = FakeClock()
    time_side_by_side({"a": clock.work(1.0), "b": clock.work(1.0)}, repeat=2, warmup=1, device="cuda",
                      clock=clock)
    assert len(calls) == 2 * 2 * 2  # before and after each of the 4 timed samples, none around the warm-up


def test_torch_threads_restores_the_thread_count():
    n = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == n
    with torch_threads(None):
        assert torch.get_num_threads() == n


def test_round_ratios_pair_the_samples_of_one_round_and_their_iqr_matches_numpy():
    import numpy as np

    cand = [2.0, 9.0, 4.0, 6.0, 3.0, 8.0, 5.0]
    base = [1.0, 3.0, 2.0, 2.0, 1.0, 4.0, 1.0]
    t = SideBySide({"c": cand, "b": base}, rounds=7)
    ratios = [c / b for c, b in zip(cand, base)]
    assert t.round_ratios("c", "b") == ratios
    assert t.ratio_iqr("c", "b") == pytest.approx(tuple(np.percentile(ratios, [25, 75])))
    with pytest.raises(TimingArgumentError):
        t.ratio_iqr("c", "missing")
