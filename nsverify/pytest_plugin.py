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
    --nsverify-baseline RELEASE|FILE      conventions baseline (default auto: the nearest recorded release at or
                                          below the installed torch; none: skip the baseline check)
    --nsverify-xfails-file FILE           test ids (one per line, # comments) expected to fail on this build

A bad option value (CUDA without a GPU, an unknown dtype, a missing xfails file) stops the run with one line
(pytest's usage error), before collection. So does a shadowed package (:func:`shadowing_problem`): a directory
named ``nsverify`` without ``__init__.py`` in the current directory (a clone, run from the directory that holds
it) that Python imported as an empty namespace package in place of the installed nsverify.

Profiles: ``dev`` (few random examples, fast feedback), ``ci`` (derandomized: the same examples every run,
bounded count, no example database), ``nightly`` (thousands of examples).

Inert unless used: the entry point loads this plugin in every pytest run of the environment, so it changes
nothing there by itself. It registers its options, fixtures and profiles, and applies its Hypothesis profile
only to nsverify's own suite (:func:`suite_dirs`: the property suite, wherever it is installed, and a source
checkout's ``tests/``), while those tests are imported and run, then restores the profile that was active; an
``--nsverify-*`` option applies it to the whole session; ``--hypothesis-profile`` always wins. torch is imported
only when the suite or an nsverify fixture is used.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

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


ACTIVE = {"profile": DEFAULT_PROFILE, "device": "cpu", "dtypes": None, "baseline": "auto"}
#: --nsverify-xfails-file: the ids read from the file, and the ids that matched a collected test
XFAILS: dict = {"path": None, "ids": [], "used": set()}
#: release notes of the session: release changes in effect, violations fixed, changes against the baseline
RELEASE_NOTES: dict[str, str] = {}


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
    group.addoption(
        "--nsverify-baseline",
        default=None,
        help="conventions baseline the properties compare with: a recorded torch release, a conventions JSON "
        "file, auto (default: the nearest recorded release at or below the installed one) or none",
    )
    group.addoption(
        "--nsverify-xfails-file",
        default=None,
        help="file of test ids expected to fail on this PyTorch build (one per line, '#' starts a comment); "
        "an id matches a test by its name after the file name (test_x.py::test_y[param]) or a prefix of it",
    )


#: the plugin's options; giving any of them applies the nsverify profile to the whole session
OPTIONS = ("--nsverify-profile", "--nsverify-device", "--nsverify-dtype", "--nsverify-baseline",
           "--nsverify-xfails-file")
#: how this session applies the profile: "global" (an --nsverify-* option), "suite" (nsverify's own tests
#: only), None (--hypothesis-profile given: Hypothesis's choice stands); "used": an option was given or an item
#: of nsverify's suite was collected (the header line and the torch import follow that)
#: "shadowed": the line of :func:`shadowing_problem` when ``nsverify`` is an empty namespace package (the suite
#: stops when it is collected)
SESSION: dict = {"apply": None, "used": False, "shadowed": None}
#: results computed once per process (the suite's directories, the resolved baseline)
_CACHE: dict = {}


def shadowing_problem() -> str | None:
    """Why ``import nsverify`` did not give the installed package, as one line naming the fix, or None.

    ``python -m pytest`` puts the current directory first on ``sys.path``. When it holds a directory named
    ``nsverify`` without ``__init__.py`` (a clone of the repository: ``cd ~`` with the clone at ``~/nsverify``),
    Python's path finder takes it as a namespace package before an editable install's finder is asked, and
    ``nsverify`` is an empty package (no ``check_gradient``); the suite would fail test by test."""
    import sys

    pkg = sys.modules.get("nsverify")
    if pkg is None or getattr(pkg, "__file__", None):
        return None
    dirs = [str(d) for d in getattr(pkg, "__path__", ())]
    where = dirs[0] if dirs else "a directory named nsverify"
    clone = bool(dirs) and (Path(where) / "nsverify" / "__init__.py").is_file()
    elsewhere = f"from another directory (e.g. cd {where})" if clone else f"from another directory, or rename {where}"
    fix = (f"run `python -P -m pytest ...` (-P: Python leaves the current directory off sys.path; Python >= 3.11) "
           f"or the `pytest` command, which work from any directory, or run {elsewhere}")
    return (f"`import nsverify` found {where}, a directory without __init__.py{' (a clone of nsverify)' * clone} "
            "that Python imported as an empty namespace package instead of the installed nsverify, because it "
            f"lies on sys.path (python -m pytest puts the current directory there first); {fix}.")


def _asks_for_nsverify(config) -> bool:
    """Whether the command line names nsverify's suite (``--pyargs nsverify.properties``, a path into a clone
    named nsverify) or gives an --nsverify-* option."""
    if any(config.getoption(o) is not None for o in OPTIONS):
        return True
    return any("nsverify" in str(a) for a in config.args)


def pytest_configure(config):
    import pytest

    from nsverify.errors import NsverifyError

    problem = shadowing_problem()
    if problem and _asks_for_nsverify(config):
        raise pytest.UsageError(f"nsverify: {problem}")
    SESSION["shadowed"] = problem
    explicit = any(config.getoption(o) is not None for o in OPTIONS)
    XFAILS.update(path=None, ids=[], used=set())
    ACTIVE["device"] = config.getoption("--nsverify-device") or "cpu"
    ACTIVE["dtypes"] = config.getoption("--nsverify-dtype")
    ACTIVE["baseline"] = config.getoption("--nsverify-baseline") or "auto"
    try:  # every option checked here, before collection: one line on bad input
        ACTIVE["profile"] = profile_name(config.getoption("--nsverify-profile"))
        if explicit:  # the defaults need no check (and no torch import) until the suite uses them
            selected_device()
            selected_dtypes()
            selected_baseline()
        if config.getoption("--nsverify-xfails-file"):
            XFAILS["path"] = config.getoption("--nsverify-xfails-file")
            XFAILS["ids"] = read_xfails(XFAILS["path"])
    except NsverifyError as exc:
        raise pytest.UsageError(f"nsverify: {exc}") from None
    SESSION["used"] = explicit
    if config.getoption("--hypothesis-profile", default=None):
        SESSION["apply"] = None
    elif explicit:
        SESSION["apply"] = "global"
        settings.load_profile(f"nsverify-{ACTIVE['profile']}")
    else:
        SESSION["apply"] = "suite"


def suite_dirs() -> tuple[Path, ...]:
    """The directories of nsverify's own suite: the property suite where ``nsverify.properties`` is installed
    (``site-packages/nsverify/properties``; ``properties/`` of the checkout in an editable install) and, when
    this package sits in a source checkout of nsverify, the checkout's ``properties/`` and ``tests/``."""
    if "suite_dirs" not in _CACHE:
        import importlib.util
        import tomllib

        dirs = []
        try:
            spec = importlib.util.find_spec("nsverify.properties")
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            dirs += [Path(d) for d in spec.submodule_search_locations or ()]
        root = Path(__file__).resolve().parent.parent
        try:
            name = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
        except (OSError, KeyError, TypeError, ValueError):
            name = None
        if name == "nsverify":
            dirs += [root / "properties", root / "tests"]
        _CACHE["suite_dirs"] = tuple(dict.fromkeys(d.resolve() for d in dirs))
    return _CACHE["suite_dirs"]


def in_suite(path) -> bool:
    """Whether ``path`` lies in nsverify's own suite (:func:`suite_dirs`)."""
    p = Path(path).resolve()
    return any(p == d or d in p.parents for d in suite_dirs())


@contextlib.contextmanager
def _suite_profile(path):
    """The nsverify profile while a collector or test of nsverify's suite is imported or run (the other tests
    of the session keep theirs)."""
    if SESSION["apply"] != "suite" or path is None or not in_suite(path):
        yield
        return
    SESSION["used"] = True
    try:
        before = settings.get_current_profile_name()
    except (AssertionError, AttributeError):  # no profile loaded yet; a Hypothesis release without the getter
        before = getattr(settings, "_current_profile", None) or "default"
    settings.load_profile(f"nsverify-{ACTIVE['profile']}")
    try:
        yield
    finally:
        settings.load_profile(before)


def read_xfails(path) -> list[str]:
    """The test ids of an xfails file: one per line, blank lines and '#' comments ignored."""
    from pathlib import Path

    from nsverify.errors import NsverifyError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NsverifyError(f"cannot read the xfails file {path} ({exc.__class__.__name__}: {exc}); give a text "
                            "file with one test id per line.") from None
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def _short_id(nodeid: str) -> str:
    """A node id without its directories: "test_x.py::test_y[param]" (the same however the suite was reached:
    a path, --pyargs, an installed copy)."""
    path, sep, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest


def xfail_match(nodeid: str, ids) -> str | None:
    """The xfails id matching ``nodeid``: equal to its short id (or the full node id), or a prefix of it ending
    at a '::' or '[' boundary (test_x.py::test_y covers every parametrization)."""
    short = _short_id(nodeid)
    for xid in ids:
        for full in (short, nodeid):
            if full == xid or (full.startswith(xid) and full[len(xid):][:1] in ("[", ":")):
                return xid
    return None


def pytest_collection(session):
    """Stop before collection, with the one line of :func:`shadowing_problem`, when ``nsverify`` is an empty
    namespace package and a path to collect lies in nsverify's suite or holds it (a command line that did not
    name nsverify: a link to the suite, or ``python -m pytest`` in the directory that holds the clone)."""
    problem = SESSION.get("shadowed")
    if not problem:
        return None
    import pytest

    base = Path(session.config.invocation_params.dir)
    for arg in session.config.args:
        p = (base / str(arg).split("::")[0]).resolve()
        if in_suite(p) or any(p in d.parents for d in suite_dirs()):
            raise pytest.UsageError(f"nsverify: {problem}")
    return None


def pytest_collection_modifyitems(config, items):
    import pytest

    if not XFAILS["ids"]:
        return
    for item in items:
        xid = xfail_match(item.nodeid, XFAILS["ids"])
        if xid is not None:
            XFAILS["used"].add(xid)
            item.add_marker(pytest.mark.xfail(reason=f"listed in --nsverify-xfails-file {XFAILS['path']}",
                                              strict=False))


def selected_baseline():
    """The conventions baseline run of the session (None: no recorded release at or below the installed one, or
    --nsverify-baseline none)."""
    from nsverify.conventions.baselines import installed_release, resolve_baseline

    key = ("baseline", ACTIVE["baseline"])
    if key not in _CACHE:
        _CACHE[key] = resolve_baseline(ACTIVE["baseline"], installed_release())
    return _CACHE[key]


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


def pytest_report_collectionfinish(config, start_path, items):
    """One line on the settings in effect, once the session is known to use the suite (an --nsverify-* option,
    or an item of nsverify's suite collected)."""
    if not SESSION["used"]:
        return None
    import torch

    base = selected_baseline()
    scope = {"global": "", "suite": " (nsverify's suite only)", None: " (--hypothesis-profile given)"}
    return (
        f"nsverify: profile={ACTIVE['profile']}{scope[SESSION['apply']]} device={ACTIVE['device']} "
        f"dtypes={ACTIVE['dtypes'] or 'default'} torch={torch.__version__} "
        f"baseline={base.release if base is not None else 'none'}"
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
    if RELEASE_NOTES:
        terminalreporter.section("nsverify: torch release notes")
        for k in sorted(RELEASE_NOTES):
            terminalreporter.write_line(f"{k}: {RELEASE_NOTES[k]}")
    unused = [x for x in XFAILS["ids"] if x not in XFAILS["used"]]
    if unused:
        terminalreporter.section("nsverify xfails file")
        terminalreporter.write_line(f"{len(unused)} ids in {XFAILS['path']} match no collected test: "
                                    + ", ".join(unused[:10]))


try:  # fixtures and hook wrappers need pytest; the module stays importable without it
    import pytest

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(collector):
        with _suite_profile(getattr(collector, "path", None)):  # Hypothesis reads the profile at import
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        with _suite_profile(getattr(item, "path", None)):
            return (yield)

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

    @pytest.fixture(scope="session")
    def nsverify_baseline():
        """The conventions baseline (:class:`nsverify.conventions.baselines.Run`) of the installed torch release
        selected with --nsverify-baseline, or None."""
        return selected_baseline()

    @pytest.fixture(scope="session")
    def nsverify_release_note():
        """``note(key, text)``: a torch release note for the end-of-session summary (a release change, a fixed
        violation): information, not a failure."""
        return RELEASE_NOTES.__setitem__
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
