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

from nsverify import kernels
from nsverify.ad import Activation
from nsverify.oracle.park.cone import LayerCheck, p_nonempty
from nsverify.oracle.park.kinks import ad_side
from nsverify.registry.windows import pool_window_table


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
    affine: AffineRows | None = None,
    kinks: bool = True,
    rho=None,
) -> LayerCheck:
    """Algorithm 1 (Park, Chun and Lee, Sec. 3.2) for one layer.

    ``y``: pre-activations (batch first, autograd graph alive), ``alpha = rho(y)``; ``params_l``: the layer's
    parameters w_l; ``params_upto``: w_1..w_l (for T_j); ``pool``: None or (kernel, stride, padding, dilation)
    of the max pool applied to alpha (1-D pools act on the last axis of (B, C, L); a (B, N) alpha is pooled as (B, 1,
    N)). ``same_patch(b, i, k) -> bool``: optional fast path telling that entries i and k of sample b have
    identical receptive fields (then their AD gradients are equal). Kinks and tied windows beyond ``max_checks`` are
    counted as ``unchecked`` (verdict "unknown") instead of silently skipped. ``tie_test``: "exact" compares the AD
    gradients of tied entries bitwise (one backward per tied window); "jvp" (for training-size tensors)
    compares directional derivatives along two random directions computed for all entries at once; "auto" (the
    training monitor's) decides each pair (i*, i) by the cheapest sufficient test that applies -- both AD
    derivatives of rho 0, the w_l block of the gradients read from the layer input's patches (``affine``),
    identical receptive fields (``same_patch``) -- and compares the exact AD gradients in w_{1:l} (batched
    backward passes) only for the pairs none of them decides (:func:`_pool_constraints_auto`; the counters
    ``tj_*`` of the result say how often each test decided).
    ``affine``: the :class:`AffineRows` of the layer when y = the output of one Conv/Linear layer whose weight
    (and bias) are exactly ``params_l``.
    ``windows``: the (sample, window) pairs known to tie (a list of pairs or an (n, 2) index tensor), e.g. from the
    training monitor's vectorised detection (window numbering of :func:`pool_index_windows`); only those are
    examined, and ``windows``/``tied_windows`` are left to the caller. Default: every window is examined and
    counted. ``kinks=False``: the caller knows that no pre-activation touches a kink (lines 3-9 are skipped).
    ``rho``: the activation as an elementwise callable (e.g. the module's ``forward``); then D^AD rho is taken
    by a backward pass through ``rho`` applied to the tied windows' entries only, instead of through all of
    ``alpha`` (the same derivative: rho acts entry by entry).
    """
    out = LayerCheck(name)
    B = y.shape[0]
    yf = y.detach().reshape(B, -1)
    bps = [float(b) for b in act.breakpoints]
    constraints = []
    # --- kinks (lines 3-9)
    if bps and kinks:
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
                    constraints.append(_sparse_row(g if s.name == "right" else -g))
    # --- pools (lines 10-17)
    if pool is not None:
        a = alpha.detach()
        shape = tuple(a.shape[1:]) if a.dim() > 2 else (1, a.shape[1])
        win = pool_index_windows(shape, *pool).to(a.device)
        af = a.reshape(B, -1)
        if windows is None:  # every window: find the tied ones
            neg = torch.tensor(float("-inf"), dtype=af.dtype, device=af.device)
            valid = win >= 0
            vals = torch.where(valid, af[:, win.clamp(min=0)], neg)
            mx = vals.max(dim=2, keepdim=True).values
            many = ((vals == mx) & valid).sum(dim=2) >= 2
            out.windows = int(many.numel())
            out.tied_windows = int(many.sum())
            out.tied_positive = int((many & (mx.squeeze(2) > 0)).sum())
            windows = many.nonzero().tolist()
        rows = torch.as_tensor(windows, dtype=torch.long, device=a.device).reshape(-1, 2)
        fused = (_fused_pairs(act, yf, af, rows, win) if tie_test == "auto" and rho is not None and len(rows)
                 else None)
        if fused is not None:  # the pairs (i*, i) from one C++ pass; then the same tests as below
            # the BatchNorm form needs the pre-activations and no kink rows in the layer
            y_pairs = fused[2] if affine is not None and affine.bn is not None and not constraints else None
            out.tj_flat += fused[0]
            _pairs_constraints(out, constraints, alpha, *fused[1], y_pairs, params_l, params_upto, max_checks,
                               same_patch, affine)
        elif len(rows):
            wr = win[rows[:, 1]]  # (tied windows, K): each one's entries (flat per sample; -1: padding)
            entries = (rows[:, :1], wr.clamp(min=0))  # index of the windows' entries into (B, per sample) tensors
            neg = torch.tensor(float("-inf"), dtype=af.dtype, device=af.device)
            vr = torch.where(wr >= 0, af[entries], neg)
            tie = (vr == vr.max(dim=1, keepdim=True).values) & (wr >= 0)
            y_win = yf[entries] if tie_test == "auto" else None  # pre-activations at the windows' entries
            if rho is not None and tie_test == "auto":  # AD derivative of rho at the windows' entries: (n, K)
                rho_prime = _rho_prime(act, rho, y_win)
            else:  # AD derivative of rho at every entry (one cheap backward through the activation)
                rho_prime = torch.autograd.grad(alpha.sum(), y, retain_graph=True, allow_unused=True)[0]
                rho_prime = torch.zeros_like(yf) if rho_prime is None else rho_prime.reshape(B, -1)
            if tie_test == "auto":
                if rho is None:
                    rho_prime = rho_prime[entries]
                # the BatchNorm form needs the pre-activations and no kink rows in the layer
                y_entries = y_win if affine is not None and affine.bn is not None and not constraints else None
                _pool_constraints_auto(out, constraints, alpha, rows, wr, tie, rho_prime, params_l, params_upto,
                                       max_checks, same_patch, affine, y_entries)
            else:
                pool_constraints = _pool_constraints_jvp if tie_test == "jvp" else _pool_constraints_exact
                pool_constraints(out, constraints, alpha, rows, wr, tie, rho_prime, params_l, params_upto,
                                 max_checks, same_patch)
    if constraints:
        out.rows = constraints
        out.p = p_nonempty(constraints, columns=sum(p.numel() for p in params_l))
    return out


