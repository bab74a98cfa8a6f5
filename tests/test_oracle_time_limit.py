"""The time limit holds at every size (issue #34, item 4): a call returns within 1.1 x time_limit + 1 s whatever the
model's size, and a limit that runs out says how far the decision got.

A timed test is flaky under load, so the bound is a ratio to the limit plus the time of one plain float forward and
backward of the same model, measured in the same test side by side (a loaded machine slows both alike).  Each
polling point also gets a test of its own: a stage made slow by a monkeypatched sleep inside its loop must still
stop within the bound.
"""

from __future__ import annotations

import re
import time
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import nsverify
from nsverify.oracle import context
from nsverify.oracle.context import TimeLimitExceeded, chunked_sum, deadline

D = torch.float64


def _bound(limit: float, plain: float = 0.0) -> float:
    """The promise (1.1 x limit + 1 s), plus one plain float step of the model when there is one."""
    return 1.1 * limit + 1.0 + plain


def _plain_step(model, x, y, loss=F.cross_entropy) -> float:
    """Seconds of one plain float forward and backward (the faster of two: the first pays for warm-up)."""
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        loss(model(x), y).backward()
        best = min(best, time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    return best


def _resnet_case(width: float):
    from nsverify.workloads.datasets import natural_crops
    from nsverify.workloads.models import ResNet18

    torch.manual_seed(0)
    model = ResNet18(width=width).eval()  # float32, PyTorch's default initialisation, BN eps = 1e-5
    x, _ = natural_crops(2, seed=0, shape=(3, 64, 64))
    return model, x, torch.tensor([1, 2])


def _stops_in_time(model, x, y, limit: float):
    plain = _plain_step(model, x, y)
    t0 = time.perf_counter()
    v = nsverify.check_module(model, F.cross_entropy, x, y, wrt="parameters", time_limit=limit,
                              on_limit="unknown", progress=False)
    wall = time.perf_counter() - t0
    assert v.status == "unknown" and "ran out" in v.reason, v.reason
    assert wall <= _bound(limit, plain), (wall, plain, v.reason)
    return v


def test_resnet18_quarter_width_returns_within_the_limit():
    _stops_in_time(*_resnet_case(0.25), limit=3.0)


def test_resnet18_full_width_returns_within_the_limit():
    """11.2M parameters, time_limit=10: about 13 s in all on the 2-core machine (under the ~30 s that would put it
    behind the ``slow`` marker)."""
    _stops_in_time(*_resnet_case(1.0), limit=10.0)


# ----------------------------------------------- issue 34's real-model workloads (nsverify.workloads.real_models)
#: "ran out during <stage> after <n> pieces": the stage the decision had reached when the limit ran out
STAGE = re.compile(r"ran out during (?P<stage>.+?) after (?P<pieces>\d+) pieces")


def _real(kind: str, limit: float, **kw):
    """The workload from real_models.build (float32, default init, dead unit, BN statistics from real images),
    checked under ``limit``: the call returns within the bound; an unknown names the stage reached, and a decided
    Lemma 2 case must be not_member (Park et al., Lemma 2: AD is outside the Clarke set)."""
    from nsverify.workloads import real_models

    model, loss, x, y = real_models.build(kind, **kw)
    plain = _plain_step(model, x, y, loss)
    t0 = time.perf_counter()
    v = nsverify.check_module(model, loss, x, y, wrt="parameters", time_limit=limit, on_limit="unknown",
                              progress=False)
    wall = time.perf_counter() - t0
    assert wall <= _bound(limit, plain), (wall, plain, v.reason)
    if v.status == "unknown":
        assert STAGE.search(v.reason), v.reason
    elif kw.get("lemma2"):
        assert v.status == "not_member", v
    return v


def test_opt_decoder_returns_within_the_limit():
    """Target (d): the OPT-style decoder (3.3M parameters, one dead MLP unit, 2x32 tokens), time_limit=5."""
    _real("opt_decoder", 5.0)


#: the float run under the prepass dispatch mode now polls the deadline at every op; PyTorch's own backward pass
#: (one plain step, seconds at full width under load) cannot be polled from Python, so a 10 s limit on the full OPT
#: decoder may still overrun under load (measured 15.5 s against a bound of 15.3 s once, before the forward polled)
UNPOLLED_FLOAT_AD = pytest.mark.xfail(strict=False, reason="issue 34 item 4: PyTorch's float backward pass is not "
                                      "polled")


def test_resnet18_quarter_width_real_setup_returns_within_the_limit():
    """ResNet-18 width 1/4 (701k parameters) in target (a)'s setup (eval mode), time_limit=5."""
    _real("resnet18", 5.0, width=0.25)


@pytest.mark.slow
@pytest.mark.parametrize("kind,kw", [
    pytest.param("resnet18", {}, id="resnet18-eval"), pytest.param("resnet18", {"train": True}, id="resnet18-train"),
    pytest.param("vgg11_bn", {}, id="vgg11_bn"), pytest.param("resnet18", {"lemma2": True}, id="resnet18-lemma2"),
    # measured on main (64e5aef) under load 6-8: 15.5 s against a bound of 15.3 s once, 11.7 s another time
    pytest.param("opt_decoder", {}, id="opt_decoder", marks=UNPOLLED_FLOAT_AD),
])
def test_full_width_real_models_return_within_a_10s_limit(kind, kw):
    """Issue 34's targets (a)-(e) at full width with time_limit=10."""
    _real(kind, 10.0, **kw)


# -------------------------------------------------------------------------------------- one test per polling point
def _slowed(monkeypatch, owner, name: str, seconds: float):
    """Replace ``owner.name`` (a function called once per iteration of a loop) by the same function after a sleep."""
    inner = getattr(owner, name)

    def slow(*a, **k):
        time.sleep(seconds)
        return inner(*a, **k)

    monkeypatch.setattr(owner, name, slow)


def _timed(fn, w, limit, **kw):
    """(verdict, wall seconds) of a check_gradient call, after one plain float run of ``fn`` (torch's lazy imports
    on a first call are fn's own time, which no poll can interrupt)."""
    fn(w.detach().clone().requires_grad_()).backward()
    t0 = time.perf_counter()
    v = nsverify.check_gradient(fn, w, time_limit=limit, on_limit="unknown", progress=False, **kw)
    return v, time.perf_counter() - t0


def test_reading_w_as_exact_rationals_polls(monkeypatch):
    """Millions of parameters take seconds to read as Fractions: the conversion stops at the limit and says so."""
    from nsverify.oracle import interp

    _slowed(monkeypatch, interp, "F", 1e-4)  # 50,000 coordinates: over 5 s without the polls
    v, wall = _timed(lambda w: w.sum(), torch.zeros(50_000, dtype=D), 0.5)
    assert v.status == "unknown" and "during reading w as exact rationals after 0 pieces" in v.reason, v.reason
    assert "w has too many coordinates" in v.reason, v.reason
    assert wall <= _bound(0.5), wall


def test_the_exact_trace_polls_before_every_op(monkeypatch):
    from nsverify.oracle import tensor

    _slowed(monkeypatch, tensor, "unwrap", 0.01)  # each exact op's arguments (exact traces only)

    def f(w):
        for _ in range(300):  # 300 ops, over 6 s of sleeping
            w = w * 1.0
        return torch.relu(w).sum()

    v, wall = _timed(f, torch.zeros(2, dtype=D), 0.5)
    assert v.status == "unknown" and "ran out" in v.reason, v.reason
    assert wall <= _bound(0.5), wall


def test_one_large_exact_matmul_polls_between_its_blocks(monkeypatch):
    from nsverify.oracle.ops import linalg

    _slowed(monkeypatch, linalg, "_matmul", 0.4)  # one block of the product: 4 blocks, 1.6 s of sleeping
    A = torch.randn(8, 8192, dtype=D, generator=torch.Generator().manual_seed(0))
    v, wall = _timed(lambda w: (w @ A).relu().sum(), torch.ones(8, dtype=D), 0.3, ad=[0.0] * 8)
    assert v.status == "unknown" and "ran out" in v.reason, v.reason
    assert wall <= _bound(0.3), wall


def test_the_layered_decision_polls_per_layer_and_says_how_far_it_got(monkeypatch):
    """A slow layer of Park et al.'s Algorithm 1 stops the decision, and the message counts the layers decided."""
    from nsverify.oracle.park import exact

    _slowed(monkeypatch, exact, "_algorithm1", 0.3)
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Conv1d(2, 2, 1), torch.nn.ReLU()]
    model = torch.nn.Sequential(torch.nn.Conv1d(1, 2, 1), *layers, torch.nn.Flatten(), torch.nn.Linear(8, 2)).double()
    x, y = torch.ones(2, 1, 4, dtype=D), torch.tensor([0, 1])
    t0 = time.perf_counter()
    v = nsverify.check_module(model, F.cross_entropy, x, y, time_limit=1.0, on_limit="unknown", progress=False)
    wall = time.perf_counter() - t0
    assert v.status == "unknown", v.reason
    assert "during layers: Park et al.'s conditions after 0 pieces (" in v.reason, v.reason
    m = re.search(r"How far it got: .*layers decided: (\d+) of (\d+); kink/tie sites found: \d+, left to decide: \d+\.",
                  v.reason)
    assert m and 0 < int(m.group(1)) < int(m.group(2)), v.reason
    assert wall <= _bound(1.0), wall


