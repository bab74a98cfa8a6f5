"""The oracle called from ordinary user code: grad mode, random numbers, hidden state, the user's own exceptions,
huge values in the output.  Each test failed before the oracle fixed its calling environment
(:mod:`nsverify.oracle.callenv`): a wrong verdict, a misattributed error or a crash in ``repr``."""

import itertools
import random
from decimal import ROUND_DOWN, Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
import torch

import nsverify
from nsverify.errors import NondeterministicError, NsverifyError, OracleInputError, TooManyPieces
from nsverify.oracle.numbers import decimal_str
from nsverify.oracle.verdict import EXPLAIN_LINES, EXPLAIN_WIDTH

D = torch.float64
ONES = torch.ones(2, dtype=D)
ZEROS = torch.zeros(2, dtype=D)


def _weighted_relu(w):
    return (torch.relu(w) * torch.tensor([2.0, 3.0], dtype=D)).sum()


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_grad_mode_of_the_caller_does_not_change_the_verdict(mode):
    outside = nsverify.check_gradient(_weighted_relu, ONES, progress=False)
    ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    with ctx:
        inside = nsverify.check_gradient(_weighted_relu, ONES, progress=False)
        assert not torch.is_grad_enabled()  # the caller's mode is restored
        if mode == "inference_mode":
            assert torch.is_inference_mode_enabled()
    # smooth point: the gradient is (2, 3), computed by hand
    assert outside.status == inside.status == "member"
    assert inside.exact_ad == (Fraction(2), Fraction(3))
    assert inside.ad == (2.0, 3.0)


def test_check_module_inside_no_grad():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2).double(), torch.nn.ReLU())
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D) if p.dim() == 2 else torch.ones(2, dtype=D))
        v = nsverify.check_module(model, lambda o, t: o.sum(), torch.ones(1, 2, dtype=D), None, progress=False)
    assert v.status == "member"
    # d/dW of sum(relu(Wx + b)) at a point where both units are active: x for each row, 1 for each bias
    assert v.exact_ad == tuple(Fraction(1) for _ in range(6))


def _random_weights(w):
    r = torch.rand(2, dtype=D)  # drawn inside the program, as dropout in training mode does
    return (torch.relu(w) * r).sum() + w.sum() * torch.rand((), dtype=D)


def test_a_program_that_draws_random_numbers_is_judged_at_its_draw():
    state = torch.get_rng_state()
    v = nsverify.check_gradient(_random_weights, ONES, progress=False)
    after = torch.rand(3, dtype=D)
    # the oracle's calls did not advance the caller's generator
    torch.set_rng_state(state)
    assert torch.equal(after, torch.rand(3, dtype=D))
    # the same function with the draw fixed in advance (from the state at entry), computed by hand
    torch.set_rng_state(state)
    r, c = torch.rand(2, dtype=D), torch.rand((), dtype=D)
    expected = tuple(Fraction(float(x)) + Fraction(float(c)) for x in r)
    assert v.status == "member"
    assert v.exact_ad == expected


def test_a_random_program_at_a_kink_gets_the_verdict_of_its_draw():
    state = torch.get_rng_state()
    v = nsverify.check_gradient(_random_weights, ZEROS, progress=False)
    torch.set_rng_state(state)
    r, c = torch.rand(2, dtype=D), torch.rand((), dtype=D)
    fixed = lambda w: (torch.relu(w) * r).sum() + w.sum() * c
    ref = nsverify.check_gradient(fixed, ZEROS, progress=False)
    assert v.status == ref.status == "member"  # relu'(0) = 0 is in [0, 1]: the Clarke set of each coordinate
    assert v.exact_ad == ref.exact_ad == (Fraction(float(c)), Fraction(float(c)))


def test_python_and_numpy_generators_are_fixed_too():
    def fn(w):
        return w.sum() * random.random() + w.sum() * float(np.random.rand())

    random.seed(1)
    np.random.seed(1)
    v = nsverify.check_gradient(fn, ONES, progress=False)
    assert v.status == "member"
    random.seed(1)
    np.random.seed(1)
    a, b = random.random(), float(np.random.rand())
    assert v.exact_ad == (Fraction(a) + Fraction(b),) * 2
    # and the caller's generators were left where they were at entry
    random.seed(1)
    np.random.seed(1)
    nsverify.check_gradient(fn, ONES, progress=False)
    assert random.random() == a and float(np.random.rand()) == b


