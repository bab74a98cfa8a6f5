"""Separable blocks: the product shortcut must give the plain enumeration's verdict and Bouligand set, every time.

Expected values come from two independent places: hand-derived Clarke sets (sums of one-dimensional kinks), and
the plain enumeration (``shortcuts=False``), which never uses the block decomposition.
"""

from __future__ import annotations

import copy
import json
import random
from fractions import Fraction

import pytest
import torch

import nsverify
from nsverify.reference.fuzz import random_program

F = Fraction


def _sep10(w):
    return (torch.relu(w) + 0.5 * torch.abs(w)).sum()  # each coordinate: slopes -1/2 (left) and 3/2 (right)


def test_ten_kinks_decided_per_block():
    w = torch.zeros(10, dtype=torch.float64)
    v = nsverify.check_gradient(_sep10, w, progress=False)
    assert v.status == "member" and v.exact and nsverify.verify_certificate(v)
    assert v.stats["blocks"] == 10 and v.stats["pieces"] == 20 and v.stats["product_pieces"] == 1024
    # the Bouligand set is {-1/2, 3/2}^10: 1024 vertices, listed as the product
    assert len(v.bouligand) == 1024 and set(v.bouligand) == set(
        tuple(F(-1, 2) if (i >> k) & 1 else F(3, 2) for k in range(10)) for i in range(1024))
    assert v.exact_ad == (F(0),) * 10  # relu'(0) = 0, abs'(0) = 0
    assert v.certificate["kind"] == "block_product"
    # the Clarke set is the box [-1/2, 3/2]^10: its corner is in, a point just outside one face is not
    assert nsverify.check_gradient(_sep10, w, ad=[1.5] * 10, progress=False).status == "member"
    out = nsverify.check_gradient(_sep10, w, ad=[1.5] * 9 + [1.625], progress=False)
    assert out.status == "not_member" and nsverify.verify_certificate(out)
    assert out.certificate["separating"]["block"] == 9 and abs(out.distance - 0.125) < 1e-12


def test_off_block_coordinates_are_fixed():
    """w2 sits at no kink: its gradient entry (3) is the same on every piece and must match exactly."""
    def f(w):
        return torch.relu(w[0]) + torch.abs(w[1]) + 3 * w[2]

    w = torch.tensor([0.0, 0.0, 5.0], dtype=torch.float64)
    v = nsverify.check_gradient(f, w, progress=False)
    assert v.status == "member" and v.stats["blocks"] == 2 and v.certificate["fixed"] == {"2": "3"}
    bad = nsverify.check_gradient(f, w, ad=[0.5, 0.0, 2.0], progress=False)
    assert bad.status == "not_member" and bad.certificate["separating"] == {"fixed": 2}
    assert nsverify.verify_certificate(bad)


def test_coupled_kinks_are_one_block():
    """relu(w0 - w1) ties the two coordinates: the plain enumeration decides (no block statistics)."""
    f = lambda w: torch.relu(w[0] - w[1]) + torch.relu(w[1])  # noqa: E731
    v = nsverify.check_gradient(f, torch.zeros(2, dtype=torch.float64), progress=False)
    assert "blocks" not in v.stats and v.status == "member"


def test_a_branch_that_changes_values_falls_back():
    """where(w0 >= 0, w1, -w1): the comparison at w0's tie (coordinate 0) flips a value used with w1's kink, so
    the pieces are not a product ((1, 1), (1, 2) on one side, (0, -1), (0, 0) on the other): the value check
    must refuse the decomposition, and the verdict is the plain one."""
    def f(w):
        return torch.where(w[0] >= 0, w[1], -w[1]) + torch.relu(w[1]) + torch.relu(w[0])

    w = torch.zeros(2, dtype=torch.float64)
    v = nsverify.check_gradient(f, w, progress=False)
    p = nsverify.check_gradient(f, w, progress=False, shortcuts=False)
    assert "blocks" not in v.stats
    assert v.status == p.status and set(v.bouligand) == set(p.bouligand)


def _separable_program(rng: random.Random, coupled: bool):
    """(fn, w, description): a sum of random programs on disjoint groups of coordinates (nsverify's fuzz
    generator inside each group), optionally plus a relu coupling two groups at its kink."""
    n = rng.randint(2, 6)
    perm = list(range(n))
    rng.shuffle(perm)
    cuts = sorted(rng.sample(range(1, n), rng.randint(1, min(3, n - 1))))
    groups = [perm[a:b] for a, b in zip([0] + cuts, cuts + [n])]
    w0 = [F(rng.randint(-4, 4), 2) for _ in range(n)]
    parts, descs = [], []
    for g in groups:
        fg, d = random_program(rng, len(g), [w0[i] for i in g], depth=rng.randint(1, 2))
        parts.append((fg, torch.tensor(g)))
        descs.append(f"{d}@{g}")
    if coupled:
        i, j = groups[0][0], groups[1][0]
        c = float(w0[j] - w0[i])
        parts.append((lambda x, c=c: torch.relu(x[0] - x[1] + c), torch.tensor([i, j])))
        descs.append(f"relu(w{i}-w{j}{c:+g})")

    def fn(w):
        return sum(f(w[ix]) for f, ix in parts)

    return fn, torch.tensor([float(x) for x in w0], dtype=torch.float64), " + ".join(descs)


