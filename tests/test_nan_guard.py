"""nsverify.nan_guard on a real training loop: an MLP whose activation is ``where(h > 0, sqrt(h), 0)`` trains until a
pre-activation crosses 0, at step k; the backward of the branch not taken (sqrt of a negative number times 0) makes
the gradient NaN. The step k is found without the guard (the first step whose parameter gradients are not finite);
the guard must fire at that step, not before, name the op and the parameter blocks, and stop before the optimizer
applies the NaN."""
from __future__ import annotations

import copy
import importlib.util
import math
import warnings

import pytest
import torch

import nsverify
from nsverify.errors import BadArgumentError, NonFiniteError
from nsverify.guard import GuardReport, NanGuardError, NanGuardWarning, nan_guard, op_name

STEPS = 30


class WhereSqrt(torch.nn.Module):
    """The common guarded square root: the branch not taken still back-propagates 0 * sqrt'(h) = NaN for h < 0."""

    def forward(self, h):
        return torch.where(h > 0, torch.sqrt(h), 0.0)


class SafeSqrt(torch.nn.Module):
    """The same function written with the double-where fix: its backward is the exact gradient where h != 0."""

    def forward(self, h):
        return torch.where(h > 0, torch.sqrt(torch.where(h > 0, h, 1.0)), 0.0)


def make_mlp(act=WhereSqrt) -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(2, 4), act(), torch.nn.Linear(4, 1)).double()
    with torch.no_grad():  # every pre-activation starts positive; the target pulls them down, step by step
        m[0].weight.mul_(0.3)
        m[0].bias.fill_(1.0)
        m[2].weight.abs_()
    m[2].requires_grad_(False)  # a fixed positive read-out: only the hidden layer can lower the output
    return m


X = torch.tensor([[1.0, 2.0], [-1.0, 0.5], [0.5, -1.5]], dtype=torch.float64)
Y = torch.tensor([[-3.0], [-2.0], [-4.0]], dtype=torch.float64)


def loss_fn(out):
    return ((out - Y) ** 2).mean()


