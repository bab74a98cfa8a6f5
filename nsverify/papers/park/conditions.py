"""Park, Chun and Lee's correctness conditions as library checks (002 L75-105, Table 1 L21-38, L130-190).

* :func:`detect` -- Condition 1 / Condition 2 structure of a model (a ``torch.nn.Module`` traced with
  torch.fx, or a :class:`~nsverify.strategies.netspec.NetSpec`): per nonsmooth layer the bias kind (distinct /
  shared / none), the pooling (none / trivial / non-trivial), the activation and its common lambda (from the
  registry), and which theorems' structural premises hold.
* :func:`common_lambda` -- the lambda with D^AD rho = lambda D^- rho + (1 - lambda) D^+ rho at every kink, or
  None.
* :func:`full_column_rank` -- Theorem 5's test, exact over the rationals (modular rank certificate, with an
  exact ``Fraction`` elimination fallback).
* :func:`p_nonempty` -- Algorithm 1's emptiness test with a *bounded* LP (the printed LP is unbounded whenever
  feasible: Park et al., Algorithm 1) and an exact check of the returned point, or an exact Farkas certificate of
  emptiness; otherwise "unknown".
* :func:`algorithm1_layer` -- the constraints of Algorithm 1 for one layer, from torch tensors carrying an
  autograd graph (used by the training monitor and by :func:`spec_premises`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import NsverifyError, UnsupportedOpError
from nsverify.rational import rank as rational_rank
from nsverify.rational import solve_any
from nsverify.strategies.netspec import Activation, NetSpec

# ----------------------------------------------------------------------------------------------------------
# activations and lambda
# ----------------------------------------------------------------------------------------------------------
#: torch module classes -> registry activation names (PyTorch's own AD convention)
MODULE_ACTIVATIONS = {
    "ReLU": "relu",
    "ReLU6": "relu6",
    "Hardtanh": "hardtanh",
    "Hardsigmoid": "hardsigmoid",
    "LeakyReLU": "leaky_relu",
    "Hardswish": "hardswish",
    "ELU": "elu",
    "SELU": "selu",
}
FUNCTION_ACTIVATIONS = {
    "relu": "relu",
    "relu_": "relu",
    "relu6": "relu6",
    "hardtanh": "hardtanh",
    "hardsigmoid": "hardsigmoid",
    "leaky_relu": "leaky_relu",
    "hardswish": "hardswish",
    "elu": "elu",
    "selu": "selu",
}
SMOOTH_MODULES = {
    "Tanh",
    "Sigmoid",
    "GELU",
    "SiLU",
    "Softplus",
    "Identity",
    "Dropout",
    "Flatten",
    "Unflatten",
    "AvgPool1d",
    "AvgPool2d",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "Softmax",
    "LogSoftmax",
}
AFFINE_MODULES = {"Linear", "Conv1d", "Conv2d", "BatchNorm1d", "BatchNorm2d"}
POOL_MODULES = {"MaxPool1d", "MaxPool2d"}


def common_lambda(act: Activation | str) -> Fraction | None:
    """The lambda in [0, 1] shared by every kink of ``act`` (Theorem 4/6 premise), or None when none exists.

    At a kink b with one-sided derivatives D^-, D^+ and AD derivative d: lambda_b = (d - D^+) / (D^- - D^+).
    An activation without kinks (identity) returns 1 (any lambda works)."""
    act = Activation(act) if isinstance(act, str) else act
    p = act.primitive()
    if p is None:
        return Fraction(1)
    lams = set()
    for b, d in zip(p.breakpoints, act.ad_derivatives()):
        left, right = (Fraction(v) for v in p.one_sided(b))
        if left == right:
            continue
        lam = (Fraction(d) - right) / (left - right)
        if not 0 <= lam <= 1:
            return None
        lams.add(lam)
    if len(lams) > 1:
        return None
    return lams.pop() if lams else Fraction(1)


def ad_side(act: Activation, y: Fraction) -> str | None:
    """'-' or '+' when AD's derivative at the kink y equals the left/right derivative, None otherwise."""
    p = act.primitive()
    d = dict(zip(p.breakpoints, act.ad_derivatives()))[Fraction(y)]
    left, right = (Fraction(v) for v in p.one_sided(Fraction(y)))
    if d == left:
        return "-"
    if d == right:
        return "+"
    return None


