"""THE one place where PyTorch derivatives at kinks/ties that are not (exactly) Clarke subgradients are
recorded, each with its reason. ``properties/test_kink_conventions.py`` fails on any case outside the Clarke set that
is not
listed here, and on any entry listed here that no longer occurs (so the list stays true).

Keys: (op, case label, dtype name or "*"); values: (kind, reason). ``kind`` is "no" (outside the Clarke set of
the exact function) or "rounding" (PyTorch applies an exact Clarke rule whose value the dtype cannot
represent).
"""

from __future__ import annotations

_THIRD = (
    "rounding",
    "even split over 3 tied entries: 1/3 is not representable in binary floating point, so "
    "the float gradient is the exact rule rounded (it lies just outside the exact Clarke set)",
)

KNOWN_VIOLATIONS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("clamp_tensor", "min == max > x", "*"): (
        "no",
        "torch.clamp(x, min=t, max=t) with x < t: the output equals the bounds, but PyTorch's backward "
        "routes the gradient to neither bound and returns (0, 0, 0); every Bouligand gradient of the real "
        "function "
        "puts weight 1 on the min or on the max argument",
    ),
    ("leaky_relu", "x=0", "float32"): (
        "rounding",
        "the left derivative 0.01 (registry value: the float64 0.01) is rounded to float32",
    ),
    # (bfloat16 and float16 round 0.01 upward, into the Clarke interval [0.01, 1]: no violation there)
    **{
        (op, label, "*"): _THIRD
        for op, label in (
            ("amax", "3 ties"),
            ("amin", "3 ties"),
            ("max", "3 ties"),
            ("min", "3 ties"),
            ("median", "3 tied at the median"),
        )
    },
}


def lookup(op: str, case: str, dtype: str):
    """(kind, reason) of a recorded violation, or None."""
    return KNOWN_VIOLATIONS.get((op, case, dtype)) or KNOWN_VIOLATIONS.get((op, case, "*"))
