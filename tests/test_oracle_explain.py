"""Verdicts in plain words, and what the oracle says about how it judged fn (issue #40, items 6 and 9).

``explain()`` opens with one sentence that answers the question, says which question was answered (the exact AD
at the float point) and how PyTorch's float gradient compares with it, and prints no internal words (interval
reprs, "outer bracket", nan, n/a).  Warnings point at the caller's line; grad mode disabled inside fn and random
draws (dropout in training mode) are named, with the fix, and recorded in ``stats["notes"]``.
"""

from __future__ import annotations

import math
import re
import warnings
from fractions import Fraction as F

import pytest
import torch
from torch import nn

import nsverify
from nsverify.oracle.verdict import EXPLAIN_LINES, EXPLAIN_WIDTH
from tests.test_oracle_known import _ReluRight  # Park et al.'s h: h'(0) = 1 (a custom backward)

D = torch.float64
INTERNAL = ("Ival[", "outer bracket", "inner bracket", "nan", "n/a", "candidate gradients")


def _plain(text: str) -> None:
    lines = text.splitlines()
    assert len(lines) <= EXPLAIN_LINES and max(map(len, lines)) <= EXPLAIN_WIDTH
    for word in INTERNAL:
        assert word not in text, (word, text)
    assert text.count("distance") <= 1, text  # one distance, never two side by side


def _lemma2(w):
    return torch.relu(w[0]) - torch.relu(-w[0])


def test_member_opens_with_one_sentence_naming_the_certificate():
    v = nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.tensor([0.0, 1.0], dtype=D), progress=False)
    text = v.explain()
    first = text.splitlines()[0]
    assert first == ("PyTorch's gradient is a Clarke subgradient of your function at this point (certificate: "
                     "convex_weights, re-checkable with nsverify.verify_certificate).")
    assert "kinks and ties at this point: 1 (relu 1)" in text
    assert "PyTorch's float64 gradient equals the exact AD in every entry (2)" in text
    assert nsverify.verify_certificate(v.to_json())
    _plain(text)


def test_not_member_names_the_nearest_element_and_one_distance():
    v = nsverify.check_gradient(_lemma2, torch.zeros(1, dtype=D), progress=False)
    lines = v.explain().splitlines()
    assert lines[0].startswith("PyTorch's gradient is NOT a Clarke subgradient of your function at this point "
                               "(certificate: separating_direction")
    assert lines[1] == "  the exact Clarke set excludes it; the nearest element is (1), at distance 1."
    _plain(v.explain())
    # a vector given by the caller: the subject changes, the distance is that of the given vector
    out = nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.zeros(2, dtype=D), ad=[2.0, 0.5],
                                  shortcuts=False, progress=False)
    text = out.explain()
    assert text.startswith("The vector you gave (ad=) is NOT a Clarke subgradient")
    assert "the nearest element is (1, 1/2), at distance 1." in text and math.isclose(out.distance, 1.0)
    assert "PyTorch's AD, evaluated exactly: (0, 0)" in text
    _plain(text)


def test_unknown_says_undecided_with_the_reason_and_what_to_try():
    v = nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.zeros(12, dtype=D), ad=[0.5] * 12,
                                max_pieces=3, on_limit="unknown", shortcuts=False, progress=False)
    assert v.status == "unknown"
    text = v.explain()
    assert text.startswith("Undecided: more than 3 pieces to enumerate around w")
    assert "max_pieces=100000" in text  # what to try
    _plain(text)
    out = nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.zeros(8, dtype=D), time_limit=0.0,
                                  on_limit="unknown", shortcuts=False, progress=False)
    assert out.status == "unknown" and math.isnan(out.distance)  # the field is unchanged; the text never says nan
    text = out.explain()
    assert text.startswith("Undecided: the time limit of 0 s ran out") and "time_limit=600" in text
    _plain(text)


def test_a_float32_network_says_which_question_was_answered():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    x, y = torch.randn(2, 1, 6, 6), torch.tensor([0, 2])
    v = nsverify.check_module(m, nn.functional.cross_entropy, x, y, progress=False)
    assert v.status == "member" and v.dtype == "float32"
    text = v.explain()
    assert text.splitlines()[0].startswith("PyTorch's gradient is a Clarke subgradient of your function at this "
                                           "point (certificate: park_theorem")
    assert "evaluated exactly at your float32 point" in text
    diff = re.search(r"PyTorch's float32 gradient differs from the exact AD by at most (\S+) \(largest absolute "
                     r"difference over 119 entries", text)
    assert diff is not None, text
    # the printed difference bounds the real one, computed here from the verdict's fields
    real = max(abs(F(a) - (e.lo if hasattr(e, "lo") else e)) for a, e in zip(v.ad, v.exact_ad))
    assert 0 < float(real) <= float(diff.group(1)) * 1.01
    assert "layers checked: 2" in text and "Park et al.'s Theorem" in text
    _plain(text)


def test_an_exact_float32_difference_is_printed_exactly():
    v = nsverify.check_gradient(lambda w: (torch.relu(w) * 0.1).sum(), torch.tensor([0.0, 0.3]), progress=False)
    text = v.explain()
    assert "PyTorch's float32 gradient differs from the exact AD by 1.49e-09 (largest absolute difference over 2 " \
           "entries, at entry 1)" in text
    _plain(text)


