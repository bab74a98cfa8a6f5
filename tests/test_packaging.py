"""The property suite lives at the top level (properties/) and ships inside the package as nsverify.properties,
from that one copy (pyproject.toml: a setuptools package-dir mapping and the list of packages). These tests fail
when the mapping breaks, when a package on disk is missing from the list (it would be left out of the wheel),
or when the wheel lacks a module, a property test or a data file."""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


#: the setuptools release pyproject.toml's build-system asks for ("setuptools>=77")
_SETUPTOOLS_MIN = next(r.split(">=")[1] for r in _pyproject()["build-system"]["requires"] if r.startswith("setuptools"))


def _setuptools_config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _packages_on_disk() -> set[str]:
    """Every directory under nsverify/ that holds Python modules, as a dotted package name."""
    out = set()
    for py in (REPO / "nsverify").rglob("*.py"):
        if "__pycache__" not in py.parts:
            out.add(".".join(py.parent.relative_to(REPO).parts))
    return out


def _shipped_files() -> set[str]:
    """The files the wheel must hold, as paths inside it: every module of nsverify/, every file of properties/
    (as nsverify/properties/...), and the data files the package reads."""
    out = {p.relative_to(REPO).as_posix() for p in (REPO / "nsverify").rglob("*.py") if "__pycache__" not in p.parts}
    out |= {"nsverify/properties/" + p.name for p in (REPO / "properties").glob("*.py")}
    for pattern in ("data/*.json", "data/gpu/*.json", "data/gpu/*.txt", "data/conventions/*.json",
                    "data/conventions/jax/*.json", "kernels/cpu/*.cpp"):
        out |= {p.relative_to(REPO).as_posix() for p in (REPO / "nsverify").glob(pattern)}
    return out


def test_the_property_suite_is_one_copy_mapped_into_the_package():
    cfg = _setuptools_config()
    assert cfg["package-dir"] == {"nsverify.properties": "properties"}
    assert (REPO / "properties" / "__init__.py").is_file() and (REPO / "properties" / "conftest.py").is_file()
    assert not (REPO / "nsverify" / "properties").exists(), "a second copy of the suite inside nsverify/"
    assert sorted(p.name for p in (REPO / "properties").glob("test_*.py")), "no property tests in properties/"


def test_every_package_on_disk_is_listed():
    listed = set(_setuptools_config()["packages"])
    on_disk = _packages_on_disk() | {"nsverify.properties"}
    assert on_disk - listed == set(), f"add these packages to [tool.setuptools] packages in pyproject.toml: " \
                                      f"{sorted(on_disk - listed)}"
    assert listed - on_disk == set(), f"listed in pyproject.toml but not on disk: {sorted(listed - on_disk)}"


def test_testpaths_name_the_top_level_suite():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert ini["testpaths"] == ["tests", "properties"]


def _build_isolation() -> list[str]:
    """``--no-build-isolation`` when this environment can build the wheel itself (offline): setuptools >= 77, as
    pyproject.toml's build-system asks; else nothing, and pip installs it into an isolated build environment
    from the index, as ``pip install`` of the package did."""
    try:
        import setuptools
        from packaging.version import Version
    except ImportError:
        return []
    if Version(setuptools.__version__) >= Version(_SETUPTOOLS_MIN):
        return ["--no-build-isolation"]
    return []


def _source_copy(tmp_path) -> Path:
    """A copy of the tree a build reads (no build/ or egg-info left in the checkout)."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("nsverify", "properties"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    return src


def _build_wheel(tmp_path, src: Path | None = None) -> Path:
    """Build the wheel from ``src`` (default: a copy of the tree); its path."""
    src = src or _source_copy(tmp_path)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *_build_isolation(), "-q",
                          "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("nsverify-*.whl")
    return wheel


def test_the_wheel_ships_the_suite_the_modules_and_the_data(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = _shipped_files() - names
    assert not missing, f"missing from the wheel: {sorted(missing)}"
    assert not [n for n in names if n.startswith("properties/")], "the suite shipped as a top-level package"
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "nsverify.pytest_plugin = nsverify.pytest_plugin" in zipfile.ZipFile(wheel).read(entry).decode()


def test_a_wheel_built_from_the_sdist_ships_the_same(tmp_path):
    """The release path of ``python -m build`` (.ci/run): the sdist first (setuptools' PEP 517 hook, as build
    calls it), then the wheel from the unpacked sdist, which must ship every module, the suite and the data."""
    import tarfile

    import setuptools
    from packaging.version import Version

    if Version(setuptools.__version__) < Version(_SETUPTOOLS_MIN):
        pytest.skip(f"building the sdist offline needs setuptools>={_SETUPTOOLS_MIN} (pyproject.toml's build-system); "
                    f"this environment has {setuptools.__version__} (.ci/run builds it with python -m build)")
    def hook(name, src, out):
        """setuptools' PEP 517 hook ``name`` run in ``src`` (as build runs it): the file it wrote, its stderr."""
        code = f"import sys\nfrom setuptools import build_meta\nprint(build_meta.{name}(sys.argv[1]))\n"
        res = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return out / res.stdout.strip().splitlines()[-1], res.stderr

    sdist, _ = hook("build_sdist", _source_copy(tmp_path), tmp_path / "sdist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (root,) = (tmp_path / "unpacked").iterdir()
    wheel, err = hook("build_wheel", root, tmp_path / "dist")
    # setuptools deprecates data directories picked up as if they were packages (include-package-data)
    assert "is absent from the `packages` configuration" not in err, err[-2000:]
    missing = _shipped_files() - set(zipfile.ZipFile(wheel).namelist())
    assert not missing, f"missing from the wheel built from the sdist: {sorted(missing)}"


@pytest.mark.slow
def test_installed_wheel_runs_the_suite_from_outside_the_clone(tmp_path):
    """The release path end to end (about 2 min plus the suite): build the wheel, install it with the pinned
    dependencies into a fresh virtual environment, and run ``python -m pytest --pyargs nsverify.properties``
    from an empty directory; the shipped data files are read from the installed package."""
    wheel = _build_wheel(tmp_path)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "-c", str(REPO / "constraints.txt"), str(wheel)],
                   check=True, env=env, timeout=1800)
    empty = tmp_path / "empty"
    empty.mkdir()
    check = ("import pathlib, nsverify, nsverify.properties as p\n"
             "root = pathlib.Path(nsverify.__file__).parent\n"
             "assert pathlib.Path(p.__file__).parent == root / 'properties', p.__file__\n"
             "assert (root / 'data' / 'conventions' / 'index.json').is_file()\n"
             "assert list((root / 'data' / 'gpu').glob('*.json'))\n"
             "print(root)\n")
    res = subprocess.run([py, "-c", check], cwd=empty, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "site-packages" in res.stdout and str(REPO) not in res.stdout
    res = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "nsverify.properties"],
                         cwd=empty, capture_output=True, text=True, env=env, timeout=3600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "nsverify: profile=ci (nsverify's suite only)" in res.stdout
    assert " passed" in res.stdout.splitlines()[-1] and " failed" not in res.stdout.splitlines()[-1]