# ----------------------------------------------------------------------------------------------------------
# structure (Conditions 1 and 2)
# ----------------------------------------------------------------------------------------------------------
@dataclass
class LayerInfo:
    name: str
    activation: str  # registry name or variant key; "identity" for none
    bias: str  # "distinct" | "shared" | "none"
    pool: str  # "none" | "trivial" | "nontrivial"
    fully_connected: bool
    lam: Fraction | None = None

    @property
    def nonsmooth(self) -> bool:
        return bool(Activation(self.activation).breakpoints)


@dataclass
class ModelConditions:
    layers: list
    batch: int | None = None
    notes: list = field(default_factory=list)

    @property
    def relevant(self):
        """Layers with a non-differentiable activation or a non-trivial max pool."""
        return [L for L in self.layers if L.nonsmooth or L.pool == "nontrivial"]

    @property
    def condition1(self) -> bool:
        return all(L.pool in ("none", "trivial") for L in self.layers)

    @property
    def distinct_bias(self) -> bool:
        return all(L.bias == "distinct" for L in self.layers if L.nonsmooth)

    @property
    def shared_bias(self) -> bool:
        return all(L.bias in ("distinct", "shared") for L in self.layers if L.nonsmooth)

    @property
    def trivial_pools(self) -> bool:
        return all(L.pool != "nontrivial" for L in self.layers)

    @property
    def common_lambda(self) -> bool:
        return all(L.lam is not None for L in self.layers if L.nonsmooth)

    @property
    def fully_connected(self) -> bool:
        return all(L.fully_connected for L in self.layers)

    def theorems(self) -> dict:
        """Structural premises of Park's theorems (the data-dependent ones are checked separately)."""
        clarke_proxies = all(_proxy_in_clarke(L.activation) for L in self.layers)
        return {
            "theorem1": self.condition1 and self.distinct_bias and self.batch == 1 and clarke_proxies,
            "theorem4": self.condition1 and self.distinct_bias and self.common_lambda,
            "theorem5_structure": self.condition1 and self.fully_connected and clarke_proxies,
            "theorem6": self.shared_bias and self.trivial_pools and self.common_lambda,
            "theorem8_structure": all(_proxy_bouligand(L.activation) for L in self.layers),
        }

    def to_json(self) -> dict:
        return {
            "layers": [
                dict(
                    name=L.name,
                    activation=L.activation,
                    bias=L.bias,
                    pool=L.pool,
                    fully_connected=L.fully_connected,
                    lam=None if L.lam is None else str(L.lam),
                )
                for L in self.layers
            ],
            "batch": self.batch,
            "theorems": self.theorems(),
            "notes": self.notes,
        }


def _proxy_in_clarke(key: str) -> bool:
    act = Activation(key)
    p = act.primitive()
    if p is None:
        return True
    for b, d in zip(p.breakpoints, act.ad_derivatives()):
        left, right = (Fraction(v) for v in p.one_sided(b))
        if not min(left, right) <= Fraction(d) <= max(left, right):
            return False
    return True


def _proxy_bouligand(key: str) -> bool:
    act = Activation(key)
    p = act.primitive()
    return p is None or all(ad_side(act, b) is not None for b in p.breakpoints)


def detect(model, batch: int | None = None) -> ModelConditions:
    """Condition 1/2 structure of a NetSpec or of an nn.Module (traced with torch.fx)."""
    if isinstance(model, NetSpec):
        return _detect_spec(model)
    if isinstance(model, torch.nn.Module):
        return _detect_module(model, batch)
    raise NsverifyError(f"detect() takes a torch.nn.Module or a NetSpec, not {type(model).__name__}")


def _detect_spec(spec: NetSpec) -> ModelConditions:
    layers = []
    for i, L in enumerate(spec.layers):
        bias = L.bias_mode
        pool = "none" if L.pool is None else ("trivial" if L.pool.trivial else "nontrivial")
        fc = L.kind == "linear" and not (L.residual or L.tied or L.frozen)  # Thm 5: tau = A z (+ b), A free
        layers.append(LayerInfo(f"layer{i}", L.act, bias, pool, fc, common_lambda(L.act)))
    return ModelConditions(layers, spec.batch)


