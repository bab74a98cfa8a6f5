"""The oracle's one path (fn, w -> Evaluation -> pieces -> certificate -> Verdict): how often fn runs, what the
Evaluation shares, and the certificate format (defined once, backward compatible with stored reports)."""

from __future__ import annotations

import json
import random
from fractions import Fraction as F

import pytest
import torch

import nsverify
from nsverify.oracle import Evaluation, verify_certificate
from nsverify.oracle.certificates import KINDS, adjacent_piece, describe, from_json
from nsverify.oracle.numbers import Ival
from nsverify.oracle.pieces import enumerate_pieces


def _counted(fn):
    calls = [0]

    def g(x):
        calls[0] += 1
        return fn(x)

    return g, calls


# The method needs: 1 float autograd run, 1 exact forward-mode trace (kink sites, float shadow), 1 exact
# reverse-mode trace (PyTorch's backward formulas), then 1 pieces trace per piece adjacent to w -- none when
# the AD trace met no kink -- and 1 trace along AD's own choices only when convex weights cannot decide.
def test_fn_calls_smooth_point_has_no_pieces_trace():
    f, calls = _counted(lambda w: (w * w).sum() + 3 * w[0])
    v = nsverify.check_gradient(f, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    assert v.status == "member" and v.exact_ad == (F(5), F(-4), F(1))  # 2w + (3, 0, 0)
    assert v.stats["pieces"] == 1 and calls[0] == 3


def test_fn_calls_one_kink_and_k_kinks():
    f, calls = _counted(lambda w: torch.relu(w[0]))
    assert nsverify.check_gradient(f, torch.zeros(1, dtype=torch.float64)).status == "member"
    assert calls[0] == 3 + 2  # the two sides of the kink
    for k in (2, 3):
        f, calls = _counted(lambda w: torch.relu(w).sum())
        v = nsverify.check_gradient(f, torch.zeros(k, dtype=torch.float64), shortcuts=False)
        assert v.stats["pieces"] == 2**k and calls[0] == 3 + 2**k  # k independent kinks: every sign pattern
        f, calls = _counted(lambda w: torch.relu(w).sum())
        v = nsverify.check_gradient(f, torch.zeros(k, dtype=torch.float64))
        # separable blocks: one default trace, then each kink's two sides alone
        assert v.stats["pieces"] == 2 * k and v.stats["product_pieces"] == 2**k and calls[0] == 3 + 1 + 2 * k


def test_fn_calls_not_member_skips_the_follow_trace():
    """Park et al., Lemma 2: relu(w) - relu(-w) has the pieces w > 0 and w < 0 (gradient 1 on both)."""
    f, calls = _counted(lambda w: torch.relu(w[0]) - torch.relu(-w[0]))
    v = nsverify.check_gradient(f, torch.zeros(1, dtype=torch.float64))
    assert v.status == "not_member" and v.stats["pieces"] == 2 and calls[0] == 3 + 2


def test_fn_calls_network_certified_by_its_adjacent_piece():
    """Cross-entropy at two kinks of a 2-3-3 net (inputs w in R^2): two kink lines through w give 4 pieces;
    the gradients are irrational, so AD's own piece (one more trace) certifies membership."""
    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3)).double()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[1.0, 1.0], [1.0, -1.0], [0.5, 2.0]]))
        m[0].bias.copy_(torch.tensor([-2.0, 0.0, 1.0]))  # at x = (1, 1): units 0 and 1 exactly at 0
        m[2].weight.copy_(torch.tensor([[1.0, -2.0, 0.5], [0.0, 1.0, 1.0], [1.0, 1.0, -1.0]]))
        m[2].bias.zero_()
    fn, w = nsverify.oracle.module_function(m, torch.nn.functional.cross_entropy,
                                            torch.tensor([[1.0, 1.0]], dtype=torch.float64), torch.tensor([1]),
                                            "inputs")
    f, calls = _counted(fn)
    v = nsverify.check_gradient(f, w)
    assert v.certificate["kind"] == "adjacent_piece" and v.stats["pieces"] == 4 and calls[0] == 3 + 4 + 1


