"""Conventions: every registry primitive's PyTorch derivative at each kink/tie case lies in its Clarke set, or is
recorded, with its reason, as a violation on the registry entry next to the case (the one place)."""

import pytest

from nsverify import conventions, registry
from nsverify.devices import dtype_name

CASES = conventions.build_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}[{c.label}]" for c in CASES])
def test_torch_derivative_in_clarke_or_recorded(case, nsverify_dtype, nsverify_device):
    r = conventions.evaluate_case(case, nsverify_dtype, nsverify_device, "eager")
    assert r.error is None, r.error
    known = registry.violation(case.op, case.label, dtype_name(nsverify_dtype))
    if r.in_clarke == "yes":
        assert known is None, (
            f"{case.op} [{case.label}] in {dtype_name(nsverify_dtype)} is now inside the Clarke "
            f"set: remove its Violation from the registry entry (nsverify/registry/entries.py)"
        )
    else:
        assert known is not None, (
            f"{case.op} [{case.label}] in {dtype_name(nsverify_dtype)} on {nsverify_device}: PyTorch returns "
            f"{r.derivative} (rule {r.rule}), outside the Clarke set ({r.in_clarke}); "
            f"the registry's candidate rules are "
            f"{ {k: [str(v) for v in vec] for k, vec in case.rules.items()} }. Record a Violation with its reason "
            f"on the registry entry (nsverify/registry/entries.py) if this is PyTorch's intended behaviour."
        )
        assert known.kind == r.in_clarke, f"recorded as {known.kind!r} but measured {r.in_clarke!r}"
        assert r.as_expected, f"{case.op} [{case.label}]: neither the registry's rule nor its recorded violation"


def test_recorded_violations_name_real_cases():
    labels = {(c.op, c.label) for c in CASES}
    recorded = list(registry.recorded_violations())
    assert recorded, "the registry records PyTorch's known violations (clamp_tensor at min == max > x, ...)"
    for op, label, v in recorded:
        assert (op, label) in labels, f"recorded violation {op} [{label}] names no registry case"
        assert v.kind in ("no", "rounding") and len(v.reason) > 20
        assert all(d in ("float16", "bfloat16", "float32", "float64") for d in v.dtypes), v.dtypes