def _detect_module(model: torch.nn.Module, batch) -> ModelConditions:
    import operator

    import torch.fx as fx
    import torch.nn.functional as F

    try:
        gm = fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 -- fx raises many types
        raise UnsupportedOpError(
            f"cannot trace {type(model).__name__} with torch.fx ({type(exc).__name__}: {exc}). "
            f"Remove data-dependent Python control flow from forward(), or check a NetSpec instead."
        ) from exc
    mods = dict(gm.named_modules())
    layers: list[LayerInfo] = []
    cur = {"bias": "none", "fc": True, "name": None}
    pass_fns = {
        operator.add,
        torch.add,
        torch.flatten,
        operator.getitem,
        torch.cat,
        F.dropout,
        F.adaptive_avg_pool2d,
        F.avg_pool2d,
        torch.tanh,
        torch.sigmoid,
        F.gelu,
        operator.mul,
        torch.mean,
        F.log_softmax,
        F.softmax,
    }
    for node in gm.graph.nodes:
        if node.op == "call_module":
            m = mods[node.target]
            cls = type(m).__name__
            if cls in ("Linear", "Conv1d", "Conv2d"):
                has_bias = m.bias is not None
                cur = {
                    "bias": ("distinct" if cls == "Linear" else "shared") if has_bias else "none",
                    "fc": cls == "Linear",
                    "name": node.target,
                }
            elif cls in ("BatchNorm1d", "BatchNorm2d"):
                if m.affine:
                    cur["bias"] = "distinct" if (cls == "BatchNorm1d" and cur["fc"]) else "shared"
                cur["fc"] = False  # Theorem 5 needs plain fully connected layers
            elif cls in MODULE_ACTIVATIONS:
                layers.append(
                    LayerInfo(
                        node.target,
                        MODULE_ACTIVATIONS[cls],
                        cur["bias"],
                        "none",
                        cur["fc"],
                        common_lambda(MODULE_ACTIVATIONS[cls]),
                    )
                )
            elif cls in POOL_MODULES:
                k = _pair(m.kernel_size)
                s = _pair(m.stride if m.stride is not None else m.kernel_size)
                trivial = all(v == 1 for v in k + s) and not any(_pair(m.padding))
                _attach_pool(layers, node.target, "trivial" if trivial else "nontrivial", cur)
            elif cls in SMOOTH_MODULES:
                continue
            else:
                raise UnsupportedOpError(_unsupported(node.target, cls))
        elif node.op == "call_function":
            fname = getattr(node.target, "__name__", str(node.target))
            if fname in FUNCTION_ACTIVATIONS:
                name = FUNCTION_ACTIVATIONS[fname]
                layers.append(LayerInfo(node.name, name, cur["bias"], "none", cur["fc"], common_lambda(name)))
            elif fname in ("max_pool1d", "max_pool2d", "max_pool1d_with_indices", "max_pool2d_with_indices"):
                _attach_pool(layers, node.name, "nontrivial", cur)
            elif node.target in pass_fns or fname in (
                "add",
                "flatten",
                "getitem",
                "relu_",
                "view",
                "reshape",
                "mean",
                "size",
                "cat",
                "mul",
                "truediv",
            ):
                continue
            elif fname in ("abs", "maximum", "minimum", "amax", "max", "clamp", "clip", "sort", "topk"):
                raise UnsupportedOpError(_unsupported(node.name, fname))
        elif node.op == "call_method":
            if node.target in ("relu", "relu_"):
                layers.append(
                    LayerInfo(node.name, "relu", cur["bias"], "none", cur["fc"], common_lambda("relu"))
                )
            elif node.target in ("max", "amax", "abs", "clamp", "sort", "topk"):
                raise UnsupportedOpError(_unsupported(node.name, node.target))
    return ModelConditions(layers, batch)


def _attach_pool(layers, name, kind, cur):
    if layers and layers[-1].pool == "none":
        layers[-1].pool = kind
    else:  # a pool without a preceding activation in this layer: identity activation
        layers.append(LayerInfo(name, "identity", cur["bias"], kind, cur["fc"], Fraction(1)))


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _unsupported(where, what) -> str:
    return (
        f"layer {where!r} ({what}) is not supported by nsverify's Park-condition checks. Supported: "
        f"{', '.join(sorted(AFFINE_MODULES | POOL_MODULES | set(MODULE_ACTIVATIONS) | SMOOTH_MODULES))}, "
        f"residual additions and flatten. Replace it by supported layers, or check that part separately "
        f"with nsverify.check_gradient."
    )


# ----------------------------------------------------------------------------------------------------------
# exact rank (Theorem 5)
# ----------------------------------------------------------------------------------------------------------
def exact_rank(rows) -> int:
    """Rank over the rationals of a matrix given as rows of Fractions/ints/floats (floats taken exactly)."""
    return rational_rank(rows)


_PRIMES = (2147483629, 2147483587)


