"""Selection semantics shared by the registry's tie cases, the AD variants and the oracle: output windows, the
exact Bouligand pieces at a tie, the candidate tie-rule vectors, and PyTorch's pooling windows."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from nsverify.errors import TooManyPieces

F = Fraction
Vec = tuple[Fraction, ...]

#: the most Bouligand pieces enumerated at one tie
MAX_PIECES = 20_000


@dataclass(frozen=True)
class Window:
    """Output j of a selection op: the entry of rank ``rank`` (0 = most extreme in ``direction``) among the
    input entries ``indices`` (flat, in PyTorch's scan order)."""

    indices: tuple[int, ...]
    rank: int = 0
    direction: str = "max"  # "max": ranks from the top; "min": from the bottom


def select(values, win: Window, key) -> int:
    """Index selected by ``win`` when ties are broken by ``key[i]`` (larger key = more extreme)."""
    sign = 1 if win.direction == "max" else -1
    order = sorted(win.indices, key=lambda i: (sign * values[i], key[i]), reverse=True)
    return order[win.rank]


def gradient(n: int, weights, selected) -> Vec:
    """The gradient of ``sum_j weights_j x[selected_j]`` with respect to the ``n`` inputs."""
    g = [F(0)] * n
    for w, j in zip(weights, selected):
        g[j] += w
    return tuple(g)


def rule_vectors(values: Vec, windows: Sequence[Window], weights: Vec) -> dict:
    """Candidate AD outputs at a tie: "first" (ties go to the earliest index, as if it were the most
    extreme), "last", and "even" (each output's weight split evenly over the entries equal to it)."""
    n = len(values)
    first = {i: -i for i in range(n)}
    last = {i: i for i in range(n)}
    rules = {"first": gradient(n, weights, [select(values, w, first) for w in windows]),
             "last": gradient(n, weights, [select(values, w, last) for w in windows])}
    even = [F(0)] * n
    for w, win in zip(weights, windows):
        v = values[select(values, win, first)]
        ties = [i for i in win.indices if values[i] == v]
        for i in ties:
            even[i] += w / len(ties)
    rules["even"] = tuple(even)
    return rules


def bouligand_pieces(values: Vec, windows: Sequence[Window], weights: Vec) -> tuple[Vec, ...]:
    """Exact Bouligand set of x -> sum_j weights_j op(x)_j at ``values``: the gradients on the smooth pieces
    around the tie, one per way of ordering the tied entries (enumerated without repeats)."""
    n = len(values)
    if all(w.rank == 0 for w in windows) and len({w.direction for w in windows}) == 1:
        # max/min-type windows: choose the most extreme remaining entry, resolve its windows, recurse
        sign = 1 if windows[0].direction == "max" else -1
        memo: dict = {}

        def rec(unresolved: frozenset) -> set:
            if not unresolved:
                return {tuple([F(0)] * n)}
            if unresolved in memo:
                return memo[unresolved]
            live = {i for j in unresolved for i in windows[j].indices}
            top = max(sign * values[i] for i in live)
            out = set()
            for e in sorted(i for i in live if sign * values[i] == top):
                hit = frozenset(j for j in unresolved if e in windows[j].indices)
                add = sum(weights[j] for j in hit)
                for g in rec(unresolved - hit):
                    g2 = list(g)
                    g2[e] += add
                    out.add(tuple(g2))
                    if len(out) > MAX_PIECES:
                        raise TooManyPieces(f"more than {MAX_PIECES} Bouligand pieces at this tie; use a "
                                            "smaller input or fewer tied entries.")
            memo[unresolved] = out
            return out

        return tuple(sorted(rec(frozenset(range(len(windows))))))
    groups: dict = {}
    for i, v in enumerate(values):
        groups.setdefault(v, []).append(i)
    tied = [g for g in groups.values() if len(g) > 1]
    total = 1
    for g in tied:
        total *= len(list(itertools.permutations(g))) if len(g) <= 8 else 10**9
    if total > MAX_PIECES:
        raise TooManyPieces(f"{total} orderings of the tied entries exceed {MAX_PIECES}; use fewer ties.")
    out = set()
    for perms in itertools.product(*[list(itertools.permutations(g)) for g in tied]):
        key = {i: 0 for i in range(n)}
        for perm in perms:
            for r, i in enumerate(perm):
                key[i] = r
        out.add(gradient(n, weights, [select(values, w, key) for w in windows]))
    return tuple(sorted(out))


# ----------------------------------------------------------------------------------------------------
# Pooling windows (shared by the selection entries, the AD-variant tests and the oracle)
# ----------------------------------------------------------------------------------------------------
def pool_out_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    """PyTorch's pooling output length (ATen pooling_output_shape)."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _ntuple(v, n: int, default):
    """``v`` as an n-tuple: an int repeated, a one-element sequence repeated, a sequence as it is; ``default``
    for None or an empty sequence (PyTorch's ``stride=[]`` means the kernel size)."""
    if isinstance(v, (list, tuple)):
        return default if not len(v) else tuple(int(x) for x in v) * (n if len(v) == 1 else 1)
    return default if v is None else (int(v),) * n


def pool_window_table(spatial, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    """The one max-pool window geometry: ``(out_shape, table)`` for a pool over a plane of shape ``spatial``
    (1, 2 or 3 dims). ``table[j, t]`` is the flat (row-major) index in the plane of offset ``t`` of output j's
    window, or -1 where that offset falls on padding; outputs j in row-major order, offsets in row-major window
    order -- the order in which PyTorch's "first index" rule scans them. Arguments as the torch modules take
    them (ints or per-dim sequences; ``stride`` None or empty means the kernel size)."""
    import numpy as np

    sp = tuple(int(v) for v in spatial)
    n = len(sp)
    k = _ntuple(kernel, n, None)
    s = _ntuple(stride, n, k)
    p = _ntuple(padding, n, (0,) * n)
    d = _ntuple(dilation, n, (1,) * n)
    out = tuple(pool_out_size(sp[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(n))
    flat = np.zeros(out + k, dtype=np.int64)
    valid = np.ones(out + k, dtype=bool)
    for i in range(n):
        o = np.arange(out[i]).reshape([-1 if a == i else 1 for a in range(n)] + [1] * n)
        t = np.arange(k[i]).reshape([1] * n + [-1 if a == i else 1 for a in range(n)])
        q = o * s[i] - p[i] + t * d[i]  # input coordinate along dim i
        valid &= (q >= 0) & (q < sp[i])
        flat = flat * sp[i] + q
    table = np.where(valid, flat, -1).reshape(int(np.prod(out)), int(np.prod(k)))
    return out, table


def pool2d_windows(h: int, w: int, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Windows of a 2-d max pool over an (h, w) plane: ``(out_shape, windows)`` where ``windows[j]`` lists the
    flat indices ``r * w + c`` of the real (non-padding) entries of output j's window, in row-major window
    order (:func:`pool_window_table` without the padding)."""
    out, table = pool_window_table((h, w), kernel, stride, padding, dilation, ceil_mode)
    return out, [[int(i) for i in row if i >= 0] for row in table]


def adaptive_windows(n: int, out: int) -> list[range]:
    """ATen's adaptive pooling windows along one axis: [floor(i n / out), ceil((i + 1) n / out))."""
    return [range((i * n) // out, -((-(i + 1) * n) // out)) for i in range(out)]
