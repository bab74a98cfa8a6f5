"""Bad input and undecidable cases: clear nsverify errors or an honest "unknown", never a wrong verdict."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

import nsverify
from nsverify.errors import (
    DataDependentControlFlowError,
    NonFiniteError,
    NsverifyError,
    TooManyPieces,
    UnsupportedDtypeError,
    UnsupportedOpError,
)

Z = torch.zeros(1, dtype=torch.float64)


def test_unsupported_op_names_the_op_and_a_rewrite():
    with pytest.raises(UnsupportedOpError, match=r"aten\.cumsum.*torch\.where"):
        nsverify.check_gradient(lambda w: torch.cumsum(w, 0).sum(), Z)


def test_item_on_w_dependent_value():
    def f(w):
        return w[0] * 2 if w[0].item() >= 0 else -w[0]

    with pytest.raises(DataDependentControlFlowError, match="torch.where"):
        nsverify.check_gradient(f, Z)


def test_nonfinite_point_and_constant():
    with pytest.raises(NonFiniteError, match="NaN or inf"):
        nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.tensor([float("nan")]))
    nan_const = torch.tensor([float("inf")])
    with pytest.raises(NonFiniteError):
        nsverify.check_gradient(lambda w: (w * nan_const).sum(), Z)


def test_integer_point():
    with pytest.raises(UnsupportedDtypeError, match="floating"):
        nsverify.check_gradient(lambda w: w.sum(), torch.zeros(2, dtype=torch.int64))


def test_non_scalar_output():
    with pytest.raises(NsverifyError, match="scalar"):
        nsverify.check_gradient(lambda w: torch.relu(w), torch.zeros(2, dtype=torch.float64))


def test_bad_ad_length():
    with pytest.raises(NsverifyError, match="one entry per"):
        nsverify.check_gradient(lambda w: torch.relu(w).sum(), Z, ad=[1.0, 2.0])


def test_too_many_pieces_message_and_unknown_mode():
    w = torch.zeros(12, dtype=torch.float64)
    f = lambda w: torch.relu(w).sum()  # 2^12 genuine pieces (separable: shortcuts=False enumerates them all)
    with pytest.raises(TooManyPieces, match=r"12 kink/tie sites.*max_pieces=100000.*on_limit='unknown'"):
        nsverify.check_gradient(f, w, max_pieces=50, shortcuts=False)
    v = nsverify.check_gradient(f, w, max_pieces=50, on_limit="unknown", shortcuts=False)
    # the pieces found so far are certified, so membership of the exact AD (0) is still decided
    assert v.status == "member"
    v = nsverify.check_gradient(f, w, ad=[2.0] * 12, max_pieces=50, on_limit="unknown", shortcuts=False)
    assert v.status == "unknown" and "more than 50 pieces" in v.reason


def test_interval_straddling_a_kink_is_unknown():
    f = lambda w: torch.relu(w[0] + torch.exp(w[0]) - 1)
    v = nsverify.check_gradient(f, Z)  # exp(0) = 1 exactly: decided
    assert v.status == "member"
    g = lambda w: torch.relu(torch.sin(w[0] + 1) - torch.sin(w[0] * 0 + 1))
    v = nsverify.check_gradient(g, Z)  # sin(1) - sin(1): an interval around 0, undecidable
    assert v.status == "unknown" and "interval" in v.reason


def test_bad_on_limit_and_wrt():
    with pytest.raises(NsverifyError, match="on_limit"):
        nsverify.check_gradient(lambda w: w.sum(), Z, on_limit="maybe")
    with pytest.raises(NsverifyError, match="wrt"):
        nsverify.check_module(torch.nn.Linear(1, 1), lambda o, t: o.sum(), Z[None], None, wrt="weights")


def test_unsupported_smooth_op_named():
    with pytest.raises(UnsupportedOpError, match=r"aten\.mish.*sigmoid"):
        nsverify.check_gradient(lambda w: torch.nn.functional.mish(w).sum(), Z)


def test_inplace_writes_through_views_and_constant_targets_rejected():
    def f(w):
        y = w * 1
        y[0] = y[1] * 2  # copy_ into a select view
        z = y.view(2, 2)
        z[1].relu_()  # in-place on a view of a view
        return (y * torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)).sum()

    w = torch.tensor([1.0, 2.0, -3.0, 0.5], dtype=torch.float64)
    v = nsverify.check_gradient(f, w)
    wf = w.clone().requires_grad_(True)
    f(wf).backward()
    assert v.ad == tuple(wf.grad.tolist()) == tuple(float(x) for x in v.exact_ad)

    def g(w):
        buf = torch.zeros(2, dtype=torch.float64)
        buf[0] = w[0]
        return buf.sum()

    with pytest.raises(UnsupportedOpError, match="in place.*torch.stack"):
        nsverify.check_gradient(g, w)


def test_time_limit_gives_unknown_or_raises():
    w = torch.zeros(10, dtype=torch.float64)
    f = lambda w: torch.relu(w).sum()  # noqa: E731
    with pytest.raises(TooManyPieces, match="time limit"):
        nsverify.check_gradient(f, w, time_limit=0.0)
    v = nsverify.check_gradient(f, w, ad=[3.0] * 10, time_limit=0.0, on_limit="unknown")
    assert v.status == "unknown" and "time limit" in v.reason


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_point_and_constants():
    from nsverify.papers.cases import park_lemma7

    v = nsverify.check_gradient(park_lemma7, torch.zeros(2, dtype=torch.float32, device="cuda"))
    assert v.status == "not_member" and v.ad == (2.0, 0.0)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], device="cuda")
    v = nsverify.check_gradient(lambda w: torch.max(w[0] * x) - torch.relu(w[0] * x).sum(),
                                torch.zeros(1, device="cuda"))
    assert v.status in ("member", "not_member") and v.kinks


def test_hard_deadline_on_a_program_too_large_for_forward_mode():
    import time

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).double()
    X, y = torch.randn(32, 64, dtype=torch.float64), torch.randint(0, 10, (32,))
    t0 = time.perf_counter()
    with pytest.raises(TooManyPieces, match="time limit"):
        nsverify.check_module(m, torch.nn.functional.cross_entropy, X, y, time_limit=0.2)
    v = nsverify.check_module(m, torch.nn.functional.cross_entropy, X, y, time_limit=0.2, on_limit="unknown")
    assert v.status == "unknown" and "time limit" in v.reason
    assert time.perf_counter() - t0 < 30


# ---------------------------------------------------------------------------------------------------------------
# The API boundary, table-driven: every bad input is an NsverifyError subclass that names the problem and the fix
# (never a raw numpy, torch, OverflowError or ZeroDivisionError)
from nsverify.errors import OracleInputError, UnknownOpError  # noqa: E402

_relu = lambda w: torch.relu(w).sum()  # noqa: E731
_Z2 = torch.zeros(2, dtype=torch.float64)

BAD_CALLS = [
    # (what, fn, w, keyword arguments, error class, message pattern)
    ("empty w", _relu, torch.zeros(0, dtype=torch.float64), {}, OracleInputError, r"w is empty.*at least one"),
    ("w on the meta device", _relu, torch.zeros(2, device="meta"), {}, OracleInputError, r"meta tensor.*values"),
    ("w a list", _relu, [0.0, 1.0], {}, OracleInputError, r"torch.Tensor.*torch.tensor"),
    ("complex w", _relu, torch.zeros(2, dtype=torch.complex64), {}, UnsupportedDtypeError, r"w.double\(\)"),
    ("integer w", _relu, torch.zeros(2, dtype=torch.int32), {}, UnsupportedDtypeError, r"floating"),
    ("inf in w", _relu, torch.tensor([float("inf"), 0.0]), {}, NonFiniteError, r"NaN or inf"),
    ("ad too short", _relu, _Z2, dict(ad=[1.0]), OracleInputError, r"1 entries but w has 2; give one entry"),
    ("ad with NaN", _relu, _Z2, dict(ad=[float("nan"), 0.0]), NonFiniteError, r"ad\[0\] is nan.*finite"),
    ("ad a string", _relu, _Z2, dict(ad="0 0"), OracleInputError, r"tensor or a sequence of numbers"),
    ("ad with a word", _relu, _Z2, dict(ad=[0.0, "x"]), OracleInputError, r"ad\[1\] = 'x' is not a number"),
    ("max_pieces 0", _relu, _Z2, dict(max_pieces=0), OracleInputError, r"max_pieces=0.*integer >= 1"),
    ("max_pieces 2.5", _relu, _Z2, dict(max_pieces=2.5), OracleInputError, r"integer >= 1"),
    ("max_pieces True", _relu, _Z2, dict(max_pieces=True), OracleInputError, r"integer >= 1"),
    ("time_limit negative", _relu, _Z2, dict(time_limit=-1), OracleInputError, r"seconds >= 0.*None"),
    ("time_limit NaN", _relu, _Z2, dict(time_limit=float("nan")), OracleInputError, r"seconds >= 0"),
    ("time_limit a string", _relu, _Z2, dict(time_limit="10"), OracleInputError, r"seconds >= 0"),
    ("on_limit unknown", _relu, _Z2, dict(on_limit="warn"), NsverifyError, r"'raise' or 'unknown'"),
    ("progress not callable", _relu, _Z2, dict(progress=3), OracleInputError, r"progress must be.*callable"),
    ("rules misspelt", _relu, _Z2, dict(rules={"reluu": 0}), UnknownOpError, r"Did you mean relu"),
    ("division by an exact zero", lambda w: (w / (w[0] - w[0])).sum(), torch.ones(2, dtype=torch.float64), {},
     NonFiniteError, r"divides by an exact zero.*guard"),
    ("values beyond the float range", lambda w: (torch.relu(w) * 1e300 * 1e300).sum() + torch.abs(w[0] - w[1]),
     _Z2, dict(ad=[0.5, 0.5]), NonFiniteError, r"beyond the float range.*Rescale"),
]


@pytest.mark.parametrize("what,fn,w,kw,err,pattern", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_is_a_named_nsverify_error(what, fn, w, kw, err, pattern):
    with pytest.raises(err, match=pattern) as info:
        nsverify.check_gradient(fn, w, **{"progress": False, **kw})
    assert isinstance(info.value, NsverifyError)


def test_bad_module_arguments():
    m = torch.nn.Linear(2, 1).double()
    X, y = torch.ones(1, 2, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64)
    loss = torch.nn.functional.mse_loss
    with pytest.raises(OracleInputError, match="torch.nn.Module"):
        nsverify.check_module(lambda x: x, loss, X, y)
    with pytest.raises(OracleInputError, match="meta tensor.*to_empty"):
        nsverify.check_module(torch.nn.Linear(2, 1, device="meta"), loss, X, y)
    with pytest.raises(OracleInputError, match="unknown keyword argument.*max_piece.*it takes"):
        nsverify.check_module(m, loss, X, y, max_piece=3)
    assert nsverify.check_module(m, loss, X, y, progress=False).status == "member"


def test_float_overflow_in_fn_is_reported_not_raised():
    """fn overflows in float64 (w * 1e308 * 10 = inf): PyTorch's AD is inf, the exact AD is 1e309, finite."""
    v = nsverify.check_gradient(lambda w: (w * 1e308 * 10).sum(), torch.ones(1, dtype=torch.float64),
                                progress=False)
    assert v.status == "member" and v.ad == (float("inf"),) and v.ad_distance == float("inf")
    assert v.exact_ad == (Fraction(1e308) * 10,)


def test_fn_errors_on_the_float_point_are_the_programs_own():
    def f(w):
        raise ValueError("my program is broken")

    with pytest.raises(ValueError, match="my program is broken"):
        nsverify.check_gradient(f, _Z2, progress=False)


def test_a_failure_of_the_exact_evaluation_names_the_op(monkeypatch):
    from nsverify.oracle.ops.table import TABLE

    def broken(*a, **k):
        raise IndexError("simulated")

    monkeypatch.setitem(TABLE.impls, "relu", broken)
    with pytest.raises(UnsupportedOpError, match=r"aten\.relu.*IndexError: simulated.*supported ops") as info:
        nsverify.check_gradient(_relu, _Z2, progress=False)
    assert isinstance(info.value.__cause__, IndexError)
