"""The nsverify pytest plugin is registered exactly once (entry point or root conftest), gives nsverify's suite
its profile, and stays inert elsewhere (no settings changed, no torch imported)."""

import hypothesis


def test_plugin_registered_once(request):
    pm = request.config.pluginmanager
    mods = [p for p in pm.get_plugins() if getattr(p, "__name__", "") == "nsverify.pytest_plugin"]
    assert len(mods) == 1
    assert pm.get_plugin("nsverify.pytest_plugin") is mods[0]


def test_default_profile_is_ci(request):
    from nsverify.pytest_plugin import ACTIVE, PROFILES

    if request.config.getoption("--nsverify-profile") or request.config.getoption("--hypothesis-profile"):
        return  # a profile was chosen explicitly
    assert ACTIVE["profile"] == "ci"
    assert hypothesis.settings.default.max_examples == PROFILES["ci"]["max_examples"]
    assert hypothesis.settings.default.derandomize is True


def test_dtype_fixture_is_parametrized(nsverify_dtype, nsverify_device):
    import torch

    assert nsverify_dtype.is_floating_point
    assert nsverify_device == torch.device("cpu") or nsverify_device.type == "cuda"


def test_explain_failure_is_the_verdict_account_with_its_context():
    """One account of a verdict: the plugin adds the title, the network and the point to Verdict.explain()."""
    import nsverify
    from nsverify.papers.cases import CASES, point
    from nsverify.pytest_plugin import explain_failure

    class Spec:
        def describe(self):
            return "tau(X, w) = (Xw, -Xw), X = 1"

    case = next(c for c in CASES if c.name == "Park Lemma 2")
    v = nsverify.check_gradient(case.fn, point(case))
    text = explain_failure(Spec(), [0], v, title="Park et al., Lemma 2")
    assert text.splitlines()[:3] == ["Park et al., Lemma 2", "tau(X, w) = (Xw, -Xw), X = 1", "point w = ['0']"]
    assert text.endswith(v.explain())
    # AD (ReLU'(0) = 0) gives 0, the Bouligand set is {1}: the margin LP over h in [-1, 1] picks h = -1
    assert "status: not_member" in text and "certificate: separating_direction: h = (-1) over bouligand" in text
    assert explain_failure(title="only a title") == "only a title"