def train(model, steps=STEPS, guard=None, catch=True):
    """Train with SGD; returns (the step whose backward failed or produced a non-finite gradient, or None; the
    minimum pre-activation of each step)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    mins = []
    for step in range(1, steps + 1):
        opt.zero_grad()
        with torch.no_grad():
            mins.append(model[0](X).min().item())
        loss = loss_fn(model(X))
        try:
            loss.backward()
        except NanGuardError:
            if not catch:
                raise
            return step, mins
        if any(p.grad is not None and not torch.isfinite(p.grad).all() for p in model.parameters()):
            return step, mins
        opt.step()
    return None, mins


@pytest.fixture(scope="module")
def k():
    """The first NaN step, found without the guard: the first step with a non-finite parameter gradient. It is
    the first step where a pre-activation is negative (the branch not taken then evaluates sqrt of it)."""
    step, mins = train(make_mlp())
    assert step is not None and step >= 3, f"the loop must run some clean steps first (first NaN step {step})"
    assert all(m > 0 for m in mins[:-1]) and mins[-1] < 0
    return step


def test_the_guard_raises_at_step_k_and_names_the_op(k):
    model = make_mlp()
    with nan_guard(model, time_limit=5) as guard:
        step, _ = train(model, guard=guard)
    assert step == k
    (report,) = guard.reports
    assert report.step == k
    assert report.culprit == "SqrtBackward0" and report.op == "sqrt"
    assert report.zero_incoming  # where sent 0 into the branch not taken: 0 * sqrt'(h < 0) = NaN
    # the first layer's gradients are NaN; the last layer's are not (its input, the activation, is finite)
    assert report.parameters == ["0.weight", "0.bias"]
    assert not report.upstream
    # raised out of backward(): the optimizer never applied the NaN
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_the_error_message_says_what_happened(k):
    model = make_mlp()
    with nan_guard(model, time_limit=5):
        with pytest.raises(NanGuardError) as info:
            train(model, catch=False)
    msg = str(info.value)
    assert f"step {k}" in msg and "0.weight" in msg and "'sqrt'" in msg and "SqrtBackward0" in msg
    assert "incoming gradient was exactly 0" in msg and "double-where" in msg
    assert isinstance(info.value, NonFiniteError)  # callers catching NonFiniteError catch it
    r = info.value.report
    if r.diagnosis is None:  # the oracle gave no class: the report says so and why, never a guessed class
        assert "Class: unknown (" in msg and r.reason
    else:
        assert f"Class: {r.diagnosis.kind}" in msg


def test_warn_mode_warns_at_step_k_and_the_loop_goes_on(k):
    model = make_mlp()
    with nan_guard(model, on_nan="warn", diagnose=False) as guard:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            step, _ = train(model)
    assert step == k  # the loop itself saw the NaN gradient: the guard did not hide it
    hits = [w for w in seen if issubclass(w.category, NanGuardWarning)]
    assert len(hits) == 1 and f"step {k}" in str(hits[0].message)
    assert guard.reports[0].status == "skipped" and guard.reports[0].reason == "diagnose=False"


def test_a_callable_gets_the_report(k):
    model = make_mlp()
    got = []
    with nan_guard(model, on_nan=got.append, diagnose=False):
        train(model)
    assert len(got) == 1 and isinstance(got[0], GuardReport) and got[0].step == k


def test_no_report_on_the_fixed_program():
    """The double-where version never yields a NaN gradient: the guard stays silent for all the steps."""
    model = make_mlp(SafeSqrt)
    with nan_guard(model) as guard:
        step, mins = train(model)
    assert step is None and guard.reports == [] and guard.step == STEPS
    assert min(mins) < 0  # the pre-activations did cross 0: the program ran through the same points


def test_the_hooks_go_with_the_guard(k):
    model = make_mlp()
    with nan_guard(model, diagnose=False):
        pass
    assert train(model)[0] == k  # no error raised: the loop saw the NaN itself
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_a_nan_from_the_loss_is_named_as_coming_from_outside_the_model():
    model = make_mlp(SafeSqrt)
    with nan_guard(model, diagnose=False):
        out = model(X)
        loss = torch.sqrt((out - out.detach()).sum())  # sqrt at 0: d loss / d out = +inf
        with pytest.raises(NanGuardError) as info:
            loss.backward()
    assert info.value.report.upstream
    assert "comes from the loss" in str(info.value)


def test_the_diagnosed_function_is_the_output_weighted_by_the_loss_gradient(k):
    """Its value at the block's current value is sum(g * model(x)), and its gradient (computed with the fixed
    activation) is the loss's gradient for that block (the chain rule with g held fixed)."""
    model = make_mlp()
    with nan_guard(model, on_nan=lambda r: None, diagnose=False) as guard:
        train(model)
    fn, w = guard.diagnosed_function("0.weight")
    out = model(X).detach()
    g = torch.autograd.grad(loss_fn(out.requires_grad_()), out)[0]
    assert fn(w).item() == (g * out).sum().item()
    safe = make_mlp(SafeSqrt)
    safe.load_state_dict(model.state_dict())
    w2 = w.clone().requires_grad_()
    fn2 = lambda v: (g * torch.func.functional_call(safe, {"0.weight": v}, (X,))).sum()  # noqa: E731
    (mine,) = torch.autograd.grad(fn2(w2), w2)
    loss = loss_fn(safe(X))
    (want,) = torch.autograd.grad(loss, safe[0].weight)
    assert torch.allclose(mine, want, rtol=1e-12, atol=0)
    with pytest.raises(BadArgumentError, match="no parameter"):
        guard.diagnosed_function("nope")


def test_op_names():
    assert op_name("SqrtBackward0") == "sqrt"
    assert op_name("MaskedFillBackward0") == "masked_fill"
    assert op_name("AddmmBackward0") == "addmm"
    assert op_name("WhereBackward0") == "where"


@pytest.mark.parametrize("kwargs, match", [
    ({"on_nan": "ignore"}, "on_nan"), ({"time_limit": -1}, "time_limit"), ({"time_limit": float("nan")}, "time_limit"),
])
def test_bad_arguments_name_the_fix(kwargs, match):
    with pytest.raises(BadArgumentError, match=match):
        nan_guard(make_mlp(), **kwargs)
    with pytest.raises(BadArgumentError, match="torch.nn.Module"):
        nan_guard(lambda x: x)


def test_public_name():
    assert nsverify.nan_guard is nan_guard and "nan_guard" in nsverify.__all__


