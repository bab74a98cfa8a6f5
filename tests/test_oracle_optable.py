"""The one table of exact ops (nsverify.oracle.ops): what derives from it and what it holds. (That the op layer
has no import cycle is part of tests/test_layers.py's check of the whole package.)"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nsverify.oracle.ops import smooth
from nsverify.oracle.ops.record import ExactOp
from nsverify.oracle.ops.table import ANALYTIC_NODES, AREAS, RECORDS, TABLE
from nsverify.oracle.tensor import supported_ops

ROOT = Path(__file__).resolve().parents[1]

# The pre-redesign list: optrace.ANALYTIC_NODES as it was written by hand before the table (main at 322bca6).
OLD_ANALYTIC_NODES = frozenset({
    "AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "RsubBackward0", "RsubBackward1",
    "MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1", "NegBackward0", "ReciprocalBackward0",
    "ExpBackward0", "Expm1Backward0", "LogBackward0", "Log1pBackward0", "SqrtBackward0", "RsqrtBackward0",
    "SinBackward0", "CosBackward0", "TanhBackward0", "SigmoidBackward0", "ErfBackward0", "GeluBackward0",
    "SiluBackward0", "SoftmaxBackward0", "SafeSoftmaxBackward0", "LogSoftmaxBackward0", "LogsumexpBackward0",
    "MmBackward0", "AddmmBackward0", "BmmBackward0", "BaddbmmBackward0", "MvBackward0", "AddmvBackward0",
    "DotBackward0", "ConvolutionBackward0", "NativeLayerNormBackward0", "NativeBatchNormBackward0",
    "NativeGroupNormBackward0", "VarBackward0", "VarMeanBackward0", "SumBackward0", "SumBackward1",
    "MeanBackward0", "MeanBackward1", "CumsumBackward0", "ViewBackward0", "UnsafeViewBackward0",
    "ReshapeAliasBackward0", "PermuteBackward0", "TransposeBackward0", "TransposeBackward1", "TBackward0",
    "ExpandBackward0", "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "SqueezeBackward3",
    "SqueezeBackward4", "UnsqueezeBackward0", "CloneBackward0", "AliasBackward0", "ToCopyBackward0",
    "SelectBackward0", "SliceBackward0", "SplitBackward0", "SplitWithSizesBackward0", "UnbindBackward0",
    "CatBackward0", "StackBackward0", "RepeatBackward0", "FlipBackward0", "IndexBackward0", "GatherBackward0",
    "EmbeddingBackward0", "WhereBackward0", "MaskedFillBackward0", "NativeDropoutBackward0",
    "AvgPool2DBackward0", "AvgPool3DBackward0", "AdaptiveAvgPool2DBackward0", "AdaptiveAvgPool3DBackward0",
    "UpsampleNearest1DBackward0", "UpsampleNearest2DBackward0", "UpsampleNearest3DBackward0",
    "MseLossBackward0", "NllLossBackward0", "BinaryCrossEntropyWithLogitsBackward0",
    "ScaledDotProductFlashAttentionForCpuBackward0",
})
# The nodes the hand-written list had that no exact op records: their ops (cumsum, _reshape_alias,
# binary_cross_entropy_with_logits) are not evaluated by the interpreter, so an exact trace stops with
# UnsupportedOpError before optrace could ever meet the node -- dropping them changes no decision.
NODES_OF_UNEVALUATED_OPS = {"CumsumBackward0": "cumsum", "ReshapeAliasBackward0": "_reshape_alias",
                            "BinaryCrossEntropyWithLogitsBackward0": "binary_cross_entropy_with_logits"}

# Nodes of analytic ops added after the redesign (a new analytic record adds its nodes here).
ADDED_ANALYTIC_NODES: frozenset[str] = frozenset({
    "AtanBackward0", "CoshBackward0", "SinhBackward0",  # ops.singular (issue 35)
    # issue 36: soft_margin_loss, lerp (quantile's interpolation), index_select/index_add
    "SoftMarginLossBackward0", "LerpBackward0", "LerpBackward1", "IndexSelectBackward0", "IndexAddBackward0"})

# The pre-redesign SMOOTH_OPS tuple of ops_smooth.py; the derived one adds logsumexp, which that module always
# evaluated with enclosures but the hand-written tuple left out.
OLD_SMOOTH_OPS = ("exp", "log", "log1p", "expm1", "sin", "cos", "tanh", "sigmoid", "softplus", "sqrt", "rsqrt",
                  "reciprocal", "pow", "erf", "gelu", "silu", "log_softmax", "softmax", "nll_loss", "mse_loss")


def test_analytic_nodes_are_the_hand_written_list_less_the_nodes_of_ops_never_evaluated():
    assert ANALYTIC_NODES == (OLD_ANALYTIC_NODES - set(NODES_OF_UNEVALUATED_OPS)) | ADDED_ANALYTIC_NODES
    assert not set(NODES_OF_UNEVALUATED_OPS.values()) & set(supported_ops())


def test_smooth_ops_are_the_hand_written_list_and_logsumexp():
    assert [n for n in smooth.SMOOTH_OPS if n != "logsumexp"] == list(OLD_SMOOTH_OPS)
    assert "logsumexp" in smooth.SMOOTH_OPS and "logsumexp" in supported_ops()


def test_the_derived_nodes_are_pytorchs():
    # a few nodes read off PyTorch itself, so a record's nodes cannot drift from what autograd records
    x = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
    for y in (x.exp(), x.sum(), x.t(), torch.softmax(x, 1), torch.nn.functional.gelu(x), x @ x.t(), x.view(6)):
        assert type(y.grad_fn).__name__ in ANALYTIC_NODES
    for y in (x.relu(), x.abs(), torch.clamp(x, 0, 1), x.amax(1)):
        assert type(y.grad_fn).__name__ not in ANALYTIC_NODES


# names the dispatch table held before the redesign that are not ATen ops of this torch release (kept: a name that
# never reaches dispatch changes nothing, and the docs list logsigmoid among the ops refused by name)
NOT_ATEN_HERE = {"_to_dtype", "logsigmoid"}


def test_every_name_of_the_table_is_an_aten_op():
    missing = set()
    for name in TABLE.impls:
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if packet is None or (overload and overload not in packet.overloads()):
            missing.add(name)
    assert missing <= NOT_ATEN_HERE, f"not ATen ops (check the spelling and the overload): {missing - NOT_ATEN_HERE}"


def test_every_area_holds_records_and_each_name_is_in_one_record():
    assert all(recs for recs in AREAS.values())
    names = [n for rec in RECORDS for n in (*rec.names, *rec.backward_names)]
    assert len(names) == len(set(names)) == len(TABLE.impls)
    assert TABLE.refused() == sorted(n for rec in RECORDS if rec.refuses for n in rec.names)
    assert not set(TABLE.refused()) & set(supported_ops())


def test_a_backward_sits_with_its_forward():
    conv, = (r for r in RECORDS if "convolution" in r.names)
    assert conv.backward_names == ("convolution_backward",)
    assert TABLE.find("convolution_backward.default", "convolution_backward")[1] is conv


def test_a_name_given_twice_is_refused():
    from nsverify.oracle.ops.table import OpTable

    r = ExactOp(("neg",), lambda a: -a)
    with pytest.raises(ValueError, match="two exact records"):
        OpTable([r, ExactOp(("neg",), lambda a: a)])


@pytest.mark.parametrize("kw, match", [
    (dict(names="neg", forward=abs), "tuple of non-empty strings"),
    (dict(names=(), forward=abs), "at least one ATen name"),
    (dict(names=("neg",), forward=None), "forward must be a function"),
    (dict(names=("neg",), forward=abs, backward_names=("neg_backward",)), "backward_names and backward together"),
    (dict(names=("neg",), forward=abs, refuses="no", analytic=True), "refused"),
])
def test_a_malformed_record_says_what_to_fix(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        ExactOp(**kw)
