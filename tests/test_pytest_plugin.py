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
    from nsverify.oracle.cases import CASES, point
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
