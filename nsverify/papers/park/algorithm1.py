"""Algorithm 1 of Park, Chun and Lee (Sec. 3.2, Theorem 8) for one layer, from tensors with an autograd graph.

:func:`algorithm1_layer` collects the constraints of P_l: one per kink touch (the sign of AD's one-sided choice
times the gradient of the pre-activation in the layer's parameters, lines 3-9) and one per member of S_j \\ T_j
in a tied max-pool window (lines 10-17), and decides whether P_l is empty with :func:`~.lp.p_nonempty`.
Used by the training monitor (:mod:`.monitor`) and by :func:`~.premises.spec_premises`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from nsverify.papers.park.kinks import ad_side
from nsverify.papers.park.lp import PResult, p_nonempty
from nsverify.strategies.netspec import Activation


def pool_index_windows(per_sample_shape: tuple, kernel, stride, padding=0, dilation=1) -> torch.Tensor:
    """(n_windows, K) flat indices (per sample) of every max-pool window, row-major within a window; padding
    positions are -1. ``per_sample_shape``: (C, L) for 1-D pools, (C, H, W) for 2-D."""
    import torch.nn.functional as F

    dims = len(per_sample_shape) - 1
    ks, st_, pd, dl = (_ntuple(v, dims) for v in (kernel, stride, padding, dilation))
    idx = torch.arange(math.prod(per_sample_shape), dtype=torch.float64).reshape(1, *per_sample_shape)
    if dims == 1:
        idx = idx.unsqueeze(2)
        ks, st_, pd, dl = (1, ks[0]), (1, st_[0]), (0, pd[0]), (1, dl[0])
    padded = F.pad(idx, (pd[1], pd[1], pd[0], pd[0]), value=-1.0)
    cols = F.unfold(padded, ks, dilation=dl, stride=st_)  # (1, C*K, L)
    C, K = per_sample_shape[0], ks[0] * ks[1]
    cols = cols.reshape(C, K, -1).permute(0, 2, 1).reshape(-1, K)
    return cols.round().long()


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


@dataclass
class LayerCheck:
    """Algorithm 1 statistics and result for one layer at one point."""

    name: str
    kink_touches: int = 0
    windows: int = 0
    tied_windows: int = 0  # |S_j| >= 2
    tied_positive: int = 0  # |S_j| >= 2 and max > 0: the ties Algorithm 2 (Park et al., App. F) counts
    nontrivial_windows: int = 0  # S_j \ T_j non-empty
    sum_nontrivial: int = 0  # sum of |S_j \ T_j| over those windows
    unchecked: int = 0  # tied windows / kinks skipped because of the cap
    not_bouligand: int = 0  # kinks where AD's derivative is neither one-sided derivative
    p: PResult | None = None

    @property
    def avg_nontrivial(self) -> float | None:
        return self.sum_nontrivial / self.nontrivial_windows if self.nontrivial_windows else None

    @property
    def status(self) -> str:
        if self.not_bouligand:
            return "not_applicable"
        if self.unchecked:
            return "unknown"
        return "trivial" if self.p is None else self.p.status


def algorithm1_layer(
    name: str,
    y: torch.Tensor,
    alpha: torch.Tensor,
    act: Activation,
    params_l: list,
    params_upto: list,
    pool=None,
    max_checks: int = 4096,
    same_patch=None,
    tie_test: str = "exact",
) -> LayerCheck:
    """Algorithm 1 (Park, Chun and Lee, Sec. 3.2) for one layer.

    ``y``: pre-activations (batch first, autograd graph alive), ``alpha = rho(y)``; ``params_l``: the layer's
    parameters w_l; ``params_upto``: w_1..w_l (for T_j); ``pool``: None or (kernel, stride, padding, dilation)
    of the max pool applied to alpha (1-D pools act on the last axis of (B, C, L); a (B, N) alpha is pooled as (B, 1,
    N)). ``same_patch(b, i, k) -> bool``: optional fast path telling that entries i and k of sample b have
    identical receptive fields (then their AD gradients are equal). Kinks and tied windows beyond ``max_checks`` are
    counted as ``unchecked`` (verdict "unknown") instead of silently skipped. ``tie_test``: "exact" compares the AD
    gradients of tied entries bitwise (one backward per tied window); "jvp" (for training-size tensors)
    compares directional derivatives along two random directions computed for all entries at once.
    """
    out = LayerCheck(name)
    B = y.shape[0]
    yf = y.detach().reshape(B, -1)
    bps = [float(b) for b in act.breakpoints]
    constraints = []
    # --- kinks (lines 3-9)
    if bps:
        on = torch.zeros_like(yf, dtype=torch.bool)
        for b in bps:
            on |= yf == b
        kinks = on.nonzero().tolist()
        out.kink_touches = len(kinks)
        todo = kinks[:max_checks]
        out.unchecked += len(kinks) - len(todo)
        if todo:
            sides = []
            for b_, i in todo:
                s = ad_side(act, Fraction(float(yf[b_, i])))
                if s is None:
                    out.not_bouligand += 1
                sides.append(s)
            grads = _batched_grads(y, [(b_, i) for b_, i in todo], params_l)
            for s, g in zip(sides, grads):
                if s is not None:
                    constraints.append(g if s == "+" else -g)
    # --- pools (lines 10-17)
    if pool is not None:
        a = alpha.detach()
        shape = tuple(a.shape[1:]) if a.dim() > 2 else (1, a.shape[1])
        win = pool_index_windows(shape, *pool)
        af = a.reshape(B, -1)
        valid = win >= 0
        vals = torch.where(valid, af[:, win.clamp(min=0)], torch.tensor(float("-inf"), dtype=af.dtype))
        mx = vals.max(dim=2, keepdim=True).values
        tie = (vals == mx) & valid
        counts = tie.sum(dim=2)
        out.windows = int(counts.numel())
        tied = (counts >= 2).nonzero().tolist()
        out.tied_windows = len(tied)
        out.tied_positive = int(((counts >= 2) & (mx.squeeze(2) > 0)).sum())
        # AD derivative of rho at every entry (one cheap backward through the activation)
        rho_prime = torch.autograd.grad(alpha.sum(), y, retain_graph=True, allow_unused=True)[0]
        rho_prime = torch.zeros_like(y) if rho_prime is None else rho_prime.reshape(B, -1)
        pool_constraints = _pool_constraints_jvp if tie_test == "jvp" and tied else _pool_constraints_exact
        pool_constraints(out, constraints, alpha, win, tie, tied, rho_prime, params_l, params_upto, max_checks,
                         same_patch)
    if constraints:
        out.p = p_nonempty([c.tolist() for c in constraints])
    return out


def _pool_constraints_exact(
    out, constraints, alpha, win, tie, tied, rho_prime, params_l, params_upto, max_checks, same_patch
):
    """T_j by exact (bitwise) comparison of the AD gradients d alpha_i / d w_{1:l} (one batched backward per
    tied window)."""
    pending = []
    for b_, j in tied:
        members = win[j][tie[b_, j]].tolist()
        istar = members[0]  # PyTorch's max pool: first index in row-major window order
        rest = [
            i
            for i in members[1:]
            if not (rho_prime[b_, i] == 0 and rho_prime[b_, istar] == 0)
            and not (same_patch is not None and same_patch(b_, istar, i))
        ]
        if rest:
            pending.append((b_, istar, rest))
    budget = max_checks
    for b_, istar, rest in pending:
        if budget <= 0:
            out.unchecked += 1
            continue
        budget -= 1 + len(rest)
        entries = [(b_, istar)] + [(b_, i) for i in rest]
        g_up = _batched_grads(alpha, entries, params_upto)
        g_l = _batched_grads(alpha, entries, params_l)
        nontriv = [k for k in range(1, len(entries)) if not torch.equal(g_up[k], g_up[0])]
        if nontriv:
            out.nontrivial_windows += 1
            out.sum_nontrivial += len(nontriv)
            for k in nontriv:
                constraints.append(g_l[0] - g_l[k])


def _jvps(alpha, params, n_dirs=2, seed=0):
    """J v for ``n_dirs`` random directions v over ``params`` (all entries of alpha at once, by double
    backward): (n_dirs, *alpha.shape)."""
    gen = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(n_dirs):
        vs = [
            torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype).to(p.device) for p in params
        ]
        u = torch.zeros_like(alpha, requires_grad=True)
        gs = torch.autograd.grad(alpha, params, grad_outputs=u, create_graph=True, allow_unused=True)
        dot = sum((g * v).sum() for g, v in zip(gs, vs) if g is not None)
        if not isinstance(dot, torch.Tensor) or not dot.requires_grad:
            outs.append(torch.zeros_like(alpha))
            continue
        (jv,) = torch.autograd.grad(dot, u, retain_graph=True)
        outs.append(jv.detach())
    return torch.stack(outs)


def _pool_constraints_jvp(
    out, constraints, alpha, win, tie, tied, rho_prime, params_l, params_upto, max_checks, same_patch
):
    r"""T_j by randomized directional derivatives: members whose J v equals i*'s for two random directions v
    (bitwise) are taken as having the same AD gradient (identical computations give identical floats;
    different gradients are separated with probability 1). Constraints for S_j \ T_j use exact per-entry gradients."""
    B = alpha.shape[0]
    jv = _jvps(alpha, params_upto).reshape(2, B, -1)
    w = win.clamp(min=0)
    first = tie.float().argmax(dim=2, keepdim=True)  # i* position in the window
    jvw = jv[:, :, w]  # (2, B, nwin, K)
    jstar = torch.gather(jvw, 3, first.unsqueeze(0).expand(2, -1, -1, -1))
    same = (jvw == jstar).all(dim=0)
    rp = rho_prime[:, w]
    rp_star = torch.gather(rp, 2, first)
    both_flat = (rp == 0) & (rp_star == 0)
    is_star = torch.zeros_like(tie)
    is_star.scatter_(2, first, True)
    nontriv = tie & ~is_star & ~same & ~both_flat
    rows = nontriv.any(dim=2).nonzero().tolist()
    budget = max_checks
    for b_, j in rows:
        istar = int(w[j, first[b_, j, 0]])
        rest = [int(w[j, k]) for k in nontriv[b_, j].nonzero().flatten().tolist()]
        if same_patch is not None:
            rest = [i for i in rest if not same_patch(b_, istar, i)]
        if not rest:
            continue
        if budget <= 0:
            out.unchecked += 1
            continue
        budget -= 1 + len(rest)
        g_l = _batched_grads(alpha, [(b_, istar)] + [(b_, i) for i in rest], params_l)
        out.nontrivial_windows += 1
        out.sum_nontrivial += len(rest)
        for k in range(1, len(g_l)):
            constraints.append(g_l[0] - g_l[k])


def _batched_grads(t: torch.Tensor, entries: list, params: list) -> list:
    """Gradients of the scalars t[b, i] (flattened per sample) w.r.t. ``params``, as flat float64 vectors."""
    if not entries:
        return []
    if not params:
        return [torch.zeros(0, dtype=torch.float64) for _ in entries]
    B = t.shape[0]
    go = torch.zeros((len(entries), B, t[0].numel()), dtype=t.dtype, device=t.device)
    for k, (b, i) in enumerate(entries):
        go[k, b, i] = 1
    go = go.reshape(len(entries), *t.shape)
    try:
        gs = torch.autograd.grad(
            t, params, grad_outputs=go, retain_graph=True, is_grads_batched=True, allow_unused=True
        )
        flat = torch.cat(
            [
                (
                    g
                    if g is not None
                    else torch.zeros((len(entries), *p.shape), dtype=t.dtype, device=t.device)
                ).reshape(len(entries), -1)
                for g, p in zip(gs, params)
            ],
            dim=1,
        )
        return [r.to(torch.float64).cpu() for r in flat]
    except RuntimeError:  # some backward kernels have no batching rule: one backward per entry
        out = []
        for k in range(len(entries)):
            gs = torch.autograd.grad(t, params, grad_outputs=go[k], retain_graph=True, allow_unused=True)
            out.append(
                torch.cat(
                    [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(gs, params)]
                )
                .to(torch.float64)
                .cpu()
            )
        return out
