"""Algorithm 1 of Park, Chun and Lee (Sec. 3.2, Theorem 8) for one layer, from tensors with an autograd graph.

:func:`algorithm1_layer` collects the constraints of P_l: one per kink touch (the sign of AD's one-sided choice
times the gradient of the pre-activation in the layer's parameters, lines 3-9) and one per member of S_j \\ T_j
in a tied max-pool window (lines 10-17), and decides whether P_l is empty with the engine's one P_l test
(:func:`~.cone.p_nonempty`).  Used by the training monitor (:mod:`nsverify.papers.park.monitor`) and by Table 1's
premises (:mod:`nsverify.papers.park.premises`).  The exact form for the oracle, from exact traces, is
:mod:`.exact`.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import torch

from nsverify.oracle.park.cone import LayerCheck, p_nonempty
from nsverify.oracle.park.kinks import ad_side
from nsverify.registry.windows import pool_window_table
from nsverify.strategies.netspec import Activation


def pool_index_windows(per_sample_shape: tuple, kernel, stride=None, padding=0, dilation=1,
                       ceil_mode=False) -> torch.Tensor:
    """(n_windows, K) flat indices (per sample) of every max-pool window, channel by channel, row-major within a
    window (:func:`nsverify.registry.windows.pool_window_table`); padding positions are -1.
    ``per_sample_shape``: (C, L) for 1-D pools, (C, H, W) for 2-D. Cached per geometry (the training monitor
    asks at every step with ties); do not modify the result."""
    key = tuple(tuple(v) if isinstance(v, (tuple, list)) else v
                for v in (tuple(per_sample_shape), kernel, stride, padding, dilation, ceil_mode))
    return _pool_index_windows(*key)


@functools.lru_cache(maxsize=64)
def _pool_index_windows(per_sample_shape, kernel, stride, padding, dilation, ceil_mode) -> torch.Tensor:
    C, sp = per_sample_shape[0], tuple(per_sample_shape[1:])
    _, table = pool_window_table(sp, kernel, stride, padding, dilation, ceil_mode)
    t = torch.from_numpy(table)
    plane = 1
    for v in sp:
        plane *= v
    offs = torch.arange(C, dtype=torch.long).reshape(C, 1, 1) * plane
    return torch.where(t >= 0, t + offs, torch.full((), -1, dtype=torch.long)).reshape(-1, t.shape[1])


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
    windows: list | None = None,
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
    ``windows``: the (sample, window) pairs known to tie, e.g. from the training monitor's vectorised detection
    (window numbering of :func:`pool_index_windows`); only those are examined, and ``windows``/``tied_windows`` are
    left to the caller. Default: every window is examined and counted.
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
                    constraints.append(g if s.name == "right" else -g)
    # --- pools (lines 10-17)
    if pool is not None:
        a = alpha.detach()
        shape = tuple(a.shape[1:]) if a.dim() > 2 else (1, a.shape[1])
        win = pool_index_windows(shape, *pool).to(a.device)
        af = a.reshape(B, -1)
        neg = torch.tensor(float("-inf"), dtype=af.dtype, device=af.device)
        if windows is None:  # every window: find the tied ones
            valid = win >= 0
            vals = torch.where(valid, af[:, win.clamp(min=0)], neg)
            mx = vals.max(dim=2, keepdim=True).values
            many = ((vals == mx) & valid).sum(dim=2) >= 2
            out.windows = int(many.numel())
            out.tied_windows = int(many.sum())
            out.tied_positive = int((many & (mx.squeeze(2) > 0)).sum())
            windows = many.nonzero().tolist()
        rows = torch.tensor(windows, dtype=torch.long, device=a.device).reshape(-1, 2)
        wr = win[rows[:, 1]]  # (tied windows, K): each one's entries (flat per sample; -1: padding)
        vr = torch.where(wr >= 0, af[rows[:, :1], wr.clamp(min=0)], neg)
        tie = (vr == vr.max(dim=1, keepdim=True).values) & (wr >= 0)
        if len(windows):
            # AD derivative of rho at every entry (one cheap backward through the activation)
            rho_prime = torch.autograd.grad(alpha.sum(), y, retain_graph=True, allow_unused=True)[0]
            rho_prime = torch.zeros_like(yf) if rho_prime is None else rho_prime.reshape(B, -1)
            pool_constraints = _pool_constraints_jvp if tie_test == "jvp" else _pool_constraints_exact
            pool_constraints(out, constraints, alpha, rows, wr, tie, rho_prime, params_l, params_upto, max_checks,
                             same_patch)
    if constraints:
        out.p = p_nonempty([c.tolist() for c in constraints])
    return out


def _pool_constraints_exact(
    out, constraints, alpha, rows, wr, tie, rho_prime, params_l, params_upto, max_checks, same_patch
):
    """T_j by exact (bitwise) comparison of the AD gradients d alpha_i / d w_{1:l} (one batched backward per
    tied window). ``rows``: (sample, window) of the tied windows; ``wr``, ``tie``: their entries and tie masks."""
    pending = []
    for r, (b_, _j) in enumerate(rows.tolist()):
        members = wr[r][tie[r]].tolist()
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
    out, constraints, alpha, rows, wr, tie, rho_prime, params_l, params_upto, max_checks, same_patch
):
    r"""T_j by randomized directional derivatives: members whose J v equals i*'s for two random directions v
    (bitwise) are taken as having the same AD gradient (identical computations give identical floats;
    different gradients are separated with probability 1). Members whose AD derivative of rho is 0 together with
    i*'s, and members with an identical receptive field (``same_patch``), are in T_j without it: the directional
    derivatives are computed only when some member is left. Constraints for S_j \ T_j use exact per-entry
    gradients."""
    B, n = alpha.shape[0], rows.shape[0]
    ar = torch.arange(n, device=wr.device)
    b = rows[:, 0]
    first = tie.to(torch.uint8).argmax(dim=1)  # i*'s position in the window
    w = wr.clamp(min=0)
    istar = w[ar, first]
    rp = rho_prime[b[:, None], w]
    both_flat = (rp == 0) & (rho_prime[b, istar] == 0)[:, None]
    left = tie & ~both_flat
    left[ar, first] = False
    if same_patch is not None:
        rr, kk = left.nonzero().unbind(1)
        if getattr(same_patch, "vectorised", False):  # one call for every (i*, i) pair
            known = same_patch(b[rr], istar[rr], w[rr, kk])
        else:
            known = torch.tensor([bool(same_patch(int(b[r]), int(istar[r]), int(w[r, k])))
                                  for r, k in zip(rr.tolist(), kk.tolist())], dtype=torch.bool, device=left.device)
        left[rr[known], kk[known]] = False
    pending = {r: left[r].nonzero().flatten().tolist() for r in left.any(dim=1).nonzero().flatten().tolist()}
    if not pending:
        return
    jv = _jvps(alpha, params_upto).reshape(2, B, -1)
    budget = max_checks
    for r, rest in pending.items():
        b_, i_star = int(b[r]), int(istar[r])
        rest = [int(w[r, k]) for k in rest if not bool((jv[:, b_, w[r, k]] == jv[:, b_, i_star]).all())]
        if not rest:
            continue
        if budget <= 0:
            out.unchecked += 1
            continue
        budget -= 1 + len(rest)
        g_l = _batched_grads(alpha, [(b_, i_star)] + [(b_, i) for i in rest], params_l)
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