def test_a_counter_is_refused_as_nondeterministic():
    calls = itertools.count(1)

    def fn(w):
        return next(calls) * torch.relu(w).sum()

    with pytest.raises(NondeterministicError, match="not deterministic"):
        nsverify.check_gradient(fn, ONES, progress=False)


def test_a_cache_warmed_on_the_first_call_is_refused():
    cache = {}

    def fn(w):
        scale = cache.setdefault("scale", 1.0)
        cache["scale"] = 2.0
        return scale * torch.relu(w).sum()

    with pytest.raises(NondeterministicError):
        nsverify.check_gradient(fn, ONES, progress=False)  # before: member with exact AD (2, 2), PyTorch (1, 1)


def test_the_users_own_exception_propagates_unchanged():
    def fn2(w):
        _ = 1 / 0
        return w.sum()

    with pytest.raises(ZeroDivisionError, match="division by zero") as info:
        nsverify.check_gradient(fn2, ONES, progress=False)
    assert not isinstance(info.value, NsverifyError)

    def fn3(w):
        raise KeyError("my key")

    with pytest.raises(KeyError, match="my key"):
        nsverify.check_gradient(fn3, ONES, progress=False)


def test_an_exception_of_fn_only_in_the_exact_run_is_wrapped_with_its_cause():
    def fn(w):
        if type(w) is not torch.Tensor and not isinstance(w, torch.nn.Parameter):
            raise ValueError("mine")
        return w.sum()

    with pytest.raises(NsverifyError, match="fn's own code") as info:
        nsverify.check_gradient(fn, ONES, progress=False)
    assert isinstance(info.value.__cause__, ValueError) and str(info.value.__cause__) == "mine"
    assert "aten." not in str(info.value)  # no cause claimed that was not checked


@pytest.mark.parametrize("fn", [3, None, "relu"])
def test_a_non_callable_program_is_an_nsverify_error(fn):
    with pytest.raises(OracleInputError, match="callable"):
        nsverify.check_gradient(fn, ONES, progress=False)


def test_a_non_callable_loss_is_an_nsverify_error():
    with pytest.raises(OracleInputError, match="loss_fn must be callable"):
        nsverify.check_module(torch.nn.Linear(2, 1).double(), 3, torch.ones(1, 2, dtype=D), None)


def test_huge_values_print_without_raising():
    v = nsverify.check_gradient(lambda w: torch.exp(1000 * w).sum(), torch.ones(1, dtype=D), progress=False)
    for text in (repr(v), str(v), repr(v.exact_ad), str(v.exact_ad), v.explain(), v.explain(full=True)):
        assert "e+434" in text or "e+437" in text
    assert v.status == "member"


@pytest.mark.parametrize("q", [Fraction(10**500), Fraction(-(10**500) - 7, 3), Fraction(1, 10**400),
                               Fraction(123456789, 10**600), Fraction(2**1100 + 1), Fraction(-7, 3), Fraction(0)])
def test_decimal_str_against_decimal(q):
    with localcontext() as ctx:
        ctx.prec = 60
        ctx.rounding = ROUND_DOWN
        ref = Decimal(q.numerator) / Decimal(q.denominator)
        expected = "0" if q == 0 else format(ref, ".16e")
    got = decimal_str(q)
    if q == 0:
        assert got == "0"
        return
    mant, exp = got.split("e") if "e" in got else (got, "0")
    emant, eexp = expected.split("e")
    assert int(exp) == int(eexp)
    # the same 17 significant digits (the float path rounds the last one to nearest, the exact path truncates)
    assert abs(Decimal(mant) - Decimal(emant)) <= Decimal("1e-15")


def test_explain_is_short_by_default_and_complete_on_request():
    n = 1200
    w = torch.linspace(-3, 3, n, dtype=D)
    v = nsverify.check_gradient(lambda x: torch.relu(x).sum(), w, progress=False)
    short = v.explain()
    assert len(short.splitlines()) <= EXPLAIN_LINES
    assert max(len(line) for line in short.splitlines()) <= EXPLAIN_WIDTH
    assert f"{n} entries" in short
    full = v.explain(full=True)
    assert full.count(",") >= n - 1 and len(full) > len(short)


