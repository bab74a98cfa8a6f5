"""The oracle's speed machinery: integer fast paths (same Fractions as the general path), progress reports and the
time limit a person would wait for.  Speed targets themselves live in asv_bench (benchmarks/oracle.py) and
asv_bench/ratios.py, never here."""

from __future__ import annotations

import inspect
import io
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

import nsverify
from nsverify.errors import OracleInputError, TooManyPieces
from nsverify.oracle import fastexact
from nsverify.oracle.numbers import Aff, KinkZero
from nsverify.oracle.progress import Progress, StderrProgress

F = Fraction


def _obj(values, shape):
    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a.reshape(shape)


def _rand_fraction(rng, big=False):
    if big:
        return F(rng.randint(-2**80, 2**80), rng.choice([1, 3, 2**70]))
    return F(rng.randint(-40, 40), rng.choice([1, 2, 4, 3, 5, 64]))


@pytest.mark.parametrize("big", [False, True])
def test_fast_matmul_equals_the_object_matmul(big):
    rng = random.Random(1 + big)
    shapes = [((3, 4), (4, 2)), ((4,), (4, 3)), ((2, 3), (3,)), ((5,), (5,)), ((2, 3, 4), (4, 2)),
              ((1, 3, 2), (2, 2, 5)), ((2, 1, 2, 3), (4, 3, 2))]
    for sa, sb in shapes:
        a = _obj([_rand_fraction(rng, big) for _ in range(int(np.prod(sa)))], sa)
        b = _obj([_rand_fraction(rng, big) if rng.random() < 0.8 else rng.randint(-3, 3)
                  for _ in range(int(np.prod(sb)))], sb)
        got = fastexact.matmul(a, b)
        want = np.matmul(a, b)
        assert got is not None and np.shape(got) == np.shape(want)
        assert all(F(x) == F(y) and isinstance(x, Fraction)
                   for x, y in zip(np.asarray(got).reshape(-1), np.asarray(want, dtype=object).reshape(-1)))


def test_fast_paths_decline_derivatives_and_intervals_and_drop_the_kink_tag():
    a = _obj([F(1), Aff(F(2), {0: F(1)})], (2,))
    b = _obj([F(1), F(1)], (2,))
    assert fastexact.matmul(a, b) is None and fastexact.add(a, b) is None
    z = _obj([KinkZero(), F(3)], (2,))
    s = fastexact.add(z, _obj([F(0), F(1, 2)], (2,)))
    assert list(s) == [0, F(7, 2)] and type(s[0]) is Fraction  # KinkZero's tag does not spread
    m = fastexact.matmul(z.reshape(1, 2), _obj([F(5), F(1, 3)], (2, 1)))
    assert m.reshape(-1).tolist() == [F(1)]


def test_fast_add_broadcasts_like_numpy():
    rng = random.Random(3)
    a = _obj([_rand_fraction(rng) if rng.random() < 0.6 else F(0) for _ in range(12)], (3, 4))
    b = _obj([_rand_fraction(rng) for _ in range(4)], (4,))
    got = fastexact.add(a, b)
    assert got.shape == (3, 4) and (got == (a + b)).all()


@pytest.mark.parametrize("dims", [1, 2])
def test_exact_convolution_backward_equals_float_autograd_on_exact_data(dims):
    """Small integer data: float64 autograd is exact, so the exact reverse mode must match it bit for bit."""
    torch.manual_seed(dims)
    Conv = torch.nn.Conv1d if dims == 1 else torch.nn.Conv2d
    for kw in (dict(stride=1), dict(stride=2, padding=1), dict(dilation=2, padding=2), dict(groups=2)):
        conv = Conv(4, 4, 3, **kw).double()
        with torch.no_grad():
            for p in conv.parameters():
                p.copy_(torch.randint(-3, 4, p.shape).double())
        x = torch.randint(-3, 4, (2, 4) + (7,) * dims).double()

        def fn(w, conv=conv, x=x):
            return (torch.nn.functional.relu(torch.func.functional_call(conv, {"weight": w.reshape(
                conv.weight.shape), "bias": conv.bias}, (x,))) ** 2).sum()

        w = conv.weight.detach().reshape(-1).clone()
        g = nsverify.oracle.exact_backprop(fn, w)
        wf = w.clone().requires_grad_(True)
        fn(wf).backward()
        assert [float(v) for v in g] == wf.grad.tolist(), kw


def test_default_time_limit_is_a_minute_and_the_message_says_how_to_wait_longer():
    assert inspect.signature(nsverify.check_gradient).parameters["time_limit"].default == 60.0
    f = lambda w: torch.relu(w).sum()  # noqa: E731
    with pytest.raises(TooManyPieces, match=r"time_limit=600 \(seconds; now 0\) or time_limit=None"):
        nsverify.check_gradient(f, torch.zeros(8, dtype=torch.float64), time_limit=0.0, progress=False,
                                shortcuts=False)


def test_progress_callback_counts_pieces_and_lps():
    seen: list = []
    f = lambda w: torch.relu(w).sum()  # noqa: E731  (2^6 pieces without the blocks shortcut)
    v = nsverify.check_gradient(f, torch.zeros(6, dtype=torch.float64), progress=seen.append, shortcuts=False)
    assert all(isinstance(p, Progress) for p in seen)
    pieces = [p.pieces for p in seen if p.stage == "pieces"]
    assert pieces == list(range(0, 65)) and v.stats["pieces"] == 64  # the stage starts at 0, then one per piece
    assert seen[-1].stage == "done" and seen[-1].lps == v.stats["lps"] > 0
    assert seen[-1].time_limit == 60.0 and seen[-1].max_pieces == 10_000


def test_progress_during_one_long_exact_trace():
    seen: list = []

    def f(w):
        x = w
        for _ in range(400):  # 800 ATen ops in each exact trace
            x = x * 1 + 0
        return x.sum()

    nsverify.check_gradient(f, torch.ones(2, dtype=torch.float64), progress=seen.append)
    ticks = [p for p in seen if p.stage == "exact evaluation"]
    assert ticks and all(p.ops > 0 for p in ticks)  # the position in the current trace (reverse mode: more ops)


def test_stderr_progress_is_rate_limited_and_readable(capsys):
    buf = io.StringIO()
    rep = StderrProgress(after=1.0, every=2.0, stream=buf)
    for t in (0.5, 1.0, 1.5, 3.0, 3.1, 6.0):
        rep(Progress("pieces", int(t * 10), 3, t, 60.0, 10_000))
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3  # at 1.0, 3.0 and 6.0 s
    assert lines[0] == "nsverify: pieces 10, LPs 3, 1.0 s of the 60 s time limit (pieces)"
    nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.zeros(2, dtype=torch.float64))
    assert capsys.readouterr().err == ""  # a quick call prints nothing by default
    from nsverify.oracle.progress import reporter

    assert isinstance(reporter(True), StderrProgress)  # progress=True: the same stderr lines as the default
    with pytest.raises(OracleInputError, match="progress must be"):
        nsverify.check_gradient(lambda w: w.sum(), torch.zeros(1, dtype=torch.float64), progress="yes")
