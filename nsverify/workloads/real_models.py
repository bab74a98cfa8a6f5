"""Issue 34's real-model workloads: the models users train, at the precision and size they train them.

:func:`build` returns ``(model, loss, x, y)`` for ``check_module(model, loss, x, y, wrt="parameters")``, the same
for the tests, the asv ratios (``asv_bench/ratios.py --area oracle_models``) and scripts.  Every model is built
from PyTorch's own modules (``nn.ReLU``, ``nn.MaxPool2d``, ``nn.Linear``, ``nn.LayerNorm``, ``nn.Embedding``,
``nn.BatchNorm2d``; :func:`nsverify.workloads.models.plain_layers`), in float32, with PyTorch's default
initialisation under ``torch.manual_seed(seed)`` (the caller's random state is left as it was):

* ``resnet18``: :class:`~nsverify.workloads.models.ResNet18` (3x3 stem, overlapping 3/2/1 max pool) on a batch of
  2x3x64x64 crops of scikit-learn's sample photographs (:func:`~nsverify.workloads.datasets.natural_crops`), with
  one dead stem channel (channel 0: conv weights 0, BatchNorm beta 0, so its ReLU input is exactly 0 everywhere,
  in eval and in training mode); BatchNorm's running statistics from two training passes over the batch
  (default eps and momentum), then eval mode (``train=True``: training mode, batch statistics);
* ``vgg11_bn``: VGG11 with BatchNorm on 2x3x32x32 crops, running statistics as above;
* ``opt_decoder``: :func:`~nsverify.workloads.models.opt_decoder` (4 layers, d = 256 x width, 4 heads, 512
  tokens) on 2x32 byte tokens of English text (:func:`~nsverify.workloads.datasets.text_tokens`), the loss
  :func:`~nsverify.workloads.models.next_token_loss`, one dead MLP unit (layer 0, unit 0:
  :func:`~nsverify.workloads.models.plant_dead_unit`).

``lemma2=True`` wraps the model in :func:`~nsverify.workloads.models.lemma2_logit` (a fresh parameter ``u`` = 0,
the term on logit 0): issue 34's target (e), where the right verdict is ``not_member``.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from nsverify.errors import NsverifyError
from nsverify.workloads import datasets, models

KINDS = ("resnet18", "vgg11_bn", "opt_decoder")


class Workload(NamedTuple):
    """What ``check_module`` takes: ``check_module(*workload, wrt="parameters")``."""

    model: nn.Module
    loss: Callable
    x: torch.Tensor
    y: torch.Tensor


def _bn_statistics(model: nn.Module, x: torch.Tensor, train: bool) -> None:
    """BatchNorm's running statistics from two training passes over ``x``, then the mode asked for."""
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(x)
    model.train(train)


def _cnn(kind: str, width: float, train: bool, plain: bool) -> Workload:
    size = 64 if kind == "resnet18" else 32
    x, y = datasets.natural_crops(2, seed=0, shape=(3, size, size))
    if kind == "resnet18":
        model = models.ResNet18(width)
        with torch.no_grad():  # the dead stem channel: conv output exactly 0, BN maps (0 - 0) * s + 0 to 0
            model.stem[0].weight[0].zero_()
            model.stem[1].bias[0] = 0.0
    else:
        model = models.vgg("vgg11", width, bn=True)
    if plain:
        models.plain_layers(model)
    _bn_statistics(model, x, train)
    return Workload(model, F.cross_entropy, x, y)


def _opt(width: float, train: bool) -> Workload:
    heads = 4
    d = heads * max(1, round(64 * width))
    model = models.plant_dead_unit(models.opt_decoder(layers=4, d=d, heads=heads, vocab=512, seq=32))
    x, y = datasets.text_tokens(2, 32, seed=0)
    model.train(train)  # no dropout or normalisation statistics: the same function in both modes
    return Workload(model, models.next_token_loss, x, y)


def build(kind: str, width: float = 1.0, train: bool = False, plain: bool = True, lemma2: bool = False,
          seed: int = 0, dtype: torch.dtype = torch.float32) -> Workload:
    """Issue 34's workload ``kind`` (one of :data:`KINDS`) at ``width`` (1 = full width); see the module's text.
    ``plain=False`` keeps the CNNs' switchable AD variants (:mod:`nsverify.ad`) in place of PyTorch's modules;
    ``dtype`` casts the built model and float inputs (the statistics are gathered in float32 first)."""
    if kind not in KINDS:
        raise NsverifyError(f"unknown real-model workload {kind!r}; choose from {', '.join(KINDS)}")
    if not 0 < width <= 8:
        raise NsverifyError(f"width={width}: give a width scale in (0, 8] (1 = the published model)")
    if kind == "opt_decoder" and not plain:
        raise NsverifyError("the OPT decoder is built from PyTorch's modules only; use plain=True")
    if dtype not in (torch.float32, torch.float64):
        raise NsverifyError(f"dtype={dtype}: use torch.float32 (the users' precision) or torch.float64")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        w = _opt(width, train) if kind == "opt_decoder" else _cnn(kind, width, train, plain)
        model = models.lemma2_logit(w.model) if lemma2 else w.model
    model.to(dtype)
    x = w.x.to(dtype) if w.x.is_floating_point() else w.x
    return Workload(model, w.loss, x, w.y)
