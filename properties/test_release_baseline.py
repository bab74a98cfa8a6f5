"""The conventions of the installed torch against the recorded baseline of its release, and the registry's
release records (rule changes, violation ranges) against the shipped per-release data.

The baseline is the matrix measured on the nearest recorded release at or below the installed one (shipped in
``nsverify/data/conventions/``; ``--nsverify-baseline`` picks another). On a recorded release every cell must
match it; on a newer, unrecorded release a cell that differs is a release change: reported, and still required
to lie in the Clarke set or to be a violation the registry records for this release."""

import pytest

from nsverify import conventions, registry
from nsverify.conventions import baselines

MODES = ("eager", "func", "jvp")  # compile: `nsverify conventions --modes compile` (minutes on a CPU)


def test_conventions_match_the_baseline_of_the_installed_release(nsverify_dtypes, nsverify_device,
                                                                  nsverify_baseline, nsverify_release_note):
    installed = registry.installed_release()
    if nsverify_baseline is None:
        pytest.skip(f"no conventions baseline at or below torch {installed} (recorded: "
                    f"{', '.join(baselines.recorded_releases()) or 'none'}), or --nsverify-baseline none")
    if nsverify_device.type != "cpu":
        pytest.skip("the recorded baselines are CPU runs; CUDA's tie choices differ from CPU for sort and "
                    "median(dim) (both inside the Clarke set, checked by test_kink_conventions.py)")
    results = conventions.run_matrix(None, nsverify_dtypes, [nsverify_device], MODES)
    chs, absent = baselines.compare_with_baseline(results, nsverify_baseline, installed)
    # ops added to the registry after the baseline was recorded have no cells there (their rules are checked by
    # test_kink_conventions.py); any other cell the baseline lacks is a gap in the recorded data
    recorded_ops = {k[0] for k in nsverify_baseline.results}
    gaps = [k for k in absent if k[0] in recorded_ops]
    assert not gaps, (f"{len(gaps)} cells of ops the baseline {nsverify_baseline.describe()} measured are missing "
                      f"from it, e.g. {gaps[:3]}")
    newer = sorted({k[0] for k in absent})
    if newer:
        nsverify_release_note("registry ops newer than the baseline",
                              f"{', '.join(newer)}: not in the recorded baseline "
                              f"({nsverify_baseline.describe()}); checked against the registry's rules only")
    report = baselines.format_changes(chs, nsverify_baseline)
    if nsverify_baseline.release == installed:
        assert not chs, f"torch {installed} differs from its own recorded conventions:\n{report}"
        return
    for g in baselines.group(chs):
        nsverify_release_note(f"change vs recorded {nsverify_baseline.release}: {g['change'].op} "
                              f"[{g['change'].case}]", g["text"])
    faults = [c for c in chs if c.after.in_clarke != "yes" and not c.after.as_expected]
    assert not faults, "release changes that leave the Clarke set and are not recorded:\n" + "\n".join(
        c.text() for c in faults)


def _rule_cells(op, label, rule, run, mode=None):
    """The cells of ``run`` at (op, case) (in ``mode`` when given) and whether each one equals ``rule``'s value
    (exactly or rounded to the cell's dtype)."""
    from nsverify.devices import parse_dtype

    case = next(c for c in conventions.build_cases([op]) if c.label == label)
    out = []
    for key, r in run.results.items():
        if key[:2] != (op, label) or r.error or (mode is not None and key[4] != mode) or key[3] != "cpu":
            continue
        dtype = parse_dtype(key[2])
        x = registry.exact_tensor(case.values, dtype).reshape(case.shape)
        want = case.rule_vector(rule, x)
        from fractions import Fraction

        vec = [Fraction(v) for v in r.derivative]
        out.append((key, want is not None and conventions.classify(vec, {str(rule): want}, dtype)[0] != "other"))
    return out


def _around(since: str):
    """(the last recorded release before ``since``, ``since`` itself), both recorded, or None."""
    rec = baselines.recorded_releases()
    before = [r for r in rec if registry.release_key(r) < registry.release_key(since)]
    if since not in rec or not before:
        return None
    return before[-1], since