# ----------------------------------------------------------------------------------------------------------
# bad options are one line; the xfails file
# ----------------------------------------------------------------------------------------------------------
def _pytest_in(tmp_path, *args, outside_ci: bool = False):
    """pytest in ``tmp_path`` with the plugin; ``outside_ci``: as on a developer's machine (Hypothesis loads its
    own derandomized ``ci`` profile when it sees a CI environment variable such as CI=true)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from hypothesis._settings import _CI_VARS

    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    if outside_ci:
        for key in _CI_VARS:
            env.pop(key, None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "nsverify.pytest_plugin", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), *args], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=600)


def test_cuda_without_a_gpu_is_one_line_before_collection(tmp_path):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU error")
    (tmp_path / "test_a.py").write_text("def test_a(nsverify_dtype):\n    pass\n")
    res = _pytest_in(tmp_path, "--nsverify-device", "cuda", "test_a.py")
    text = (res.stdout + res.stderr).strip()
    assert res.returncode == 4, text  # pytest's usage error
    assert text.splitlines() == [
        "ERROR: nsverify: device 'cuda' was requested but no CUDA GPU is available "
        f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}). Run with --device cpu, or on a "
        "machine with a GPU."], text


def test_xfails_file_marks_the_listed_tests(tmp_path):
    (tmp_path / "test_b.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('n', [1, 2])\ndef test_fails(n):\n    assert n == 1\n\n"
        "def test_passes():\n    pass\n")
    xf = tmp_path / "xfails.txt"
    xf.write_text("# known failures of this build\ntest_b.py::test_fails[2]   # n == 2 fails\n"
                  "test_b.py::test_gone\n")
    res = _pytest_in(tmp_path, "--nsverify-xfails-file", str(xf), "-rxX", "test_b.py")
    assert res.returncode == 0, res.stdout[-2000:]
    assert "2 passed, 1 xfailed" in res.stdout
    assert "1 ids in" in res.stdout and "test_b.py::test_gone" in res.stdout  # an id matching nothing is named
    res = _pytest_in(tmp_path, "test_b.py")
    assert res.returncode == 1 and "1 failed, 2 passed" in res.stdout


def test_xfail_ids_match_by_file_and_name_or_prefix():
    from nsverify.pytest_plugin import xfail_match

    node = "../site-packages/nsverify/properties/test_kink_conventions.py::test_x[float32-clamp[x=0]]"
    assert xfail_match(node, ["test_kink_conventions.py::test_x[float32-clamp[x=0]]"])
    assert xfail_match(node, ["test_kink_conventions.py::test_x"])  # every parametrization
    assert not xfail_match(node, ["test_kink_conventions.py::test_"])  # not a name boundary
    assert not xfail_match(node, ["test_other.py::test_x"])


# ----------------------------------------------------------------------------------------------------------
# inert unless used: the entry point loads the plugin in every pytest run of the environment
# ----------------------------------------------------------------------------------------------------------
#: an unrelated project: one test prints the Hypothesis settings it sees, one has a counterexample (x = 7 mod
#: 23) that plain Hypothesis finds in its 100 random examples and that the nsverify `ci` profile's 25
#: derandomized examples miss (which is how the plugin, when it loaded its profile everywhere, hid it)
UNRELATED = '''
import sys

from hypothesis import given, settings, strategies as st


def test_settings_seen():
    d = settings.default
    print(f"SETTINGS max_examples={d.max_examples} derandomize={d.derandomize} deadline={d.deadline} "
          f"database={type(d.database).__name__} print_blob={d.print_blob}")
    print(f"TORCH imported={'torch' in sys.modules}")


@given(st.integers(0, 10**6))
def test_counterexample(x):
    assert x % 23 != 7
'''


def _outcome(res) -> list[str]:
    """What a run of UNRELATED reports: the settings it saw, torch, the falsifying example, the counts."""
    keep = ("SETTINGS", "TORCH", "Falsifying example", "Failing test case", "x=", " failed", " passed")
    return [line.split(" in ")[0].strip() for line in res.stdout.splitlines() if any(k in line for k in keep)]


def test_unrelated_hypothesis_project_fails_the_same_way_with_and_without_the_plugin(tmp_path):
    runs = {}
    for plugin in ("nsverify.pytest_plugin", "no:nsverify.pytest_plugin"):
        proj = tmp_path / plugin.replace(":", "_")  # each run its own example database
        proj.mkdir()
        (proj / "test_unrelated.py").write_text(UNRELATED)
        res = _pytest_in(proj, "-p", plugin, "-s", "--hypothesis-seed=0", "test_unrelated.py", outside_ci=True)
        runs[plugin] = (res.returncode, _outcome(res))
    rc, plain = runs["no:nsverify.pytest_plugin"]
    assert rc == 1 and any(line.lstrip("E ").startswith("x=") for line in plain), plain  # the premise
    assert runs["nsverify.pytest_plugin"] == runs["no:nsverify.pytest_plugin"]
    assert "TORCH imported=False" in plain


def test_plugin_loads_without_torch_quickly(tmp_path):
    """torch is imported lazily: with torch unimportable, the plugin imports in under 0.2 s (pytest and
    Hypothesis, loaded by pytest in any environment nsverify is installed in, imported before the clock starts)
    and a whole pytest session of an unrelated project with it runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "test_plain.py").write_text("from hypothesis import given, strategies as st\n\n"
                                            "@given(st.integers())\ndef test_int(x):\n    assert x == x\n")
    code = (
        "import sys, time\n"
        "sys.modules['torch'] = None\n"  # any import of torch now raises ImportError
        "import pytest, hypothesis\n"
        "t = time.perf_counter()\n"
        "import nsverify.pytest_plugin\n"
        "print(f'IMPORT {time.perf_counter() - t:.4f}')\n"
        "rc = pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'nsverify.pytest_plugin', 'test_plain.py'])\n"
        "sys.exit(int(rc))\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "1 passed" in res.stdout
    seconds = float(next(line for line in res.stdout.splitlines() if line.startswith("IMPORT")).split()[1])
    assert seconds < 0.2, f"importing the plugin took {seconds:.3f} s"


@hypothesis.given(hypothesis.strategies.integers())
def _probe(x):
    _PROBED.append(x)


_PROBED: list = []


def test_nsverify_suite_gets_its_profile_at_import_and_at_run(request):
    """This file is part of nsverify's suite: the profile was in effect when its @given tests were defined
    (Hypothesis reads it then) and is while they run (test_default_profile_is_ci); the directories of the
    suite include the property suite and tests/, and nothing outside them."""
    from pathlib import Path

    import properties
    from nsverify.pytest_plugin import ACTIVE, PROFILES, SESSION, in_suite

    assert in_suite(Path(__file__)) and in_suite(Path(properties.__file__).parent / "test_park_table1.py")
    assert not in_suite(Path(__file__).resolve().parents[1] / "README.md")
    assert not in_suite(Path(request.config.rootpath).parent)
    if request.config.getoption("--hypothesis-profile"):
        return  # Hypothesis's own choice stands
    assert SESSION["used"] and SESSION["apply"] in ("suite", "global")
    _PROBED.clear()
    _probe()
    assert len(_PROBED) == PROFILES[ACTIVE["profile"]]["max_examples"]  # decided when _probe was defined


def test_nsverify_option_applies_the_profile_to_the_whole_session(tmp_path):
    (tmp_path / "test_unrelated.py").write_text(UNRELATED)
    res = _pytest_in(tmp_path, "-s", "--nsverify-profile", "ci", "-k", "settings_seen", "test_unrelated.py")
    assert res.returncode == 0, res.stdout[-2000:]
    assert "SETTINGS max_examples=25 derandomize=True deadline=None database=NoneType" in res.stdout
    assert "nsverify: profile=ci device=cpu" in res.stdout  # the session uses nsverify: its line is shown


# ----------------------------------------------------------------------------------------------------------
# the suite run from the directory that holds a clone named nsverify (issue 40, item 1)
# ----------------------------------------------------------------------------------------------------------
#: a subprocess that imports as an editable install does (setuptools adds a finder asked *after* Python's path
#: finder), with the current directory first on sys.path as ``python -m pytest`` puts it, then runs pytest
_EDITABLE_PYTEST = """
import importlib.machinery, importlib.util, sys
from pathlib import Path

ROOT = Path({root!r})


class EditableFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        parts = fullname.split(".")
        if parts[0] != "nsverify":
            return None
        base, rel = (ROOT / "properties", parts[2:]) if parts[1:2] == ["properties"] else (ROOT / "nsverify", parts[1:])
        p = base.joinpath(*rel)
        if (p / "__init__.py").is_file():
            return importlib.util.spec_from_file_location(fullname, p / "__init__.py",
                                                          submodule_search_locations=[str(p)])
        if p.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(fullname, p.with_suffix(".py"))
        return None


sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder) + 1, EditableFinder)
sys.path.insert(0, "")
import pytest

sys.exit(int(pytest.main({args!r})))
"""


def _pytest_beside_a_clone(tmp_path, *args):
    """pytest run (as an editable install runs it) in ``tmp_path/home``, which holds ``nsverify/``: a clone of
    this tree (its package and its suite, linked)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    home = tmp_path / "home"
    (home / "nsverify").mkdir(parents=True)  # home itself may exist already (holding the caller's files)
    for name in ("nsverify", "properties"):
        (home / "nsverify" / name).symlink_to(root / name, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = _EDITABLE_PYTEST.format(root=str(root), args=["-q", "-p", "no:cacheprovider", "-p", "nsverify.pytest_plugin",
                                                         *args])
    return home, subprocess.run([sys.executable, "-c", code], cwd=home, capture_output=True, text=True, env=env,
                                timeout=600)


def test_the_suite_beside_a_clone_named_nsverify_stops_with_one_line(tmp_path):
    """``cd ~ && python -m pytest --pyargs nsverify.properties`` with the clone at ``~/nsverify``: the clone
    directory shadows the editable install as an empty namespace package; the plugin stops before collection
    with one line naming the problem and the fix (before: 27 failures, "module 'nsverify' has no attribute
    'check_gradient'")."""
    home, res = _pytest_beside_a_clone(tmp_path, "--pyargs", "nsverify.properties")
    out = res.stdout + res.stderr
    assert res.returncode == 4, out[-3000:]  # pytest's usage error
    line = next(x for x in out.splitlines() if "import nsverify" in x)
    assert line.startswith("ERROR: nsverify: `import nsverify` found ") and str(home / "nsverify") in line, line
    assert "empty namespace package" in line and f"cd {home / 'nsverify'}" in line, line
    assert "Traceback" not in out and "collected" not in out, out[-3000:]


def test_beside_a_clone_an_unrelated_session_runs(tmp_path):
    """The plugin stays inert there in a session that does not ask for nsverify's suite."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "test_plain.py").write_text("def test_plain():\n    pass\n")
    _, res = _pytest_beside_a_clone(tmp_path, "test_plain.py")
    assert res.returncode == 0 and "1 passed" in res.stdout, (res.stdout + res.stderr)[-3000:]


def test_beside_a_clone_the_suite_reached_by_another_name_stops_at_collection(tmp_path):
    """A command line that does not name nsverify (a link to the suite) stops the same way, before collection."""
    import os
    from pathlib import Path

    (tmp_path / "home").mkdir()
    os.symlink(Path(__file__).resolve().parents[1] / "properties", tmp_path / "home" / "suite")
    home, res = _pytest_beside_a_clone(tmp_path, "suite/test_park_table1.py")
    out = res.stdout + res.stderr
    assert res.returncode == 4, out[-3000:]
    line = next(x for x in out.splitlines() if "import nsverify" in x)
    assert line.startswith("ERROR: nsverify: `import nsverify` found ") and f"cd {home / 'nsverify'}" in line, line
    assert "Traceback" not in out and "collected" not in out, out[-3000:]


def test_python_dash_P_keeps_a_clone_beside_from_shadowing_the_install(tmp_path):
    """The README's command, ``python -P -m pytest --pyargs nsverify.properties``, works from the directory that
    holds a clone: -P (Python >= 3.11) leaves the current directory off sys.path, so ``import nsverify`` finds the
    installed package; without -P the directory named nsverify (no __init__.py) is an empty namespace package."""
    import os
    import subprocess
    import sys

    import pytest

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a repository on PYTHONPATH never shadows
    (tmp_path / "nsverify").mkdir()
    (tmp_path / "nsverify" / "README.md").write_text("a clone's top level has no __init__.py\n")
    code = "import nsverify; print(hasattr(nsverify, 'check_gradient'), getattr(nsverify, '__file__', None))"
    plain = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env=env)
    safe = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    if plain.stdout.split()[:1] != ["False"]:
        pytest.skip("this environment's nsverify is not shadowed by a directory named nsverify (a regular install "
                    "in site-packages wins over a namespace directory); the case needs an editable install")
    assert safe.stdout.split()[0] == "True" and "__init__.py" in safe.stdout, safe.stdout + safe.stderr
