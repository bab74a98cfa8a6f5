"""pytest plugin: Hypothesis profiles and options for running nsverify's property suite against a PyTorch
build.

Registered through the ``pytest11`` entry point named ``nsverify.pytest_plugin`` (active once nsverify is
installed); the repository's root ``conftest.py`` also lists it in ``pytest_plugins``, which pytest skips when
the entry point already registered it, so it is loaded exactly once either way.

Options::

    --nsverify-profile {dev,ci,nightly}   Hypothesis profile (default: ci, or $NSVERIFY_PROFILE)
    --nsverify-device DEVICE              device the properties run on (default: cpu)
    --nsverify-dtype D1[,D2...]           dtypes the properties run in (default: float32,float64,bfloat16,
                                          plus float16 on CUDA)

Profiles: ``dev`` (few random examples, fast feedback), ``ci`` (derandomized: the same examples every run,
bounded count, no example database), ``nightly`` (thousands of examples).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = {
    "dev": dict(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]),
    "ci": dict(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    ),
    "nightly": dict(
        max_examples=2000,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    ),
}
DEFAULT_PROFILE = "ci"

for _name, _kw in PROFILES.items():
    settings.register_profile(f"nsverify-{_name}", **_kw)

#: what the properties recorded during the session (e.g. examples needed to find a counterexample)
RECORDS: dict[str, object] = {}


def profile_name(requested: str | None = None) -> str:
    name = requested or os.environ.get("NSVERIFY_PROFILE") or DEFAULT_PROFILE
    if name not in PROFILES:
        from nsverify.errors import NsverifyError

        raise NsverifyError(f"unknown nsverify profile {name!r}; choose one of {', '.join(PROFILES)}")
    return name


def budget(n_ci: int) -> int:
    """Scale an example count chosen for the ci profile to the active profile (dev: smaller, nightly: x40)."""
    return {"dev": max(1, n_ci // 2), "ci": n_ci, "nightly": n_ci * 40}[ACTIVE["profile"]]


ACTIVE = {"profile": DEFAULT_PROFILE, "device": "cpu", "dtypes": None}


def pytest_addoption(parser):
    group = parser.getgroup("nsverify", "nsverify property suite")
    group.addoption(
        "--nsverify-profile",
        default=None,
        choices=sorted(PROFILES),
        help="Hypothesis profile for nsverify properties: dev, ci (default), nightly",
    )
    group.addoption(
        "--nsverify-device",
        default=None,
        help="device the nsverify properties run on (cpu, cuda, cuda:1; default cpu)",
    )
    group.addoption(
        "--nsverify-dtype",
        default=None,
        help="comma-separated dtypes for the nsverify properties (default float32,float64,bfloat16"
        " and float16 on CUDA)",
    )


def pytest_configure(config):
    name = profile_name(config.getoption("--nsverify-profile"))
    ACTIVE["profile"] = name
    if not config.getoption("--hypothesis-profile", default=None):
        settings.load_profile(f"nsverify-{name}")
    ACTIVE["device"] = config.getoption("--nsverify-device") or "cpu"
    ACTIVE["dtypes"] = config.getoption("--nsverify-dtype")


def selected_device():
    from nsverify.devices import parse_device

    return parse_device(ACTIVE["device"])  # clear error for CUDA without a GPU


def selected_dtypes():
    import torch

    from nsverify.devices import parse_dtype

    spec = ACTIVE["dtypes"]
    if spec:
        return [parse_dtype(s.strip()) for s in spec.split(",") if s.strip()]
    out = [torch.float32, torch.float64, torch.bfloat16]
    if selected_device().type == "cuda":
        out.append(torch.float16)
    return out


def pytest_report_header(config):
    return (
        f"nsverify: profile={ACTIVE['profile']} device={ACTIVE['device']} "
        f"dtypes={ACTIVE['dtypes'] or 'default'}"
    )


def pytest_generate_tests(metafunc):
    if "nsverify_dtype" in metafunc.fixturenames:
        from nsverify.devices import dtype_name

        dts = selected_dtypes()
        metafunc.parametrize("nsverify_dtype", dts, ids=[dtype_name(d) for d in dts])


def pytest_terminal_summary(terminalreporter):
    if RECORDS:
        terminalreporter.section("nsverify records")
        for k in sorted(RECORDS):
            terminalreporter.write_line(f"{k}: {RECORDS[k]}")


try:  # fixtures need pytest; the module stays importable without it
    import pytest

    @pytest.fixture(scope="session")
    def nsverify_device():
        """The torch.device selected with --nsverify-device."""
        return selected_device()

    @pytest.fixture(scope="session")
    def nsverify_dtypes():
        """The dtypes selected with --nsverify-dtype (list)."""
        return selected_dtypes()

    @pytest.fixture(scope="session")
    def nsverify_record():
        """``record(key, value)``: keep a number for the end-of-session summary."""
        return RECORDS.__setitem__
except ImportError:  # pragma: no cover
    pass


def explain_failure(spec=None, w=None, verdict=None, title: str = "") -> str:
    """A readable account of a property failure: the title, the shrunk network, the point, then the verdict's
    own account (:meth:`nsverify.oracle.Verdict.explain`: AD value, Clarke set, certificate, distance)."""
    lines = [title] if title else []
    if spec is not None:
        lines.append(spec.describe())
    if w is not None:
        lines.append(f"point w = {[str(v) for v in w]}")
    if verdict is not None:
        lines.append(verdict.explain())
    return "\n".join(lines)
