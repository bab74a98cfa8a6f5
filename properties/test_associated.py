"""Associated gradients (Després, Def. 1 and Sec. 5): PyTorch's AD equals the gradient of the active piece of
the program's piecewise representation, the piece being chosen by PyTorch's rules at exact kinks and ties."""

import torch
from hypothesis import given, note
from hypothesis import strategies as st

from nsverify.papers.despres.associated import associated_gradient, grad_of
from nsverify.strategies import networks, tie_points

#: activations whose pieces have dyadic coefficients (float64 evaluation of both programs is exact)
DYADIC = ("relu", "relu6", "hardtanh", "clamp", "identity", "relu[value=1]", "hardtanh[right,left]")


@given(st.data())
def test_ad_equals_associated_gradient(data):
    spec = data.draw(
        tie_points(
            networks(
                depth=(1, 3),
                activations=DYADIC,
                losses=("linear", "squared"),
                pooling=("none", "maxpool", "trivial"),
            ),
            dtype=torch.float64,
        )
    )
    fn, w = spec.loss_fn(torch.float64)
    ad = grad_of(fn, w)
    assoc = associated_gradient(spec)
    note(f"{spec.describe()}\nAD: {ad.tolist()}\nassociated: {assoc.tolist()}")
    assert torch.equal(ad, assoc)