def _rho_autograd(rho, y: torch.Tensor) -> torch.Tensor:
    """D^AD rho at the entries of y: one backward pass through ``rho`` applied to y (rho acts entry by entry)."""
    y = y.detach().requires_grad_(True)
    with torch.enable_grad():
        d = torch.autograd.grad(rho(y).sum(), y, allow_unused=True)[0]
    return torch.zeros_like(y) if d is None else d


def _rho_prime(act: Activation, rho, y: torch.Tensor) -> torch.Tensor:
    """D^AD rho at the entries of y. For an activation made of pieces of slope 0 or 1 (ReLU, ReLU6, HardTanh,
    clamp, identity) the entries off the breakpoints take their piece's slope -- what any AD computes there, in
    any dtype exactly -- and only entries exactly at a breakpoint (where AD's rule, PyTorch's or a variant's,
    decides) go through a backward pass of ``rho``; every other activation, and NaN entries, go through it all."""
    if act.key == "identity":
        return torch.ones_like(y)
    p = act.primitive()
    slopes = []
    for piece in (p.pieces if p is not None else ()):
        poly = tuple(piece.poly) if piece.poly is not None else None
        if poly is None or len(poly) > 2 or (len(poly) == 2 and poly[1] not in (0, 1)):
            return _rho_autograd(rho, y)
        slopes.append(float(poly[1]) if len(poly) == 2 else 0.0)
    if not slopes or bool(y.isnan().any()):
        return _rho_autograd(rho, y)
    bps = [float(b) for b in p.breakpoints]
    out = torch.full_like(y, slopes[-1])
    for b, slope in reversed(list(zip(bps, slopes))):
        out = torch.where(y < b, torch.tensor(slope, dtype=y.dtype, device=y.device), out)
    at = torch.zeros_like(y, dtype=torch.bool)
    for b in bps:
        at |= y == b
    if bool(at.any()):
        out[at] = _rho_autograd(rho, y[at])
    return out


def _sparse_row(g: torch.Tensor) -> dict:
    """A constraint row as ``{column: float}`` (its nonzero entries; the form :func:`~.cone.p_nonempty` reads)."""
    nz = g.nonzero().flatten()
    return dict(zip(nz.tolist(), g[nz].tolist()))


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
                constraints.append(_sparse_row(g_l[0] - g_l[k]))


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
            constraints.append(_sparse_row(g_l[0] - g_l[k]))


