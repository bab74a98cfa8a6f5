"""Conventions: every registry primitive's PyTorch derivative at each kink/tie case lies in its Clarke set, or is
recorded, with its reason and the torch releases it occurs in, as a violation on the registry entry next to the
case (the one place). A recorded violation whose release range ended before the installed torch is reported as
"fixed in <release>" (a note, not a failure); an unrecorded one fails, and so does a record that no longer
occurs in a release it claims."""

import pytest

from nsverify import conventions, registry
from nsverify.devices import dtype_name

CASES = conventions.build_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}[{c.label}]" for c in CASES])
def test_torch_derivative_in_clarke_or_recorded(case, nsverify_dtype, nsverify_device, nsverify_release_note):
    if not case.supported(dtype_name(nsverify_dtype), "eager"):  # PyTorch's own gap, recorded on the entry
        pytest.skip(f"{case.op} in {dtype_name(nsverify_dtype)}: {case.unsupported[dtype_name(nsverify_dtype)]}")
    r = conventions.evaluate_case(case, nsverify_dtype, nsverify_device, "eager")
    assert r.error is None, r.error
    dt, release = dtype_name(nsverify_dtype), registry.installed_release()
    known = registry.violation(case.op, case.label, dt)
    fixed = registry.fixed_violation(case.op, case.label, dt)
    if r.in_clarke == "yes":
        assert known is None, (
            f"{case.op} [{case.label}] in {dt} is inside the Clarke set on torch {release}, but the registry "
            f"records a violation for releases {known.releases}: end its range (Violation(until='{release}') or "
            f"earlier, nsverify/registry/entries.py)"
        )
        if fixed is not None:
            nsverify_release_note(f"{case.op} [{case.label}]",
                                  f"violation fixed in torch {fixed.until} ({fixed.kind}: {fixed.reason[:80]}...)")
    else:
        assert known is not None, (
            f"{case.op} [{case.label}] in {dt} on {nsverify_device}, torch {release}: PyTorch returns "
            f"{r.derivative} (rule {r.rule}), outside the Clarke set ({r.in_clarke}); "
            f"the registry's candidate rules are "
            f"{ {k: [str(v) for v in vec] for k, vec in case.rules.items()} }. "
            + (f"A violation recorded here ended in {fixed.until}: PyTorch {release} brought it back. "
               if fixed is not None else "")
            + "Record a Violation with its reason and releases on the registry entry "
              "(nsverify/registry/entries.py) if this is PyTorch's intended behaviour."
        )
        assert known.kind == r.in_clarke, f"recorded as {known.kind!r} but measured {r.in_clarke!r}"
        assert r.as_expected, f"{case.op} [{case.label}]: neither the registry's rule nor its recorded violation"


def test_recorded_violations_name_real_cases():
    labels = {(c.op, c.label) for c in CASES}
    recorded = list(registry.recorded_violations())
    assert recorded, "the registry records PyTorch's known violations (the 1/3 even splits, ...)"
    for op, label, v in recorded:
        assert (op, label) in labels, f"recorded violation {op} [{label}] names no registry case"
        assert v.kind in ("no", "rounding") and len(v.reason) > 20
        assert all(d in ("float16", "bfloat16", "float32", "float64") for d in v.dtypes), v.dtypes
        for rel in (v.since, v.until):
            assert rel is None or registry.release_key(rel), rel
