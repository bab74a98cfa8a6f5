"""Known answers of the exact Clarke oracle, each with its certificate re-checked exactly."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch

import nsverify
from nsverify.oracle import verify_certificate
from nsverify.oracle.membership import margin
from nsverify.papers.cases import CASES, abs_sin, point
from nsverify.rational import check_weights

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


@pytest.mark.parametrize("t", [-1.0, -0.5, -0.01, 0.0, 0.01, 0.5, 1.0])
def test_despres_tables_full(t):
    """Després Tables 2 and 3: PyTorch's derivative is 0 except -1.5 / -3 at t = 0; the Clarke set is {0}."""
    from nsverify.papers.cases import despres_table2, despres_table3

    w = torch.tensor([t], dtype=torch.float64)
    for fn, at0 in ((despres_table2, -1.5), (despres_table3, -3.0)):
        v = nsverify.check_gradient(fn, w)
        assert v.bouligand == [(F(0),)]
        assert v.ad == ((at0,) if t == 0 else (0.0,))
        assert v.status == ("not_member" if t == 0 else "member")


def test_float_ties_created_and_destroyed():
    # created: exactly 3*w - 0.3f != 0 for w = 0.1f, but float32 rounds it to 0
    w32 = torch.tensor([0.1], dtype=torch.float32)
    v = nsverify.check_gradient(lambda w: torch.relu(w[0] * 3 - torch.tensor(0.3)), w32)
    assert any(k.extra.get("float_only") for k in v.kinks) and "rounding created" in v.explain()
    # destroyed: (3w)/3 - w + (w - 0.1) is exactly 0 at w = 0.1, but float64 rounding makes it 1.4e-17
    w64 = torch.tensor([0.1], dtype=torch.float64)
    v = nsverify.check_gradient(lambda w: torch.relu((w[0] * 3) / 3 - w[0] + (w[0] - 0.1)), w64)
    assert [k.float_tie for k in v.kinks] == [False] and "rounding destroyed" in v.explain()
    # kept: relu(w) at 0
    v = nsverify.check_gradient(lambda w: torch.relu(w[0]), torch.zeros(1))
    assert [k.float_tie for k in v.kinks] == [True]


class _ReluRight(torch.autograd.Function):
    """Park et al.'s h: ReLU whose AD uses h'(0) = 1, as a custom autograd Function."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.relu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x >= 0)


def test_park_f2_f3_with_a_custom_autograd_function():
    """exact_ad comes from PyTorch's backward (custom rules included), evaluated exactly."""
    h = _ReluRight.apply
    z = torch.zeros(1, dtype=torch.float64)
    with pytest.warns(UserWarning, match="custom autograd.Function"):
        v2 = nsverify.check_gradient(lambda w: torch.relu(w[0]) - h(w[0]), z)
    with pytest.warns(UserWarning, match="custom autograd.Function"):
        v3 = nsverify.check_gradient(lambda w: h(-h(w[0])), z)
    for v, ad in ((v2, -1), (v3, -1)):
        assert v.status == "not_member" and v.exact_ad == (F(ad),) and v.ad == (float(ad),)
        assert v.bouligand == [(F(0),)]
        assert verify_certificate(v.to_json())
    # a vector given by the caller is what is tested: no warning naming the reverse-mode value, same record
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = nsverify.check_gradient(lambda w: torch.relu(w[0]) - h(w[0]), z, ad=[0.0])
    assert v.status == "member" and v.tested_is == "ad" and v.tested == (F(0),) and v.exact_ad == (F(-1),)


def _numbers(x, f):
    """``x`` with every exact-number string (and interval endpoint) passed through ``f``."""
    if isinstance(x, str):
        try:
            return f(Fraction(x))
        except (ValueError, ZeroDivisionError):
            return x
    if isinstance(x, list):
        return [_numbers(v, f) for v in x]
    if isinstance(x, dict):
        return {k: (v if k in ("kind", "over") else _numbers(v, f)) for k, v in x.items()}
    return x


def _tamperings(d: dict):
    """Tampered copies of a verdict record: every one is a false statement about the program."""
    cert = d["certificate"]
    enc = lambda q: str(q)  # noqa: E731
    yield "flip signs", {**d, "certificate": _numbers(cert, lambda q: enc(-q) if q else enc(Fraction(1)))}
    if "weights" in cert:
        k = next(iter(cert["weights"]))
        yield "change a weight", {**d, "certificate": {**cert, "weights": {**cert["weights"], k: enc(
            Fraction(cert["weights"][k]) * 2 + Fraction(1, 3))}}}
    if d["status"] == "member":  # tested moved off every vertex hull: weights can no longer reproduce it
        yield "change tested", {**d, "tested": [enc(Fraction(d["tested"][0]) + 7)] + d["tested"][1:]}
    else:  # tested replaced by a Bouligand vertex: no direction separates it
        yield "change tested", {**d, "tested": d["bouligand"][0]}
    for other in ("convex_weights", "separating_direction", "adjacent_piece", "interval_bracket", "nonsense"):
        if other != cert["kind"]:
            yield f"rename kind to {other}", {**d, "certificate": {**cert, "kind": other}}
    for key in ("rows", "leaves", "witnesses", "h", "weights"):
        if isinstance(cert.get(key), (list, dict)) and cert[key]:
            dropped = cert[key][1:] if isinstance(cert[key], list) else dict(list(cert[key].items())[1:])
            yield f"drop {key}", {**d, "certificate": {**cert, key: dropped}}
    yield "status swapped", {**d, "status": "not_member" if d["status"] == "member" else "member"}
    yield "no certificate", {**d, "certificate": None}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_tampered_known_answer_is_rejected(case):
    """Each known answer's certificate, tampered every way above, is rejected with the program at hand (the
    replay re-derives what the JSON only lists) -- and the checker never raises."""
    v = nsverify.check_gradient(case.fn, point(case), progress=False)
    d = json.loads(v.to_json())
    assert verify_certificate(d, fn=case.fn)
    count = 0
    for what, bad in _tamperings(d):
        for fn in (case.fn, None):
            got = verify_certificate(bad, fn=fn)  # never raises
            if fn is not None:
                assert not got, (what, got)
            count += 1
    assert count >= 10