# ---------------------------------------------------------------------------------------------------------
# certificates replayed against another program: every separation and the tested vector are re-derived
# ---------------------------------------------------------------------------------------------------------
def test_a_block_product_separated_on_a_fixed_coordinate_is_replayed():
    a = lambda w: torch.relu(w[0]) + torch.relu(w[1]) + 2 * w[2]
    b = lambda w: torch.relu(w[0]) + torch.relu(w[1]) + 3 * w[2]  # its Clarke set contains (0, 0, 3)
    w = torch.tensor([0.0, 0.0, 1.0], dtype=D)
    v = nsverify.check_gradient(a, w, ad=[0.0, 0.0, 3.0], progress=False)
    assert v.status == "not_member" and v.certificate["separating"] == {"fixed": 2}
    assert nsverify.oracle.verify_certificate(v.to_json(), a)
    assert nsverify.check_gradient(b, w, ad=[0.0, 0.0, 3.0], progress=False).status == "member"
    check = nsverify.oracle.verify_certificate(v.to_json(), b)
    assert not check and "fixed" in check.reason


def test_a_replay_rederives_the_tested_exact_ad():
    a = lambda w: torch.relu(w[0])
    # the same function, another program: PyTorch's AD at 0 is 0 + (0 - 0 - 1) = -1, outside [0, 1]
    b = lambda w: torch.relu(w[0]) + (torch.relu(w[0]) - torch.relu(-w[0]) - w[0])
    v = nsverify.check_gradient(a, torch.zeros(1, dtype=D), progress=False)
    assert v.status == "member" and v.certificate["kind"] == "convex_weights"
    ok = nsverify.oracle.verify_certificate(v.to_json(), a)
    assert ok and "exact AD replay" in ok.checked
    check = nsverify.oracle.verify_certificate(v.to_json(), b)
    assert not check and "exact AD" in check.reason


def test_interval_cone_rows_round_trip_and_replay():
    # the kink's cone row has the irrational coefficient e = d/dw0 (w0 exp(w2)) at w2 = 1
    c = lambda w: torch.relu(w[0] * torch.exp(w[2]) + w[1])
    c2 = lambda w: torch.relu(w[0] * torch.exp(1.5 * w[2]) + w[1])
    v = nsverify.check_gradient(c, torch.tensor([0.0, 0.0, 1.0], dtype=D), progress=False)
    assert v.status == "member" and v.certificate["kind"] == "adjacent_piece"
    assert any(isinstance(x, dict) for row in v.certificate["rows"] for x in row.values())  # an interval entry
    assert nsverify.oracle.verify_certificate(v.to_json())
    assert nsverify.oracle.verify_certificate(v.to_json(), c)
    assert not nsverify.oracle.verify_certificate(v.to_json(), c2)


# ---------------------------------------------------------------------------------------------------------
# unsupported ops: all of them named at once, before the exact run
# ---------------------------------------------------------------------------------------------------------
def _unsupported_net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 2, 3).double(), torch.nn.LogSigmoid(), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Mish(), torch.nn.ELU(), torch.nn.Linear(8, 1).double())


def test_every_unsupported_op_is_named_up_front_in_one_short_message(monkeypatch):
    from nsverify.errors import UnsupportedOpError
    from nsverify.oracle import interp

    exact_runs = []
    monkeypatch.setattr(interp.Evaluation, "forward", lambda self: exact_runs.append(1))
    with pytest.raises(UnsupportedOpError) as info:
        nsverify.check_module(_unsupported_net(), lambda o, t: o.sum(), torch.ones(1, 1, 4, 4, dtype=D), None,
                              progress=False)
    msg = str(info.value)
    assert len(msg) <= 300
    for op, module in (("log_sigmoid_forward", "LogSigmoid"), ("mish", "Mish"), ("elu", "ELU")):
        assert f"aten.{op} (in {module})" in msg
    assert "supported_ops()" in msg
    assert not exact_runs  # refused before any exact trace