def test_a_stop_in_the_first_trace_keeps_its_words(monkeypatch):
    from nsverify.oracle import prepass

    monkeypatch.setattr(prepass, "poll_deadline", lambda: None)  # past the float run, which polls too
    v, _ = _timed(lambda w: torch.relu(w).sum(), torch.zeros(4, dtype=D), 0.0)
    assert "ran out during the first exact trace (the AD trace) after 0 pieces" in v.reason, v.reason


def test_the_float_run_polls_the_time_limit():
    v, _ = _timed(lambda w: torch.relu(w).sum(), torch.zeros(4, dtype=D), 0.0)
    assert "ran out during PyTorch's float autograd after 0 pieces" in v.reason, v.reason


def test_object_array_sums_poll_between_pieces(monkeypatch):
    monkeypatch.setattr(context, "REDUCE_CHUNK", 64)

    class SlowNumpy:  # numpy, with a sum that sleeps: one piece of the reduction
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def sum(*a, **k):
            time.sleep(0.05)
            return np.sum(*a, **k)

    monkeypatch.setattr(context, "np", SlowNumpy())
    a = np.empty((100, 64), dtype=object)
    a[...] = Fraction(1, 3)
    t0 = time.perf_counter()
    with pytest.raises(TimeLimitExceeded), deadline(0.2):
        chunked_sum(a, (1,))  # 100 pieces, 5 s of sleeping
    assert time.perf_counter() - t0 <= _bound(0.2)


