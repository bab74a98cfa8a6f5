"""The nsverify pytest plugin is registered exactly once (entry point or root conftest) and sets the
profile."""

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
def _pytest_in(tmp_path, *args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
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