def test_ops_on_constants_alone_are_not_surveyed():
    # erfcx is unsupported, but here it only touches a constant: the exact run evaluates it in plain PyTorch
    c = torch.special.erfcx(torch.tensor([0.5], dtype=D))
    v = nsverify.check_gradient(lambda w: (torch.relu(w) * torch.special.erfcx(torch.tensor([0.5], dtype=D))).sum(),
                                ZEROS, progress=False)
    assert v.status == "member" and v.exact_ad == (Fraction(0), Fraction(0))
    assert v.ad == (0.0, 0.0) and float(c) > 0


def test_a_value_written_in_place_into_a_constant_is_surveyed():
    from nsverify.errors import UnsupportedOpError

    def fn(w):
        buf = torch.zeros(2, dtype=D)
        buf.copy_(w)  # buf now depends on w
        return torch.special.erfcx(buf).sum()

    with pytest.raises(UnsupportedOpError, match=r"aten\.special_erfcx"):
        nsverify.check_gradient(fn, ONES, progress=False)


def test_many_unsupported_ops_are_counted_within_the_limit():
    from nsverify.errors import UnsupportedOpError

    def fn(w):
        x = w
        for f in (torch.special.erfcx, torch.special.i0e, torch.special.i1e, torch.special.ndtri, torch.lgamma,
                  torch.digamma, torch.special.entr, torch.special.log_ndtr, torch.special.xlog1py):
            x = f(x) if f is not torch.special.xlog1py else f(x, x)
        return x.sum()

    with pytest.raises(UnsupportedOpError) as info:
        nsverify.check_gradient(fn, torch.full((2,), 0.25, dtype=D), progress=False)
    msg = str(info.value)
    assert len(msg) <= 300 and "more" in msg and msg.startswith("fn uses 9 ATen ops")


# ---------------------------------------------------------------------------------------------------------
# time limits: polled in the oracle's loops and between the chunks of a single large op
# ---------------------------------------------------------------------------------------------------------
def _all_tied_pool(w):
    x = w[0].expand(1, 1, 400, 400)  # every window of the pool is a 9-way exact tie
    return torch.nn.functional.max_pool2d(x, 3, 1).sum()


def test_a_time_limit_inside_tie_handling_answers_unknown():
    # tie handling polls the deadline once per window (it ran 100 s past time_limit=20 before); the bound on the
    # overrun is one step between two polls, which a single large op can still exceed
    v = nsverify.check_gradient(_all_tied_pool, torch.zeros(1, dtype=D), time_limit=1, on_limit="unknown",
                                progress=False)
    assert v.status == "unknown" and "time limit" in v.reason
    with pytest.raises(TooManyPieces):
        nsverify.check_gradient(_all_tied_pool, torch.zeros(1, dtype=D), time_limit=1, progress=False)


def _big_elementwise(w):
    return torch.relu(w[0] * torch.ones(500, 500, dtype=D)).sum()


def _big_matmul(w):
    x = torch.arange(4000, dtype=D).reshape(40, 100) / 7
    return torch.relu(x @ w.reshape(100, 30)).sum()


def _big_conv(w):
    x = torch.arange(3 * 64 * 64, dtype=D).reshape(1, 3, 64, 64) % 5
    return torch.relu(torch.nn.functional.conv2d(x, w.reshape(8, 3, 3, 3))).sum()


@pytest.mark.parametrize("fn, n", [(_all_tied_pool, 1), (_big_elementwise, 1), (_big_matmul, 3000),
                                   (_big_conv, 216)], ids=["pool", "elementwise", "matmul", "conv"])
def test_a_single_large_op_stops_within_the_overrun_bound(fn, n):
    # each case is one op far larger than the limit (100 s and more without one); the op evaluates in chunks
    # with a deadline poll between them, so the call ends within 10% + 1 s of time_limit (the bound of the
    # "refuse rather than guess" issue). fn runs once first: its own float cost (torch's lazy imports) is not
    # the oracle's
    import time

    w = torch.zeros(n, dtype=D)
    fn(w)
    nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.zeros(2, dtype=D), progress=False)  # imports
    limit = 1.0
    t0 = time.perf_counter()
    v = nsverify.check_gradient(fn, w, time_limit=limit, on_limit="unknown", progress=False)
    elapsed = time.perf_counter() - t0
    assert v.status == "unknown" and "time limit" in v.reason
    assert elapsed <= 1.1 * limit + 1.0, f"{elapsed:.2f} s for time_limit={limit}"