def _modp_matrix(a: np.ndarray, p: int) -> np.ndarray:
    """The float matrix scaled by a common power of two to integers, reduced mod p (exactly)."""
    a = np.asarray(a, dtype=np.float64)
    mant, exp = np.frexp(a)
    m = (mant * 2.0**53).astype(np.int64)  # exact: a = m * 2^(exp-53)
    e = exp.astype(np.int64) - 53
    e = np.where(m == 0, 0, e)
    shift = e - e.min()
    pw = {int(s): pow(2, int(s), p) for s in np.unique(shift)}
    pw_arr = np.vectorize(pw.__getitem__, otypes=[np.int64])(shift)
    return ((np.mod(m, p) % p) * pw_arr) % p


def _rank_modp(a: np.ndarray, p: int) -> int:
    m = a.copy()
    rows, cols = m.shape
    rank = 0
    for c in range(cols):
        nz = np.nonzero(m[rank:, c])[0]
        if nz.size == 0:
            continue
        piv = rank + nz[0]
        m[[rank, piv]] = m[[piv, rank]]
        inv = pow(int(m[rank, c]), p - 2, p)
        m[rank] = (m[rank] * inv) % p
        f = m[:, c].copy()
        f[rank] = 0
        m = (m - (f[:, None] * m[rank][None, :]) % p) % p
        rank += 1
        if rank == rows:
            break
    return rank


def full_column_rank(z) -> bool:
    """Theorem 5's premise: are the columns of z (N x B: one column per sample) linearly independent over Q?

    Exact: a rank of B modulo a prime certifies rank B over the integers (hence over Q); otherwise the rank is
    decided by exact ``Fraction`` elimination."""
    a = z.detach().to("cpu", torch.float64).numpy() if isinstance(z, torch.Tensor) else np.asarray(z, float)
    if not np.all(np.isfinite(a)):
        from nsverify.errors import NonFiniteError

        raise NonFiniteError("the activation matrix contains NaN/inf: the rank test needs finite values")
    n, b = a.shape
    if b > n:
        return False
    at = a.T  # B x N: full column rank of z <=> full row rank of z^T
    for p in _PRIMES:
        if _rank_modp(_modp_matrix(at, p), p) == b:
            return True
    return exact_rank(at.tolist()) == b


# ----------------------------------------------------------------------------------------------------------
# Algorithm 1's LP, bounded, with exact checks
# ----------------------------------------------------------------------------------------------------------
@dataclass
class PResult:
    status: str  # "nonempty" | "empty" | "unknown" | "trivial" (no constraints)
    n_constraints: int
    point: list | None = None  # exact rational x with <a_k, x> > 0 for all k
    farkas: list | None = None  # exact lambda >= 0, sum 1, sum lambda_k a_k = 0
    margin: float | None = None

    @property
    def nonempty(self) -> bool:
        return self.status in ("nonempty", "trivial")


def p_nonempty(constraints) -> PResult:
    """Is P = {x : <a_k, x> > 0 for all k} non-empty?  ``constraints``: rows a_k (floats or Fractions).

    Solves max c s.t. <a_k, x> >= c, -1 <= x <= 1, c <= 1 (bounded; HiGHS via scipy), then checks the returned
    x exactly in Fractions; when the optimum is c <= 0, re-solves the Farkas system on the dual's support
    exactly. A float answer that fails its exact check gives "unknown"."""
    rows = [list(r) for r in constraints]
    if not rows:
        return PResult("trivial", 0)
    A = np.array([[float(v) for v in r] for r in rows], dtype=np.float64)
    exact = [[Fraction(v) for v in r] for r in rows]
    k, n = A.shape
    nz_cols = np.nonzero(np.any(A != 0, axis=0))[0]
    if nz_cols.size == 0:
        return _farkas_check(exact, list(range(k)), k) or PResult("unknown", k)
    As = A[:, nz_cols]
    from scipy.optimize import linprog

    m = nz_cols.size
    cvec = np.zeros(m + 1)
    cvec[-1] = -1.0
    A_ub = np.hstack([-As, np.ones((k, 1))])  # c - <a,x> <= 0
    bounds = [(-1, 1)] * m + [(None, 1)]
    res = linprog(cvec, A_ub=A_ub, b_ub=np.zeros(k), bounds=bounds, method="highs")
    if res.status != 0:
        return PResult("unknown", k)
    c = res.x[-1]
    if c > 0:
        x = res.x[:m]
        for denom in (None, 1 << 20, 1 << 10):
            xr = [
                Fraction(float(v)) if denom is None else Fraction(float(v)).limit_denominator(denom)
                for v in x
            ]
            full = [Fraction(0)] * n
            for j, col in enumerate(nz_cols):
                full[col] = xr[j]
            if all(sum((a * v for a, v in zip(r, full) if a), Fraction(0)) > 0 for r in exact):
                return PResult("nonempty", k, point=full, margin=float(c))
        return PResult("unknown", k, margin=float(c))
    marg = getattr(res, "ineqlin", None)
    lam = np.abs(marg.marginals) if marg is not None else None
    if lam is None:
        return PResult("unknown", k, margin=float(c))
    support = [i for i in range(k) if lam[i] > 1e-9]
    return _farkas_check(exact, support, k, margin=float(c)) or PResult("unknown", k, margin=float(c))


