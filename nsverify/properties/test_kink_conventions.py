"""Conventions: every registry primitive's PyTorch derivative at each kink/tie case lies in its Clarke set, or
is recorded, with its reason, in nsverify.known_violations (the one place)."""

import pytest

from nsverify import conventions
from nsverify.devices import dtype_name
from nsverify.known_violations import KNOWN_VIOLATIONS, lookup

CASES = conventions.build_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}[{c.label}]" for c in CASES])
def test_torch_derivative_in_clarke_or_known(case, nsverify_dtype, nsverify_device):
    r = conventions.evaluate_case(case, nsverify_dtype, nsverify_device, "eager")
    assert r.error is None, r.error
    known = lookup(case.op, case.label, dtype_name(nsverify_dtype))
    if r.in_clarke == "yes":
        assert known is None, (
            f"{case.op} [{case.label}] in {dtype_name(nsverify_dtype)} is now inside the Clarke "
            f"set: remove its entry from nsverify/known_violations.py"
        )
    else:
        assert known is not None, (
            f"{case.op} [{case.label}] in {dtype_name(nsverify_dtype)} on {nsverify_device}: PyTorch returns "
            f"{r.derivative} (rule {r.rule}), outside the Clarke set ({r.in_clarke}); "
            f"the registry's rules are "
            f"{ {k: [str(v) for v in vec] for k, vec in case.rules.items()} }. Record it with a reason in "
            f"nsverify/known_violations.py if this is PyTorch's intended behaviour."
        )
        assert known[0] == r.in_clarke, f"recorded as {known[0]!r} but measured {r.in_clarke!r}"


def test_known_violations_name_real_cases():
    labels = {(c.op, c.label) for c in CASES}
    for (op, label, _dt), (kind, reason) in KNOWN_VIOLATIONS.items():
        assert (op, label) in labels, f"known violation {op} [{label}] names no registry case"
        assert kind in ("no", "rounding") and len(reason) > 20
