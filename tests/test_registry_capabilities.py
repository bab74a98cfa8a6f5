"""Every entry states its capabilities, and consumers select entries by them (``registry.select``), never by an
op's name (issue 33, item 1; PyTorch's OpInfo is the model)."""
from __future__ import annotations

import pytest
import torch

from nsverify import registry
from nsverify.errors import NsverifyError


def _graph_nodes(out: torch.Tensor) -> set[str]:
    """The class names of every autograd node behind ``out``."""
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or type(node).__name__ in seen:
            continue
        seen.add(type(node).__name__)
        stack += [nxt for nxt, _ in node.next_functions]
    return seen


@pytest.mark.parametrize("name", registry.names())
def test_every_entry_states_every_capability(name):
    caps = registry.get(name).capabilities()
    assert set(caps) == set(registry.CAPABILITIES)
    assert caps["autograd_nodes"], f"{name}: give autograd_nodes (measured: type(y.grad_fn).__name__)"
    assert caps["fixed"] == (caps["learnable"] is None)
    assert not caps["park_layer"] or (caps["fixed"] and caps["piecewise_linear"] and caps["one_sided_rules"])


@pytest.mark.parametrize("name", registry.names())
def test_the_autograd_nodes_are_the_ones_torch_produces(name):
    """The entry's forward (its torch_fn on its own kink or tie inputs, in float64 with a gradient) produces one of
    the autograd node classes the entry lists, measured with the installed torch."""
    e = registry.get(name)
    if e.kind == "elementwise":
        x = registry.kink_inputs(e, torch.float64).requires_grad_(True)
        nodes = _graph_nodes(e.torch_fn(x, **e.kwargs))
    else:
        c = e.cases[0]
        nodes = _graph_nodes(e.torch_fn(c.tensor(torch.float64).requires_grad_(True), **c.extra))
    assert nodes & set(e.autograd_nodes), f"{name}: torch produced {sorted(nodes)}, the entry lists {e.autograd_nodes}"


def test_select_filters_by_capability_in_registration_order():
    park = registry.select(park_layer=True)
    assert park and all(e.kind == "elementwise" and e.park_layer for e in park)
    assert [e.name for e in park] == [n for n in registry.names() if n in {e.name for e in park}]
    assert {e.name for e in registry.select("elementwise", fixed=False)} == {
        e.name for e in registry.select() if e.kind == "elementwise" and e.learnable is not None}
    exact_fixed = registry.select("elementwise", exact=True, fixed=True)
    assert all(e.exact and e.fixed for e in exact_fixed)
    assert registry.select("selection") == [registry.get(n) for n in registry.names("selection")]
    assert registry.select() == list(registry.PRIMITIVES.values())


def test_select_by_autograd_node():
    pools = registry.select("selection", autograd_node="MaxPool2DWithIndicesBackward0")
    assert pools and all("MaxPool2DWithIndicesBackward0" in e.autograd_nodes for e in pools)
    assert registry.select(autograd_node="NoSuchBackward0") == []


def test_select_by_jax_matches_the_entries_jax_field():
    assert {e.name for e in registry.select(jax=False)} == {n for n in registry.names() if registry.get(n).jax is None}


def test_selection_one_sided_rules_follow_the_tie_rule():
    e = registry.select("selection")[0]
    assert e.one_sided_rules("first") and e.one_sided_rules("returned") and e.one_sided_rules("hybrid=0")
    assert not e.one_sided_rules("even") and not e.one_sided_rules("hybrid=1/2")


def test_an_unknown_capability_or_kind_is_a_clear_error():
    with pytest.raises(NsverifyError, match="unknown capabilities \\['park'\\].*park_layer"):
        registry.select(park=True)
    with pytest.raises(NsverifyError, match="kind 'activation' is not an entry kind: use one of elementwise"):
        registry.select("activation")
    with pytest.raises(NsverifyError, match="not an entry kind"):
        registry.names("activation")


def test_a_registered_entry_is_selected():
    relu = registry.get("relu")
    import dataclasses

    twin = dataclasses.replace(relu, name="relu_twin", aten=(), backward=(), modules=(), functionals=(),
                               autograd_nodes=("TwinBackward0",))
    with registry.registered(twin):
        assert twin in registry.select(park_layer=True)
        assert registry.select(autograd_node="TwinBackward0") == [twin]
    assert twin not in registry.select(park_layer=True)