def _float_run_unpolled(monkeypatch):
    """These tests are about the exact traces: the float run (which polls too) completes first."""
    from nsverify.oracle import prepass

    monkeypatch.setattr(prepass, "poll_deadline", lambda: None)


def test_fn_calls_time_limit_stops_before_the_first_pieces_trace(monkeypatch):
    _float_run_unpolled(monkeypatch)
    f, calls = _counted(lambda w: torch.relu(w).sum())
    v = nsverify.check_gradient(f, torch.zeros(3, dtype=torch.float64), ad=[3.0] * 3, time_limit=0.0,
                                on_limit="unknown")
    assert v.status == "unknown" and "time limit" in v.reason and v.ad == (0.0, 0.0, 0.0)
    assert calls[0] == 2  # float, then the forward trace, stopped by the deadline poll at its first exact op


def test_fn_calls_hard_deadline_reuses_the_float_ad(monkeypatch):
    """time_limit=0 is the hard stop at once: the exact forward trace's next op raises (after the sleep below);
    the "unknown" verdict then reports the float AD already computed instead of running fn again."""
    import time

    _float_run_unpolled(monkeypatch)
    def slow(w):
        if type(w).__name__ == "ExactTensor":
            time.sleep(1.05)
        return (w * w).sum()

    f, calls = _counted(slow)
    v = nsverify.check_gradient(f, torch.ones(2, dtype=torch.float64), time_limit=0.0, on_limit="unknown")
    assert v.status == "unknown" and "time limit" in v.reason and v.ad == (2.0, 2.0)
    assert calls[0] == 2  # float, then the forward trace that hit the deadline


def test_evaluation_runs_each_trace_once_and_shares_the_point():
    f, calls = _counted(lambda w: torch.relu(w[0]) + 2 * w[1])
    ev = Evaluation(f, torch.tensor([0.0, 0.5], dtype=torch.float64), shadow=True)
    assert ev.values == [F(0), F(1, 2)]
    for _ in range(2):
        assert ev.float_ad() == (0.0, 2.0)
        assert ev.forward().gradient == (F(0), F(2))
        assert ev.reverse() == ((F(0), F(2)), F(1))
        assert ev.exact_ad() == ((F(0), F(2)), "backward")
    assert calls[0] == ev.calls == 3
    assert [s.op for s in ev.forward().sites] == ["relu"] and ev.forward().sites[0].float_tie is True


def test_pieces_trace_reuses_a_kink_free_ad_trace():
    """Without a kink or tie at w, the pieces trace is the AD trace: same gradient and value as a fresh trace."""
    f, calls = _counted(lambda w: torch.exp(w).sum() + torch.relu(w[1] - 1))
    w = torch.tensor([0.0, 3.0], dtype=torch.float64)
    ev = Evaluation(f, w)
    fresh = Evaluation(f, w).trace("pieces", decide=None)
    ev.forward()
    before = calls[0]
    r = ev.pieces_trace(decide=None)
    assert calls[0] == before and r.sites == [] and not r.nonaffine
    key = lambda x: (x.lo, x.hi) if isinstance(x, Ival) else x  # noqa: E731
    assert [key(x) for x in r.gradient] == [key(x) for x in fresh.gradient] and r.gradient[0] == 1  # exp(0)
    assert key(r.value) == key(fresh.value) and isinstance(r.value, Ival)  # exp(3) is irrational
    g, calls2 = _counted(lambda w: torch.relu(w[0]))
    ev = Evaluation(g, torch.zeros(1, dtype=torch.float64))
    ev.forward()
    assert len(enumerate_pieces(ev).leaves) == 2 and calls2[0] == 1 + 2  # a kink: real pieces traces


def test_skipped_follow_trace_could_not_have_certified():
    """The follow trace is skipped when the enumeration is exact and every vector rational: on random programs
    at exact ties, wherever that holds and the convex weights fail, AD's own piece indeed certifies nothing."""
    from nsverify.oracle.membership import distinct, member_weights
    from nsverify.reference.fuzz import random_program

    checked = 0
    for seed in range(60):
        rng = random.Random(seed)
        n = rng.randint(1, 3)
        w0 = [F(rng.randint(-4, 4), 2) for _ in range(n)]
        fn, _ = random_program(rng, n, w0, 3)
        ev = Evaluation(fn, torch.tensor([float(x) for x in w0], dtype=torch.float64))
        en = enumerate_pieces(ev, limit=12, on_limit="unknown")  # larger programs: not exact, skipped
        inner = distinct(leaf.gradient for leaf in en.leaves)
        exact_ad = ev.exact_ad()[0]
        if en.exact and member_weights(exact_ad, inner) is None:
            assert all(isinstance(x, F) for v in inner + [exact_ad] for x in v)
            assert adjacent_piece(ev, exact_ad) is None
            checked += 1
    assert checked >= 3