def test_an_overflowed_float_gradient_is_said_in_words():
    v = nsverify.check_gradient(lambda w: torch.exp(1000 * w).sum(), torch.ones(1, dtype=D), progress=False)
    text = v.explain()
    assert "PyTorch's float64 gradient has 1 non-finite entry (first: entry 0 = inf)" in text
    assert "e+437" in text


# ---------------------------------------------------------------------------------------------------------
# warnings point at the caller; no_grad inside fn; random draws
# ---------------------------------------------------------------------------------------------------------
def test_a_warning_points_at_the_callers_line():
    z = torch.zeros(1, dtype=D)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        v = nsverify.check_gradient(lambda w: torch.relu(w[0]) - _ReluRight.apply(w[0]), z, progress=False)
    (w,) = [x for x in got if "custom autograd.Function" in str(x.message)]
    assert w.filename == __file__  # the user's line, not nsverify/oracle/api.py
    assert v.stats["notes"] == [str(w.message)] and "note: " in v.explain()


def test_no_grad_inside_fn_is_named_not_blamed_on_a_custom_backward():
    def fn(w):
        with torch.no_grad():
            h = torch.relu(w)
        return (h * w).sum()

    with pytest.warns(UserWarning, match=r"fn disables grad mode .* around aten\.relu") as rec:
        v = nsverify.check_gradient(fn, torch.tensor([1.0, 2.0], dtype=D), progress=False)
    (msg,) = [str(r.message) for r in rec]
    assert "custom autograd.Function" not in msg and "Remove the no_grad from fn, or move it outside fn" in msg
    assert rec[0].filename == __file__
    assert v.exact_ad == (F(1), F(2))  # PyTorch's AD: h is a constant to it
    assert v.stats["notes"] == [msg]


def test_a_custom_function_alone_is_not_mistaken_for_no_grad():
    with pytest.warns(UserWarning, match="custom autograd.Function") as rec:
        nsverify.check_gradient(lambda w: _ReluRight.apply(w[0]) - torch.relu(w[0]), torch.zeros(1, dtype=D),
                                progress=False)
    assert not any("grad mode" in str(r.message) for r in rec)


def test_dropout_in_training_mode_is_named_once_with_the_fix():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4, 1)).double()
    x, y = torch.randn(5, 3, dtype=D), torch.randn(5, 1, dtype=D)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        v = nsverify.check_module(m, nn.functional.mse_loss, x, y, progress=False)
    drawn = [w for w in got if "draws random numbers" in str(w.message)]
    assert len(drawn) == 1 and drawn[0].filename == __file__
    msg = str(drawn[0].message)
    assert "Dropout" in msg and "model.eval()" in msg and "torch.manual_seed" in msg
    assert msg in v.stats["notes"] and "note: fn draws random numbers" in v.explain()
    assert m.training  # the user's model is left as it was
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        quiet = nsverify.check_module(m.eval(), nn.functional.mse_loss, x, y, progress=False)
    assert not [w for w in got if "random" in str(w.message)] and "notes" not in quiet.stats


def test_an_op_that_could_draw_but_does_not_is_not_named():
    """The fused attention kernels are tagged as random ops; with dropout_p=0 (eval mode) they draw nothing."""
    q = torch.tensor([[[1.0, 0.5], [0.0, -1.0]]], dtype=D)

    def fn(w):
        out = nn.functional.scaled_dot_product_attention(w.reshape(1, 2, 2), q, q, dropout_p=0.0)
        return torch.relu(out).sum()

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        v = nsverify.check_gradient(fn, q.reshape(-1), progress=False)
    assert not [w for w in got if "random" in str(w.message)] and "notes" not in v.stats


def test_the_ad_under_given_rules_is_named_as_such():
    v = nsverify.check_gradient(_lemma2, torch.zeros(1, dtype=D), rules={"relu": 1}, progress=False)
    text = v.explain()
    assert text.startswith("The AD with your rules (rules=) is NOT a Clarke subgradient")  # 1 + 1 = 2, not 1
    assert "is the AD with your rules at kinks and ties, evaluated exactly" in text
    _plain(text)


def _curved(w):
    return torch.relu(w[1] - w[0] ** 2) - torch.relu(-w[1] - w[0] ** 2)


def test_a_bracket_is_told_without_bracket_words():
    """Curved kinks: some pieces can be neither certified nor ruled out (an inner and an outer set)."""
    z = torch.zeros(2, dtype=D)
    v = nsverify.check_gradient(_curved, z, progress=False)
    assert v.status == "member" and not v.exact
    text = v.explain()
    assert "gradients certified next to this point: 2: (0, 0), (0, 1); 1 more might exist" in text
    _plain(text)
    text = nsverify.check_gradient(_curved, z, ad=[0.0, 1.5], progress=False).explain()
    assert text.startswith("Undecided: the gradients certified so far do not contain the tested vector")
    _plain(text)
    out = nsverify.check_gradient(_curved, z, ad=[5.0, 5.0], progress=False)
    text = out.explain()
    # a rigorous lower bound from the certificate's direction over every possible gradient: (10 - 2) / sqrt(2)
    assert "the distance to the Clarke set is at least 5.66." in text and out.distance >= 5.65
    _plain(text)
