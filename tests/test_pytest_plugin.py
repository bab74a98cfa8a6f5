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