def _farkas_check(exact, support, k, margin=None) -> PResult | None:
    """Exact lambda >= 0 on ``support`` with sum 1 and sum lambda_i a_i = 0 (certifies P empty)."""
    if not support:
        return None
    n = len(exact[0])
    # unknowns lambda_s; equations: sum_s lambda_s a_s[j] = 0 for each j, sum lambda = 1
    eqs = [[exact[s][j] for s in support] + [Fraction(0)] for j in range(n)]
    eqs.append([Fraction(1)] * len(support) + [Fraction(1)])
    sol = solve_any([r[:-1] for r in eqs], [r[-1] for r in eqs])
    if sol is None or any(v < 0 for v in sol):
        return None
    lam = [Fraction(0)] * k
    for s, v in zip(support, sol):
        lam[s] = v
    # re-check
    if sum(lam) != 1 or any(sum(lam[i] * exact[i][j] for i in range(k)) != 0 for j in range(n)):
        return None
    return PResult("empty", k, farkas=lam, margin=margin)


# ----------------------------------------------------------------------------------------------------------
# Algorithm 1 for one layer, from tensors with an autograd graph
# ----------------------------------------------------------------------------------------------------------
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
    """Algorithm 1 (002 L159-161) for one layer.

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


# ----------------------------------------------------------------------------------------------------------
# all premises of a NetSpec at its point
# ----------------------------------------------------------------------------------------------------------
@dataclass
class SpecPremises:
    structure: ModelConditions
    theorem5_rank: bool | None  # None: no kink touched at any layer (premise vacuous)
    algorithm1: list  # LayerCheck per layer
    kinks: int

    @property
    def theorem5(self) -> bool:
        return self.structure.theorems()["theorem5_structure"] and self.theorem5_rank is not False

    @property
    def theorem8(self) -> bool:
        return self.structure.theorems()["theorem8_structure"] and all(
            c.status in ("nonempty", "trivial") for c in self.algorithm1
        )

    def holds(self) -> dict:
        th = self.structure.theorems()
        return {
            "theorem1": th["theorem1"],
            "theorem4": th["theorem4"],
            "theorem5": self.theorem5,
            "theorem6": th["theorem6"],
            "theorem8": self.theorem8,
        }


def spec_premises(spec: NetSpec) -> SpecPremises:
    """Every premise checker at the spec's exact point (float64 forward, verified exact)."""
    from nsverify.strategies.netspec import check_exact

    structure = detect(spec)
    rep = check_exact(spec, torch.float64, last_outputs=False)
    if not rep.ok:
        raise NsverifyError("spec_premises needs a spec whose float64 forward is exact: " + rep.problems[0])
    net = spec.build(torch.float64)
    rec: list = []
    X = spec.inputs(torch.float64)
    net(X, record=rec)
    params = dict(net._params())
    checks, rank_ok, kinks = [], None, 0
    z_prev = X
    upto = []
    for i, L in enumerate(spec.layers):
        y, a, z = rec[i]
        pl = [p for n, p in params.items() if n.startswith(f"layer{i}.") and p.requires_grad]
        upto = upto + pl
        pool = None if L.pool is None else (L.pool.kernel, L.pool.stride, 0, 1)
        chk = algorithm1_layer(f"layer{i}", y, a, L.activation, pl, upto, pool)
        checks.append(chk)
        kinks += chk.kink_touches
        if chk.kink_touches and L.kind == "linear":
            zin = z_prev.reshape(spec.batch, -1)
            ok = full_column_rank(zin.t())
            rank_ok = ok if rank_ok is None else (rank_ok and ok)
        z_prev = z
    return SpecPremises(structure, rank_ok, checks, kinks)