def _oracle_diagnoses() -> bool:
    """Whether this oracle fills the NaN diagnosis (issue 35's oracle part, which adds the exact singular ops)."""
    return importlib.util.find_spec("nsverify.oracle.ops.singular") is not None


@pytest.mark.skipif(not _oracle_diagnoses(), reason="the oracle's NaN diagnosis (nsverify.oracle.ops.singular) is "
                                                    "not in this tree yet")
def test_end_to_end_the_guard_says_it_is_a_bug_with_the_expected_value(k):
    """With the oracle's diagnosis: class lipschitz (the function is smooth at w: no pre-activation is 0), op sqrt
    or where, and the expected value equals the gradient of the double-where program (computed independently in
    float64)."""
    model = make_mlp()
    with nan_guard(model, time_limit=30) as guard:
        train(model)
    (r,) = guard.reports
    assert r.kind == "lipschitz", r.message()
    assert r.op in ("sqrt", "aten.sqrt", "where", "aten.where")
    assert "a bug" in r.message()
    safe = make_mlp(SafeSqrt)
    safe.load_state_dict(model.state_dict())
    (want,) = torch.autograd.grad(loss_fn(safe(X)), getattr(safe[0], r.diagnosed.split(".")[1]))
    got = [float(v) for v in r.diagnosis.expected]
    assert all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) for a, b in zip(got, want.flatten().tolist()))


def test_copying_a_guarded_model_keeps_it_usable():
    """deepcopy of a model under a guard copies no live hook state that breaks it."""
    model = make_mlp(SafeSqrt)
    with nan_guard(model):
        other = copy.deepcopy(model)
        assert torch.isfinite(other(X)).all()


def test_an_infinite_derivative_with_a_nonzero_incoming_gradient_is_not_called_a_zero_times_inf():
    """sqrt at exactly 0 on the path the loss uses: the backward is g * inf with g = 1, not 0 * NaN."""
    model = torch.nn.Sequential(torch.nn.Linear(1, 1), WhereSqrt()).double()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    model[1] = type("Sqrt", (torch.nn.Module,), {"forward": lambda self, h: torch.sqrt(h)})()
    with nan_guard(model, diagnose=False):
        with pytest.raises(NanGuardError) as info:
            model(torch.ones(1, 1, dtype=torch.float64)).sum().backward()
    r = info.value.report
    assert r.op == "sqrt" and not r.zero_incoming and not r.upstream
    assert "incoming gradient was exactly 0" not in str(info.value)


def test_an_oracle_error_is_the_reason_and_the_report_still_comes_out():
    """1/h at h = 0 exactly: the value itself is inf, the oracle refuses the exact division by zero; the guard
    reports the error as the reason (and the class unknown unless the error carries a diagnosis)."""
    class Recip(torch.nn.Module):
        def forward(self, h):
            return 1 / h

    model = torch.nn.Sequential(torch.nn.Linear(1, 1), Recip()).double()
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[0].bias.fill_(-1.0)
    with nan_guard(model, time_limit=5):
        with pytest.raises(NanGuardError) as info:
            model(torch.ones(1, 1, dtype=torch.float64)).sum().backward()
    r = info.value.report
    assert r.op in ("reciprocal", "div") and r.status != "unknown" and r.reason.startswith("the oracle raised")
    if r.diagnosis is None:
        assert "Class: unknown (the oracle raised" in str(info.value)


def test_the_replay_leaves_the_buffers_and_the_random_stream_as_they_were():
    """The culprit is found by replaying the step: BatchNorm's running statistics and the caller's random stream
    come out of it untouched, and dropout replays the same mask (the culprit is found)."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5), WhereSqrt(),
                                torch.nn.Linear(4, 1)).double().train()
    with nan_guard(model, diagnose=False):
        out = model(X)  # batch norm centres the batch: some entries are negative, the where's sqrt is NaN there
        stats = [b.clone() for b in model.buffers()]
        state = torch.get_rng_state()
        with pytest.raises(NanGuardError) as info:
            loss_fn(out).backward()
        assert all(torch.equal(a, b) for a, b in zip(stats, model.buffers()))
        assert torch.equal(state, torch.get_rng_state())
    assert info.value.report.culprit == "SqrtBackward0" and info.value.report.zero_incoming
