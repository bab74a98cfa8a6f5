"""Every nsverify module imports alone in a fresh interpreter (no circular import whatever the order), the
the public API resolves."""
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nsverify

ROOT = Path(nsverify.__file__).parent

# A fresh interpreter imports the third-party libraries once (torch alone takes seconds), then forks one child
# per nsverify module; each child imports that module with no other nsverify module loaded before it.
_CHILD = textwrap.dedent("""
    import importlib, os, sys, traceback
    for lib in ("torch", "numpy", "scipy", "mpmath", "hypothesis", "cvxpy", "matplotlib", "sklearn"):
        try:
            importlib.import_module(lib)
        except ImportError:
            pass
    assert not [m for m in sys.modules if m == "nsverify" or m.startswith("nsverify.")]
    failed = 0
    for name in sys.argv[1:]:
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(name)
            except BaseException:
                print(f"{name}: " + traceback.format_exc().strip().splitlines()[-1], flush=True)
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    sys.exit(1 if failed else 0)
""")


#: modules that need an optional dependency (imported lazily by the library when it is present)
OPTIONAL = {"nsverify.kernels.triton_maxpool": "triton", "nsverify.kernels.triton_monitor": "triton"}


def _modules():
    import importlib.util

    out = []
    for info in pkgutil.walk_packages([str(ROOT)], prefix="nsverify."):
        # collected / run, not imported (the property suite is under ROOT when nsverify comes from a wheel)
        if ".properties.test_" in info.name or info.name == "nsverify.__main__":
            continue
        if info.name in OPTIONAL and importlib.util.find_spec(OPTIONAL[info.name]) is None:
            continue
        out.append(info.name)
    return sorted(out)


def test_at_most_ten_top_level_modules():
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= 10, f"{len(top)} top-level modules: {top}; group the rest into packages"


@pytest.mark.skipif(sys.platform == "win32", reason="needs os.fork")
def test_each_module_imports_alone_in_a_fresh_interpreter():
    mods = _modules()
    assert len(mods) > 40, mods
    res = subprocess.run([sys.executable, "-c", _CHILD, *mods], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"modules that fail to import alone:\n{res.stdout}{res.stderr[-2000:]}"


def test_the_check_detects_a_cycle(tmp_path):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc.b import B\nA = 1\n")
    (pkg / "b.py").write_text("from cyc.a import A\nB = 2\n")
    res = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + _CHILD,
                          "cyc.a"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "cyc.a" in res.stdout and "ImportError" in res.stdout


@pytest.mark.parametrize("name", nsverify.__all__)
def test_public_api_resolves(name):
    assert getattr(nsverify, name) is not None


def test_unknown_attribute_names_the_public_api():
    with pytest.raises(AttributeError, match="public API"):
        nsverify.no_such_thing  # noqa: B018


def test_nothing_imports_jax_unless_asked():
    """jax is the optional extra nsverify[jax]: importing nsverify, its CLI, the registry (whose entries hold the JAX
    expressions), the conventions package and its JAX modules, building the JAX cases and reading the recorded JAX
    runs import no jax module (only evaluating a JAX cell does)."""
    code = ("import sys\n"
            "import nsverify, nsverify.cli, nsverify.registry, nsverify.conventions\n"
            "from nsverify.conventions import jax_matrix, sidebyside, judge, releases, scripts\n"
            "import nsverify.sections.conventions\n"
            "from nsverify.conventions.matrix import build_cases\n"
            "build_cases(framework='jax'); jax_matrix.missing()\n"
            "sidebyside.newest_jax_run()\n"
            "bad = sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxlib')))\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
