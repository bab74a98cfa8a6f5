"""Known answers of the exact Clarke oracle, each with its certificate re-checked exactly."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch

import nsverify
from nsverify.oracle import verify_certificate
from nsverify.oracle.cases import CASES, abs_sin, point
from nsverify.oracle.membership import check_weights, margin

F = Fraction


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_known_answer(case):
    v = nsverify.check_gradient(case.fn, point(case))
    assert v.status == case.expected, v.explain()
    assert v.exact
    if case.clarke is not None:
        assert sorted(v.bouligand) == sorted(case.clarke)
    if case.exact_ad is not None:
        assert tuple(v.exact_ad) == case.exact_ad
        # PyTorch's float autograd agrees with the exact AD on these dyadic examples
        assert v.ad == tuple(float(x) for x in case.exact_ad)
    # certificate checked here, independently of the oracle's own check
    cert = v.certificate
    if v.status == "member":
        if cert["kind"] == "convex_weights":
            w = {int(k): Fraction(x) for k, x in cert["weights"].items()}
            assert check_weights(v.tested, v.bouligand, w)
        else:
            assert cert["kind"] == "interval_bracket"
    else:
        h = [Fraction(x) for x in cert["h"]]
        assert margin(h, v.tested, v.bouligand) is not None
        assert sum(a * b for a, b in zip(h, v.tested)) > max(
            sum(a * b for a, b in zip(h, b_)) for b_ in v.bouligand
        )
    # ... and survives a JSON round trip
    assert verify_certificate(json.loads(json.dumps(json.loads(v.to_json()))))


def test_tampered_certificate_fails():
    case = next(c for c in CASES if c.name == "Park Lemma 2")
    d = json.loads(nsverify.check_gradient(case.fn, point(case)).to_json())
    assert verify_certificate(d)
    d["tested"] = ["1"]  # the true gradient: no separating direction can exist
    assert not verify_certificate(d)
    case = next(c for c in CASES if c.name == "relu(t) at 0")
    d = json.loads(nsverify.check_gradient(case.fn, point(case)).to_json())
    d["tested"] = ["2"]
    assert not verify_certificate(d)


def test_given_ad_vector_is_tested_as_is():
    f = lambda w: torch.relu(w[0])
    w = torch.zeros(1, dtype=torch.float64)
    assert nsverify.check_gradient(f, w, ad=torch.tensor([0.25])).status == "member"
    v = nsverify.check_gradient(f, w, ad=[1.5])
    assert v.status == "not_member" and v.tested_is == "ad"
    assert abs(v.distance - 0.5) < 1e-9


def test_abs_sin_clarke_is_0_2():
    v = nsverify.check_gradient(abs_sin, torch.zeros(1, dtype=torch.float64))
    assert v.clarke == (F(0), F(2))
    assert v.status == "member"


def test_interval_path_irrational_clarke():
    """|x| + sin(x + 1/2) at 0: Clarke [cos(1/2) - 1, cos(1/2) + 1], only known up to intervals."""
    f = lambda w: w[0].abs() + torch.sin(w[0] + 0.5)
    v = nsverify.check_gradient(f, torch.zeros(1, dtype=torch.float64))
    assert v.status == "member" and v.certificate["kind"] == "interval_bracket"
    lo, hi = sorted(v.bouligand, key=lambda b: float(b[0]))
    import math

    assert lo[0].lo <= Fraction(math.cos(0.5) - 1) + Fraction(1, 10**12)
    assert float(hi[0]) == pytest.approx(math.cos(0.5) + 1, abs=1e-15)
    # a vector outside: not_member by a rigorous interval separation
    v2 = nsverify.check_gradient(f, torch.zeros(1, dtype=torch.float64), ad=[2.0])
    assert v2.status == "not_member"
    assert verify_certificate(v2.to_json())