def _rule_changes():
    for name in registry.names():
        e = registry.get(name)
        if e.kind == "elementwise":
            for ch in e.rule_changes:
                for i in range(len(e.breakpoints)):
                    if ch.before[i] != ch.after[i]:
                        yield name, e.kink_label(i), ch.since, ch.before[i], ch.after[i], None
        else:
            for c in e.cases:
                for ch in c.rule_changes:
                    for m in ch.modes or registry.AD_MODES:
                        yield name, c.label, ch.since, ch.before, ch.after, m


RULE_CHANGES = list(_rule_changes())


@pytest.mark.parametrize("change", RULE_CHANGES, ids=[f"{c[0]}[{c[1]}]{c[5] or ''}@{c[2]}" for c in RULE_CHANGES])
def test_recorded_rule_change_matches_the_shipped_data(change, nsverify_release_note):
    """A RuleChange says PyTorch's rule went from ``before`` to ``after`` in release ``since``: the shipped data
    of the last recorded release before it shows ``before`` and that of ``since`` shows ``after``, in every dtype
    (and the mode the change names)."""
    op, label, since, before, after, mode = change
    pair = _around(since)
    if pair is None:
        pytest.skip(f"no shipped data for torch {since} and the release before it")
    prev, first = pair
    old = _rule_cells(op, label, before, baselines.load_cached(prev), mode)
    new = _rule_cells(op, label, after, baselines.load_cached(first), mode)
    assert old and new, f"the shipped data holds no cells for {op} [{label}]"
    broken = [v for o, lb, v in registry.recorded_violations() if (o, lb) == (op, label) and v.in_release(prev)]
    if broken:  # the recorded rule was not what PyTorch returned then: a violation, outside the Clarke set
        prev_run = baselines.load_cached(prev)
        cells = [r for key, r in prev_run.results.items() if key[:2] == (op, label) and not r.error
                 and (mode is None or key[4] == mode)]
        assert cells and all(r.in_clarke == "no" for r in cells), (
            f"torch {prev} should show the recorded violation at {op} [{label}] (outside the Clarke set)")
    else:
        assert all(ok for _, ok in old), f"torch {prev} does not show {before} at {op} [{label}]: {old}"
    assert all(ok for _, ok in new), f"torch {first} does not show {after} at {op} [{label}]: {new}"
    if registry.release_key(registry.installed_release()) >= registry.release_key(since):
        nsverify_release_note(f"release change {op} [{label}]{' ' + mode if mode else ''}",
                              f"{before} -> {after} since {since} (measured: {prev} -> {first})")


VIOLATION_RANGES = [(op, label, v) for op, label, v in registry.recorded_violations() if v.since or v.until]


@pytest.mark.parametrize("record", VIOLATION_RANGES, ids=[f"{o}[{lb}]" for o, lb, _ in VIOLATION_RANGES])
def test_recorded_violation_range_matches_the_shipped_data(record):
    """A violation recorded with a release range occurs in the shipped data inside the range and not at its
    ends (the release before ``since``, and ``until``: the release that fixed it)."""
    op, label, v = record
    rec = baselines.recorded_releases()
    inside = [r for r in rec if v.in_release(r)]
    outside = [r for r in rec if not v.in_release(r)]
    assert inside, f"no shipped release lies in the range {v.releases} of {op} [{label}]"
    for rel, want in [(inside[0], v.kind), (inside[-1], v.kind)] + [(r, "yes") for r in outside[:1] + outside[-1:]]:
        run = baselines.load_cached(rel)
        cells = [r for k, r in run.results.items() if k[:2] == (op, label) and k[4] == "eager"
                 and v.in_dtype(k[2]) and not r.error]
        assert cells and all(r.in_clarke == want for r in cells), (
            f"{op} [{label}] on torch {rel}: Clarke status {sorted({r.in_clarke for r in cells})}, expected {want} "
            f"(violation recorded for releases {v.releases})")