#: (channels, height, width, positions, geometry, device) -> (offsets, valid) of :meth:`AffineRows._patch_offsets`
_PATCH_OFFSETS: dict = {}




def patch_offsets(chw: tuple, plane: int, geom: tuple, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(offsets, valid)``, both (positions, K): the flat offsets in one sample of an input of shape ``chw`` =
    (C, H, W) of every output position's patch entries, in a convolution weight's (C, kh, kw) order (clamped into
    the image), and whether each entry lies in the image (else it reads the zero padding). ``plane``: output
    positions; ``geom`` = (Wo, (kh, kw), (sh, sw), (dh, dw), (ph, pw)). Computed once per geometry and shape (the
    patches of :class:`AffineRows`, the monitor's receptive fields)."""
    wo, (kh, kw), (sh, sw), (dh, dw), (ph, pw) = geom
    cin, h, w = chw
    key = (cin, h, w, plane, geom, device)
    hit = _PATCH_OFFSETS.get(key)
    if hit is None:
        dev = device
        pos = torch.arange(plane, device=dev)
        r = (pos // wo)[:, None] * sh + torch.arange(kh, device=dev) * dh - ph  # (P, kh)
        c = (pos % wo)[:, None] * sw + torch.arange(kw, device=dev) * dw - pw  # (P, kw)
        inside = ((r >= 0) & (r < h))[:, :, None] & ((c >= 0) & (c < w))[:, None, :]  # (P, kh, kw)
        flat = (r.clamp(0, h - 1) * w)[:, :, None] + c.clamp(0, w - 1)[:, None, :]
        offsets = (torch.arange(cin, device=dev) * (h * w))[None, :, None, None] + flat[:, None]
        valid = inside[:, None].expand(-1, cin, -1, -1)
        hit = (offsets.reshape(plane, -1).contiguous(), valid.reshape(plane, -1).contiguous())
        if len(_PATCH_OFFSETS) > 64:
            _PATCH_OFFSETS.clear()
        _PATCH_OFFSETS[key] = hit
    return hit


class AffineRows:
    r"""The rows pi_i = dy_i / dw_l of a layer whose pre-activation y is the output of one ``nn.Conv1d``/``Conv2d``
    (groups 1, zero padding) or ``nn.Linear`` with w_l = (weight, bias) flattened in this order: entry i's input
    patch in the weight slice of its output channel and a 1 at the channel's bias -- read from the layer input z,
    with no autograd (Park et al., Algorithm 1 line 4; the exact form from exact traces is
    :func:`nsverify.oracle.park.layers.pi_rows`). ``values(b, i, scale)`` gives ``scale * pi`` on the
    channel's own columns (``columns``), in z's dtype: what reverse-mode AD computes for the w_l block of
    d alpha_i / dw_l with ``scale`` = D^AD rho(y_i) (one product per entry, as in the convolution's weight
    backward for a one-hot cotangent).

    ``bn``: a ``BatchNorm1d``/``2d`` applied to the convolution's output (w_l = conv weight [, conv bias] [, BN
    weight, BN bias]), in training or evaluation mode. Then ``values`` are not single rows but serve the
    *differences* of two entries i*, i of one output channel c with equal pre-activations y_i* = y_i (a tied pair):
    in exact arithmetic d y_i*/dw_l - d y_i/dw_l = (gamma_c / sigma_c) (pi_i* - pi_i) on channel c's weight block
    and 0 on every other column -- the batch statistics' terms are common to both entries (the mean's) or carry the
    factor y_i* - y_i = 0 (the deviation's), and the bias, gamma and beta columns cancel (ours; proof sketch in
    docs/conditions.md). ``channel_sign`` gives sign(gamma_c) (+1 without affine BN); the positive factor
    |gamma_c| / sigma_c is left out, which scales the rows of each channel's block alike and so changes no cone
    of rows that live on that block alone."""

    def __init__(self, module: torch.nn.Module, z: torch.Tensor, y_shape: tuple, bn: torch.nn.Module | None = None):
        self.module, self.bias = module, module.bias is not None
        self.bn = bn
        B = y_shape[0]
        if isinstance(module, torch.nn.Linear):
            self.z, self.plane, self.geom = z.reshape(B, -1), 1, None
            self.k = self.z.shape[1]
        else:
            two = isinstance(module, torch.nn.Conv2d)
            self.z = (z if two else z.unsqueeze(2)).contiguous()
            sp = tuple(y_shape[2:]) if two else (1, y_shape[2])
            self.plane = sp[0] * sp[1]
            pair = (lambda v: tuple(v)) if two else (lambda v: (1, v[0]))
            pad = pair(module.padding) if two else (0, module.padding[0])
            self.geom = (sp[1], pair(module.kernel_size), pair(module.stride), pair(module.dilation), pad)
            self.k = module.in_channels * self.geom[1][0] * self.geom[1][1]
        self.weight_numel = module.weight.numel()

    @staticmethod
    def applies(module: torch.nn.Module, params_l: list, bn: torch.nn.Module | None = None) -> bool:
        """Does the patch form give exactly d y / d params_l for this module (followed by ``bn``)?"""
        if isinstance(module, torch.nn.Linear):
            ok = bn is None or isinstance(bn, torch.nn.BatchNorm1d)
        elif isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d)):
            ok = module.groups == 1 and not isinstance(module.padding, str) and module.padding_mode == "zeros"
            ok = ok and (bn is None or isinstance(bn, torch.nn.BatchNorm2d if isinstance(module, torch.nn.Conv2d)
                                                  else torch.nn.BatchNorm1d))
        else:
            return False
        want = [module.weight] + ([module.bias] if module.bias is not None else [])
        if bn is not None:
            ok = ok and bn.num_features == module.weight.shape[0]
            want += [p for p in (bn.weight, bn.bias) if p is not None]
        return ok and len(params_l) == len(want) and all(p is q for p, q in zip(params_l, want))

    @staticmethod
    def batched_input(module: torch.nn.Module, z: torch.Tensor) -> bool:
        """Is z a batched input of the form the patches are read from: (B, in) for Linear, (B, C, L) / (B, C, H, W)
        for Conv1d / Conv2d?"""
        dims = 2 if isinstance(module, torch.nn.Linear) else 3 if isinstance(module, torch.nn.Conv1d) else 4
        return z.dim() == dims

    def channel_sign(self, ch: torch.Tensor) -> torch.Tensor | None:
        """sign(gamma_c) of output channels ``ch`` (BatchNorm's weight; +1 without one), or None without ``bn``."""
        if self.bn is None:
            return None
        if self.bn.weight is None:
            return torch.ones(len(ch), dtype=self.z.dtype, device=ch.device)
        return torch.sign(self.bn.weight.detach()[ch]).to(self.z.dtype)

    def channels(self, i: torch.Tensor) -> torch.Tensor:
        return i // self.plane

    def values(self, b: torch.Tensor, i: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """(n, K [+ 1]): ``scale * (patch, 1)`` of entries (b, i) (flat per sample, the layer output's order)."""
        if self.geom is None:
            patch = self.z[b]
        else:  # the zero-padded patch: one gather from z at offsets (and an in-image mask) cached per position
            offsets, valid = self._patch_offsets()
            pos = i % self.plane
            zf = self.z.reshape(-1)
            patch = zf[b[:, None] * (zf.numel() // self.z.shape[0]) + offsets[pos]]
            patch = torch.where(valid[pos], patch, torch.zeros((), dtype=patch.dtype, device=patch.device))
        if self.bias:
            patch = torch.cat([patch, torch.ones((len(b), 1), dtype=patch.dtype, device=patch.device)], dim=1)
        return scale.to(patch.dtype)[:, None] * patch

    def pairs_equal(self, b: torch.Tensor, i: torch.Tensor, k: torch.Tensor, scale_i: torch.Tensor,
                    scale_k: torch.Tensor) -> torch.Tensor:
        """(n,) bool: are the w_l blocks ``scale_i * pi_i`` and ``scale_k * pi_k`` of entries (b, i) and (b, k)
        equal -- the same output channel and equal values -- or both all zero? :meth:`values` compared, or on the
        CPU the same products compared in one pass of the C++ kernel (no (n, K) temporaries)."""
        scale_i, scale_k = scale_i.to(self.z.dtype), scale_k.to(self.z.dtype)
        fused = self.z.dtype in (torch.float32, torch.float64) and kernels.cpu_kernels_ok(self.z)
        if self.geom is not None and fused:
            offsets, valid = self._patch_offsets()
            return torch.ops.nsverify_kernels.patch_pairs_equal(
                self.z, offsets, valid, b, i % self.plane, k % self.plane, self.channels(i), self.channels(k),
                scale_i.contiguous(), scale_k.contiguous(), self.bias)
        m = len(b)
        both = self.values(torch.cat([b, b]), torch.cat([i, k]), torch.cat([scale_i, scale_k]))
        vi, vk = both[:m], both[m:]
        zero = (vi == 0).all(dim=1) & (vk == 0).all(dim=1)
        return ((self.channels(i) == self.channels(k)) & (vi == vk).all(dim=1)) | zero

    def _patch_offsets(self):
        """``(offsets, valid)`` of :func:`patch_offsets` for this layer's input and geometry."""
        return patch_offsets(tuple(self.z.shape[1:]), self.plane, self.geom, self.z.device)

    def columns(self, ch: torch.Tensor) -> torch.Tensor:
        """(n, K [+ 1]): the columns of w_l that :meth:`values` of output channels ``ch`` fill."""
        cols = ch[:, None] * self.k + torch.arange(self.k, device=ch.device)
        if self.bias:
            cols = torch.cat([cols, (self.weight_numel + ch)[:, None]], dim=1)
        return cols


def _pool_constraints_auto(
    out, constraints, alpha, rows, wr, tie, rho_prime, params_l, params_upto, max_checks, same_patch, affine,
    y_entries=None,
):
    r"""T_j (Park et al., Algorithm 1 line 14) pair by pair (i*, i), each pair by the first sufficient test that
    decides it, all vectorised over the layer's tied windows:

    1. ``tj_flat``: D^AD rho is 0 at both entries -- both gradients in w_{1:l} are 0, i in T_j;
    2. ``tj_patch`` (``affine`` given): the w_l blocks of the two AD gradients, D^AD rho(y_i) pi_i, read from the
       layer input's patches (:class:`AffineRows`). Different blocks: i is not in T_j, and the constraint
       (line 15) is their difference -- no backward pass. Equal blocks decide membership only when w_l is all of
       w_{1:l} (the first layer); otherwise the earlier parameters' blocks may still differ. With a BatchNorm after
       the convolution (``affine.bn``) the test is the difference form of :class:`AffineRows`, used only in the
       first layer, with no kink rows (``y_entries`` given: the pre-activations at the windows' entries, (n, K))
       and for pairs of one channel with equal pre-activations; otherwise every pair goes on to the next tests;
    3. ``tj_field``: identical receptive fields (``same_patch``): i in T_j;
    4. ``tj_exact``: the exact AD gradients of i* and i in w_{1:l}, compared bitwise, one plain backward pass
       per entry (reverse-mode AD's own value for that scalar; few entries get here, and for them a loop is
       faster than a vmapped pass) -- the definition itself.

    Constraints, ``nontrivial_windows`` and the ``max_checks`` budget follow the windows' order as in
    :func:`_pool_constraints_exact`: a window whose S_j \ T_j is non-empty costs 1 + |S_j \ T_j|; windows past
    the budget count as ``unchecked``. ``rho_prime``: D^AD rho at the tied windows' entries, (windows, K) like
    ``wr`` (the other tests take the whole layer's)."""
    n = rows.shape[0]
    ar = torch.arange(n, device=wr.device)
    b = rows[:, 0]
    first = tie.to(torch.uint8).argmax(dim=1)  # i*'s position in the window (PyTorch: first index)
    w = wr.clamp(min=0)
    istar = w[ar, first]
    rp = rho_prime  # D^AD rho at the windows' entries, (n, K) like wr
    both_flat = (rp == 0) & (rp[ar, first] == 0)[:, None]
    left = tie.clone()
    left[ar, first] = False
    out.tj_flat += int((left & both_flat).sum())
    left &= ~both_flat
    rr, kk = left.nonzero().unbind(1)  # the pairs still open, window by window
    if not len(rr):
        return
    y_pairs = (y_entries[rr, first[rr]], y_entries[rr, kk]) if y_entries is not None else None
    _pairs_constraints(out, constraints, alpha, rr, b[rr], istar[rr], w[rr, kk], rp[rr, first[rr]], rp[rr, kk],
                       y_pairs, params_l, params_upto, max_checks, same_patch, affine)


def _fused_pairs(act: Activation, yf: torch.Tensor, af: torch.Tensor, rows: torch.Tensor, win: torch.Tensor):
    """The head of :func:`_pool_constraints_auto` in one C++ pass (``pool_tie_pairs``) where it gives the same
    pairs: CPU float32/float64 tensors and an activation of pieces of slope 0 or 1 (:func:`_rho_prime`'s fast
    form). ``(both-flat pairs, (rr, bb, si, ii, rho'(y_si), rho'(y_ii)), (y_si, y_ii))`` -- or None, also when a
    member's pre-activation sits at a breakpoint or is NaN (AD's own rule decides there: the PyTorch path)."""
    if (yf.dtype not in (torch.float32, torch.float64) or af.dtype != yf.dtype
            or not kernels.cpu_kernels_ok(yf, af)):
        return None
    if act.key == "identity":
        bps, slopes = [], [1.0]
    else:
        p = act.primitive()
        if p is None:
            return None
        slopes = []
        for piece in p.pieces:
            poly = tuple(piece.poly) if piece.poly is not None else None
            if poly is None or len(poly) > 2 or (len(poly) == 2 and poly[1] not in (0, 1)):
                return None
            slopes.append(float(poly[1]) if len(poly) == 2 else 0.0)
        bps = [float(b) for b in p.breakpoints]
        if not slopes or len(slopes) != len(bps) + 1:
            return None
    ints, vals, stats = torch.ops.nsverify_kernels.pool_tie_pairs(af, yf, rows, win, bps, slopes)
    flat, fallback = stats.tolist()
    if fallback:
        return None
    rr, bb, si, ii = ints.unbind(1)
    rp_s, rp_i, y_s, y_i = vals.unbind(1)
    return flat, (rr, bb, si, ii, rp_s, rp_i), (y_s, y_i)


def _pairs_constraints(out, constraints, alpha, rr, bb, si, ii, rp_s, rp_i, y_pairs, params_l, params_upto,
                       max_checks, same_patch, affine):
    """The tail of :func:`_pool_constraints_auto`: tests 2-4 and the constraints for the open pairs (i*, i) =
    (bb, si), (bb, ii) of windows rr (in window order), with D^AD rho rp_s, rp_i at them and, for the BatchNorm
    form, their pre-activations ``y_pairs`` = (y_si, y_ii) (else None)."""
    if not len(rr):
        return
    member = torch.zeros(len(rr), dtype=torch.bool, device=rr.device)
    outside = torch.zeros_like(member)
    if affine is not None:
        cs, ci = affine.channels(si), affine.channels(ii)
    if affine is not None and affine.bn is not None:
        # BatchNorm after the conv: the difference form needs equal pre-activations, gamma_c != 0, one channel and
        # no other rows in the layer (first layer, no kink rows); else the exact test decides every pair
        sgn = affine.channel_sign(cs)
        ok = (len(params_upto) == len(params_l) and y_pairs is not None and bool((cs == ci).all())
              and bool((y_pairs[0] == y_pairs[1]).all()) and bool((sgn != 0).all()))
        if not ok:
            affine = None
    if affine is not None:
        scale_s, scale_i = rp_s, rp_i
        if affine.bn is not None:  # the rows' common factor sign(gamma_c) (see AffineRows)
            scale_s, scale_i = scale_s * sgn, scale_i * sgn
        equal = affine.pairs_equal(bb, si, ii, scale_s, scale_i)
        outside = ~equal
        if len(params_upto) == len(params_l):
            member = equal
        out.tj_patch += int((member | outside).sum())
    open_ = ~(member | outside)
    if same_patch is not None and bool(open_.any()):
        sel = open_.nonzero().flatten()
        if getattr(same_patch, "vectorised", False):
            known = same_patch(bb[sel], si[sel], ii[sel])
        else:
            known = torch.tensor([bool(same_patch(int(bb[q]), int(si[q]), int(ii[q]))) for q in sel.tolist()],
                                 dtype=torch.bool, device=sel.device)
        member[sel[known]] = True
        out.tj_field += int(known.sum())
        open_ = ~(member | outside)
    # patch rows of the pairs decided outside T_j by their w_l blocks (float64, AD's own values)
    patch_rows = {}
    if bool(outside.any()):
        q = outside.nonzero().flatten()
        vs, vi = affine.values(bb[q], si[q], scale_s[q]), affine.values(bb[q], ii[q], scale_i[q])
        vs, vi = vs.to(torch.float64), vi.to(torch.float64)
        # row = pi-block of i* minus that of i: one channel -> the same columns, vs - vi; two channels -> disjoint
        # columns, vs on i*'s and 0 - vi on i's; zeros dropped, in i*'s columns' order then i's
        one = (cs[q] == ci[q])[:, None]
        cols = torch.cat([affine.columns(cs[q]), affine.columns(ci[q])], dim=1)
        vals = torch.cat([torch.where(one, vs - vi, vs), 0.0 - vi], dim=1)
        keep = vals != 0
        keep[:, vs.shape[1]:] &= ~one
        nz_cols, nz_vals = cols[keep].tolist(), vals[keep].tolist()
        at = 0
        for qq, n_nz in zip(q.tolist(), keep.sum(dim=1).tolist()):
            patch_rows[qq] = dict(zip(nz_cols[at:at + n_nz], nz_vals[at:at + n_nz]))
            at += n_nz
    # the exact test for the rest: entries (b, i*) and (b, i) of the open pairs, window by window, within budget
    pair_r = rr.tolist()
    open_pairs = open_.nonzero().flatten().tolist()
    exact_rows = {}
    if open_pairs:
        entries, index, budget = [], {}, max_checks
        for q in open_pairs:
            if len(entries) >= budget:
                break
            for e in ((int(bb[q]), int(si[q])), (int(bb[q]), int(ii[q]))):
                if e not in index:
                    index[e] = len(entries)
                    entries.append(e)
        out.tj_exact += sum(1 for q in open_pairs if (int(bb[q]), int(ii[q])) in index)
        tail = len(params_upto) - len(params_l)
        same_tail = all(p is q for p, q in zip(params_upto[tail:], params_l))
        g_up = _batched_grads(alpha, entries, params_upto, batched=False)
        n_l = sum(p.numel() for p in params_l)
        for q in open_pairs:
            e_s, e_i = (int(bb[q]), int(si[q])), (int(bb[q]), int(ii[q]))
            if e_i not in index:
                exact_rows[q] = None  # past the budget: unchecked
                continue
            gs, gi = g_up[index[e_s]], g_up[index[e_i]]
            if torch.equal(gs, gi):
                member[q] = True
                continue
            if same_tail:
                d = gs[gs.numel() - n_l:] - gi[gi.numel() - n_l:]
            else:
                g_l = _batched_grads(alpha, [e_s, e_i], params_l, batched=False)
                d = g_l[0] - g_l[1]
            exact_rows[q] = _sparse_row(d)
    # constraints in window order, with the budget of the other tests
    by_window: dict = {}
    for q in sorted(patch_rows.keys() | exact_rows.keys()):  # only the pairs outside T_j (or unchecked) matter
        by_window.setdefault(pair_r[q], []).append(patch_rows[q] if q in patch_rows else exact_rows[q])
    budget = max_checks
    for r in sorted(by_window):
        rest = by_window[r]
        if budget <= 0 or any(row is None for row in rest):
            out.unchecked += 1
            continue
        budget -= 1 + len(rest)
        out.nontrivial_windows += 1
        out.sum_nontrivial += len(rest)
        constraints.extend(rest)


def _batched_grads(t: torch.Tensor, entries: list, params: list, batched: bool = True) -> list:
    """Gradients of the scalars t[b, i] (flattened per sample) w.r.t. ``params``, as flat float64 vectors: one
    batched backward pass (``is_grads_batched``), or with ``batched=False`` one plain backward pass per entry."""
    if not entries:
        return []
    if not params:
        return [torch.zeros(0, dtype=torch.float64) for _ in entries]
    B = t.shape[0]
    if batched:
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
            pass
    out = []
    for b, i in entries:
        go = torch.zeros_like(t)
        go.view(B, -1)[b, i] = 1
        gs = torch.autograd.grad(t, params, grad_outputs=go, retain_graph=True, allow_unused=True)
        out.append(
            torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(gs, params)])
            .to(torch.float64)
            .cpu()
        )
    return out
