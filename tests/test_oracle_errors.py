"""Bad input and undecidable cases: clear nsverify errors or an honest "unknown", never a wrong verdict."""

from __future__ import annotations

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
    with pytest.raises(UnsupportedOpError, match=r"aten\.gelu.*sigmoid"):
        nsverify.check_gradient(lambda w: torch.nn.functional.gelu(w).sum(), Z)


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
    from nsverify.oracle.cases import park_lemma7

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