# ---------------------------------------------------------------------------------------------- certificates
# verdicts as the pre-redesign oracle wrote them into reports (status, vectors, certificate)
STORED = [
    {"status": "not_member", "tested": ["0"], "bouligand": [["1"]], "outer": [["1"]],
     "certificate": {"h": ["-1"], "kind": "separating_direction", "over": "bouligand"}},
    {"status": "member", "tested": ["0"], "bouligand": [["0"], ["1"]], "outer": [["0"], ["1"]],
     "certificate": {"kind": "convex_weights", "weights": {"0": "1"}, "witnesses": {"0": {"0": "-1"}}}},
    {"status": "not_member", "tested": ["5", "5"], "bouligand": [["0", "1"]],
     "outer": [["0", "0"], ["0", "1"], ["0", "2"]],
     "certificate": {"h": ["1", "1"], "kind": "separating_direction", "over": "outer"}},
    {"status": "member", "tested": [{"hi": "5/8", "lo": "1/2"}], "bouligand": [["0"], [{"hi": "2", "lo": "15/8"}]],
     "outer": [["0"], [{"hi": "2", "lo": "15/8"}]],
     "certificate": {"above": 1, "below": 0, "kind": "interval_bracket"}},
    {"status": "member", "tested": ["1", {"hi": "2", "lo": "1"}], "bouligand": [], "outer": [],
     "certificate": {"decisions": [0, 0], "gradient": ["1", {"hi": "2", "lo": "1"}], "kind": "adjacent_piece",
                     "rows": [{"0": "-1", "1": "-1"}, {"0": "-1", "1": "1"}], "witness": {"0": "-1"}}},
]


@pytest.mark.parametrize("record", STORED, ids=[r["certificate"]["kind"] for r in STORED])
def test_stored_certificates_still_verify_and_round_trip(record):
    assert verify_certificate(record) and verify_certificate(json.dumps(record))
    assert from_json(record["certificate"]).to_json() == record["certificate"]
    assert describe(record["certificate"]).startswith(record["certificate"]["kind"])


def test_tampered_certificates_fail():
    sep, weights, outer, bracket, piece = (json.loads(json.dumps(r)) for r in STORED)
    sep["certificate"]["h"] = ["1"]  # <1, 0> = 0 is not above <1, 1> = 1
    weights["certificate"]["weights"] = {"1": "1"}  # vertex 1 is (1), not the tested (0)
    outer["certificate"]["over"] = "bouligand"  # still separates from (0, 1): this one stays valid
    bracket["tested"] = ["3"]  # above every vertex
    piece["certificate"]["witness"] = {"0": "1"}  # <(-1, -1), (1, 0)> < 0: outside the cone
    assert not any(verify_certificate(r) for r in (sep, weights, bracket, piece))
    assert verify_certificate(outer)
    wrong_status = dict(STORED[1], status="not_member")
    unknown_kind = dict(STORED[0], certificate={"kind": "oracle_said_so"})
    assert not verify_certificate(wrong_status) and not verify_certificate(unknown_kind)
    assert not verify_certificate(dict(STORED[0], certificate=None))


def test_every_certificate_kind_the_oracle_writes_is_defined_once():
    """Each kind the oracle writes is one dataclass whose JSON reproduces itself."""
    from nsverify.papers.cases import CASES, point

    seen = set()
    for case in CASES:
        v = nsverify.check_gradient(case.fn, point(case))
        c = from_json(v.certificate)
        assert c.to_json() == v.certificate and c.status == v.status
        seen.add(c.kind)
    assert seen <= set(KINDS) and {"convex_weights", "separating_direction"} <= seen