@pytest.mark.parametrize("shape,dims", [((40, 30, 7), (1,)), ((40, 30, 7), (0, 2)), ((40, 30, 7), (0, 1, 2)),
                                        ((1, 300, 1), (1,)), ((6, 500), (0,))])
@pytest.mark.parametrize("keepdims", [False, True])
def test_chunked_sums_equal_numpys_sum(monkeypatch, shape, dims, keepdims):
    monkeypatch.setattr(context, "REDUCE_CHUNK", 50)
    g = np.random.default_rng(0)
    a = np.empty(shape, dtype=object)
    a.reshape(-1)[:] = [Fraction(int(p), int(q)) for p, q in zip(g.integers(-9, 9, a.size), g.integers(1, 9, a.size))]
    got, want = chunked_sum(a, dims, keepdims), np.sum(a, axis=dims, keepdims=keepdims)
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got, dtype=object).reshape(-1).tolist() == np.asarray(want, dtype=object).reshape(-1).tolist()


def test_a_highs_solve_gets_the_seconds_left_and_its_stop_ends_the_call():
    from nsverify.oracle import lp

    class FakeHighs:
        def __init__(self):
            self.options = {}

        def setOptionValue(self, name, value):
            self.options.setdefault(name, []).append(value)

        def run(self):
            time.sleep(0.3)  # one C-level solve, past the limit

    h = FakeHighs()
    with pytest.raises(TimeLimitExceeded), deadline(0.1):
        lp.run(h)
    first, last = h.options["time_limit"]
    assert 0 <= first <= 0.1 and last == float("inf")  # restored for the next solve


class _SlowNumpy:
    """numpy, except the functions named in ``slow``, which sleep ``seconds`` first (generators: per item)."""

    def __init__(self, seconds: float, *slow: str):
        self.seconds, self.slow = seconds, slow

    def __getattr__(self, name):
        inner = getattr(np, name)
        if name not in self.slow:
            return inner
        if name == "ndindex":
            def items(*a, **k):
                for pos in inner(*a, **k):
                    time.sleep(self.seconds)
                    yield pos
            return items

        def slow(*a, **k):
            time.sleep(self.seconds)
            return inner(*a, **k)
        return slow


def test_a_convolution_polls_at_every_output_position(monkeypatch):
    from nsverify.oracle.ops import conv

    monkeypatch.setattr(conv, "np", _SlowNumpy(1e-3, "ndindex"))  # 3,844 output positions: about 4 s
    x = torch.randn(1, 1, 64, 64, dtype=D, generator=torch.Generator().manual_seed(0))
    v, wall = _timed(lambda w: F.conv2d(x, w.reshape(1, 1, 3, 3)).relu().sum(), torch.ones(9, dtype=D), 0.3,
                     ad=[0.0] * 9)
    assert v.status == "unknown" and "ran out" in v.reason, v.reason
    assert wall <= _bound(0.3), wall


def test_a_normalisation_polls_between_its_chunks(monkeypatch):
    from nsverify.oracle.ops import norm

    monkeypatch.setattr(norm, "np", _SlowNumpy(0.05, "subtract", "multiply", "add"))  # per chunk of 256 entries
    A = torch.linspace(-1, 1, 4096, dtype=D)
    v, wall = _timed(lambda w: F.layer_norm(w[0] * A + w[1], (4096,)).relu().sum(), torch.ones(2, dtype=D), 0.3,
                     ad=[0.0, 0.0])
    assert v.status == "unknown" and "ran out" in v.reason, v.reason
    assert wall <= _bound(0.3), wall