def test_chunked_exact_ops_equal_the_unchunked_products():
    # the chunked evaluation (deadline polls between blocks) against numpy's own object-array product and sum
    from nsverify.oracle.ops.linalg import MATMUL_CHUNK_WORK, broadcast_chunked, matmul

    rng = random.Random(3)

    def frac_array(*shape):
        return np.array([Fraction(rng.randint(-9, 9), rng.randint(1, 5)) for _ in range(int(np.prod(shape)))],
                        dtype=object).reshape(shape)

    for sa, sb in [((2, 30, 40), (40, 50)), ((200, 40), (40, 7)), ((3, 1, 20, 30), (4, 30, 60)), ((50,), (50, 3))]:
        a, b = frac_array(*sa), frac_array(*sb)
        assert np.prod(np.broadcast_shapes(sa[:-2], sb[:-2]) or (1,)) * sa[-2 if len(sa) > 1 else 0] * sb[-1] \
            * sb[-2] > 2 * MATMUL_CHUNK_WORK or len(sa) == 1
        assert (matmul(a, b) == np.matmul(a, b)).all()
    a, b = frac_array(40, 1, 60), frac_array(1, 50, 60)
    assert (broadcast_chunked(lambda x, y: x * y - y, a, b) == a * b - b).all()


def test_the_limit_message_counts_the_sites_the_ad_trace_met():
    # 30 ReLUs at their kink in R^6: the AD trace is quick, the pieces (hundreds of thousands) are not
    g = torch.Generator().manual_seed(0)
    A = torch.randint(-3, 4, (30, 6), generator=g).double()
    nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.zeros(2, dtype=D), progress=False)  # warm
    # (how many pieces were done in the 1 s depends on the machine's load: 0 is possible; the sites are counted)
    with pytest.raises(NsverifyError, match=r"ran out during \w+ after \d+ pieces \(30 kink/tie sites"):
        nsverify.check_gradient(lambda w: torch.relu(A @ w).sum(), torch.zeros(6, dtype=D), time_limit=1,
                                shortcuts=False, progress=False)
    # stopped before the AD trace finished: no count is claimed
    with pytest.raises(NsverifyError, match=r"AD trace had not finished, so its kink/tie sites are not counted"):
        nsverify.check_gradient(lambda w: torch.relu(A @ w).sum(), torch.zeros(6, dtype=D), time_limit=0,
                                progress=False)


def test_inseparable_against_the_quadratic_definition():
    from nsverify.oracle.membership import inseparable
    from nsverify.oracle.numbers import Ival, overlap

    def brute(V):
        for i in range(len(V)):
            for j in range(i + 1, len(V)):
                if any(isinstance(x, Ival) for x in V[i] + V[j]) and all(overlap(a, b) for a, b in zip(V[i], V[j])):
                    return i, j
        return None

    rng = random.Random(0)
    for _ in range(1500):
        n, m = rng.randint(1, 3), rng.randint(0, 8)
        V = []
        for _ in range(m):
            v = []
            for _ in range(n):
                x = Fraction(rng.randint(-3, 3), rng.choice([1, 2]))
                v.append(Ival.of(x, x + Fraction(rng.randint(0, 2), 2)) if rng.random() < 0.3 else x)
            V.append(tuple(v))
        assert inseparable(V) == brute(V), V


def test_check_module_leaves_the_models_buffers_as_they_were():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3).double(), torch.nn.BatchNorm1d(3).double(), torch.nn.ReLU(),
                                torch.nn.Linear(3, 1).double()).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    nsverify.check_module(model, lambda o, t: o.sum(), torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=D), None,
                          progress=False, on_limit="unknown", time_limit=30)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # running mean/var and the batch counter too
    model(torch.ones(2, 2, dtype=D))  # the model itself still updates them when the user runs it
    assert not torch.equal(before["1.running_mean"], model.state_dict()["1.running_mean"])