def _agree(count: int, seed: int):
    rng, pick = random.Random(seed), random.Random(seed + 1)  # programs, tested vectors
    used = agreed = 0
    for _ in range(count):
        fn, w, desc = _separable_program(rng, coupled=rng.random() < 0.25)
        kw = dict(progress=False, max_pieces=4096, on_limit="unknown")
        v = nsverify.check_gradient(fn, w, **kw)
        p = nsverify.check_gradient(fn, w, shortcuts=False, **kw)
        assert v.status == p.status, desc
        assert set(v.bouligand) == set(p.bouligand), desc
        if v.status != "unknown":
            assert nsverify.verify_certificate(v), desc
        if "blocks" in v.stats:
            used += 1
            # tested vectors other than the exact AD: vertices' midpoints (member) and pushed-out points
            V = [tuple(x) for x in p.bouligand]
            for _ in range(3):
                a, b = pick.choice(V), pick.choice(V)
                mid = [(x + y) / 2 for x, y in zip(a, b)]
                k = pick.randrange(len(mid))
                far = [x + (7 if i == k else 0) for i, x in enumerate(mid)]
                for t in (mid, far):
                    vt = nsverify.check_gradient(fn, w, ad=[float(x) for x in t], **kw)
                    pt = nsverify.check_gradient(fn, w, ad=[float(x) for x in t], shortcuts=False, **kw)
                    assert vt.status == pt.status, (desc, t)
                    assert vt.status == "unknown" or nsverify.verify_certificate(vt), (desc, t)
                    agreed += 1
        agreed += 1
    return used, agreed


def test_blocks_agree_with_plain_enumeration_on_generated_programs():
    used, agreed = _agree(50, seed=11)
    assert used >= 12 and agreed >= 100  # the shortcut was really exercised


@pytest.mark.slow
def test_blocks_agree_with_plain_enumeration_many():
    used, agreed = _agree(300, seed=2024)
    assert used >= 60


def _tamper_cases(cert: dict):
    """Each tampering of a block_product certificate, aimed at the block its proof rests on."""
    sep = cert.get("separating", {})
    i = sep.get("block", 0)
    c = copy.deepcopy(cert)
    c["kind"] = "block_product_x"
    yield "renamed kind", c
    c = copy.deepcopy(cert)
    c["blocks"].pop(i)
    yield "dropped a block", c
    c = copy.deepcopy(cert)
    c["blocks"][i]["coords"] = c["blocks"][i - 1]["coords"]
    yield "overlapping blocks", c
    if cert["status"] == "member":
        c = copy.deepcopy(cert)
        b = c["blocks"][i]
        k = next(iter(b["weights"]))
        b["weights"][k] = "2"
        yield "changed weight", c
    if "h" in sep:
        c = copy.deepcopy(cert)
        c["separating"]["h"] = ["-" + x if not x.startswith("-") else x[1:] for x in sep["h"]]
        yield "flipped h", c
    c = copy.deepcopy(cert)
    c["blocks"][i]["vertices"] = [[str(F(x) + 4) for x in v] for v in c["blocks"][i]["vertices"]]
    yield "moved vertices", c
    c = copy.deepcopy(cert)
    c["status"] = "not_member" if c["status"] == "member" else "member"
    yield "flipped status", c
    c = copy.deepcopy(cert)
    c["blocks"][i]["coords"] = ["x"]
    yield "garbage coordinate", c


def test_tampered_block_certificates_are_rejected():
    w = torch.zeros(4, dtype=torch.float64)
    f = lambda w: (torch.relu(w) + torch.abs(w)).sum()  # noqa: E731
    for ad in (None, [1.0, 0.5, 0.0, 3.0]):
        v = nsverify.check_gradient(f, w, ad=ad, progress=False)
        d = v.to_dict()
        assert nsverify.verify_certificate(d)
        for what, cert in _tamper_cases(d["certificate"]):
            assert not nsverify.verify_certificate({**d, "certificate": cert}), what
        moved = dict(d, tested=[str(F(x) + F(1, 3)) for x in d["tested"]])
        # a member certificate binds the tested vector; the separating direction still separates the moved point
        assert bool(nsverify.verify_certificate(moved)) is (v.status == "not_member")
        assert nsverify.verify_certificate(json.dumps(d))


def test_block_certificates_replay_with_the_program():
    """With the program, every block vertex a certificate weighs is re-derived from its witness: a block vertex
    moved by hand (with the weights still reproducing the tested vector) is caught only by the replay."""
    w = torch.zeros(3, dtype=torch.float64)
    v = nsverify.check_gradient(_sep10, w, progress=False)
    assert nsverify.verify_certificate(v, fn=_sep10)
    out = nsverify.check_gradient(_sep10, w, ad=[1.5, 0.0, 1.625], progress=False)
    assert out.status == "not_member" and nsverify.verify_certificate(out, fn=_sep10)
    d = v.to_dict()
    c = copy.deepcopy(d["certificate"])
    # block 0's vertices are -1/2 and 3/2 with weights summing to the tested 0; claim 1/2 and -3/2 instead,
    # weights 3/4 and 1/4 still give 0: the JSON check trusts the vertices, the replay does not
    c["blocks"][0]["vertices"] = [["1/2"] if x == ["-1/2"] else ["-3/2"] for x in c["blocks"][0]["vertices"]]
    vs = [F(x[0]) for x in c["blocks"][0]["vertices"]]
    lam = {str(i): str(x) for i, x in enumerate([F(3, 2) / (vs[1] - vs[0]) * 0 + (-vs[1]) / (vs[0] - vs[1]),
                                                     vs[0] / (vs[0] - vs[1])])}
    c["blocks"][0]["weights"] = lam
    forged = {**d, "certificate": c}
    assert nsverify.verify_certificate(forged)
    check = nsverify.verify_certificate(forged, fn=_sep10)
    assert not check and "block 0" in check.reason
