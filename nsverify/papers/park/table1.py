"""Park, Chun and Lee's Table 1 (Sec. 1) as generators and checks, shared by ``properties/`` and the report.

* :data:`ROWS` -- one :class:`Row` per theorem/lemma row: a strategy drawing networks (with forced exact ties)
  from the row's class, the premise the row needs (checked with :mod:`nsverify.papers.park.premises`), and
  what the row claims ("never not_member" for theorems, "a not_member counterexample exists" for lemmas);
* :func:`verdict` -- the oracle's verdict for a spec (the spec's AD-variant rules passed as ``rules=``);
* :func:`search_counterexample` -- Hypothesis ``find``: the first generated not_member case, shrunk, and how
  many examples the search needed; :func:`premise_verdict_counts` -- the oracle's verdicts over a theorem
  row's generated cases;
* :data:`PAPER_CASES` -- the paper's own counterexamples (the proofs of Lemmas 2, 3 and 7) as specs, and
  :func:`minimal_shape` to compare a shrunk counterexample with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as F
from typing import Callable

import torch
from hypothesis import strategies as st

from nsverify import registry
from nsverify.strategies import networks, tie_points
from nsverify.strategies.netspec import Layer, NetSpec, Pool

#: activations (ops with an nn module) whose PyTorch derivative at every kink is a one-sided derivative (Bouligand
#: proxies), from the registry's derived families: a new activation entry joins the rows by itself.  clamp, a
#: function with its bounds as arguments (no module), is drawn explicitly in the rows of Theorems 1 and 5.
BOULIGAND = tuple(n for n in registry.names("elementwise")
                  if registry.get(n).modules and registry.get(n).exact and registry.get(n).fixed
                  and registry.get(n).one_sided_rules())
#: a common lambda per layer (Theorems 4 and 6): PyTorch's relu/leaky_relu/abs, and AD variants
COMMON_LAMBDA = (
    "relu",
    "leaky_relu",
    "abs",
    "relu[value=1/2]",
    "relu[value=1]",
    "hardtanh[left,left]",
    "relu6[right,right]",
    "hardsigmoid[mix=1/2,mix=1/2]",
)
#: PyTorch's left-derivative activations (Lemma 7's premise D^AD = D^-)
LEFT = ("identity", "relu", "leaky_relu")


def verdict(spec: NetSpec, dtype=torch.float64, device="cpu", **kw):
    """The oracle's verdict on the spec's parameter gradient at its point: the exact AD with the spec's rules as
    ``rules=`` (:meth:`NetSpec.rules`), or the float autograd vector when per-op rules cannot express
    the spec's AD (two layers using one op with different rules)."""
    import nsverify

    fn, w = spec.loss_fn(dtype, device)
    rules = spec.rules()
    if rules is None:
        from nsverify.papers.despres.associated import grad_of

        return nsverify.check_gradient(fn, w, ad=grad_of(fn, w), on_limit="unknown", **kw)
    return nsverify.check_gradient(fn, w, rules=rules or None, on_limit="unknown", **kw)


#: oracle limits for generated theorem cases (multi-layer cases may be slow to bracket: "unknown" then)
LIMITS = {"max_pieces": 2000, "time_limit": 3.0}


@dataclass(frozen=True)
class Row:
    name: str
    claim: str  # "never_not_member" | "counterexample"
    paper: str
    strategy: Callable[[], st.SearchStrategy]
    premise: Callable[[NetSpec], bool]


def _prem(name):
    def check(spec):
        """The row's premise, established exactly; False when it cannot be (inexact float64 forward)."""
        from nsverify.errors import NsverifyError
        from nsverify.papers.park.premises import spec_premises

        try:
            return spec_premises(spec).holds()[name]
        except NsverifyError:
            return False

    check.__name__ = f"premise_{name}"
    return check


def _is(pred):
    return pred


def _ties(**net):
    net.setdefault("image", (3, 4))
    ties = net.pop("ties", (1, 3))
    kinds = net.pop("tie_kinds", ("kink", "pool_equal", "pool_dup", "pool_dead"))
    return lambda: tie_points(networks(**net), ties=ties, kinds=kinds, dtype=torch.float64)


_C1 = dict(pooling=("none", "trivial"))
ROWS = {
    "theorem1": Row(
        "theorem1",
        "never_not_member",
        "Thm 1: distinct biases, batch 1, Clarke proxies",
        _ties(
            depth=(1, 2),
            batch=(1, 1),
            bias_modes=("distinct",),
            losses=("linear", "squared"),
            activations=BOULIGAND + ("abs", "clamp", "relu[value=1/2]", "identity"),
            **_C1,
        ),
        _prem("theorem1"),
    ),
    "theorem4": Row(
        "theorem4",
        "never_not_member",
        "Thm 4: distinct biases, common lambda, any batch",
        _ties(
            depth=(1, 2),
            batch=(1, 3),
            bias_modes=("distinct",),
            losses=("linear", "squared"),
            activations=COMMON_LAMBDA + ("identity",),
            **_C1,
        ),
        _prem("theorem4"),
    ),
    "theorem5": Row(
        "theorem5",
        "never_not_member",
        "Thm 5: fully connected, independent columns of z_{l-1}",
        _ties(
            depth=(1, 2),
            kinds=("linear",),
            batch=(1, 3),
            width=(1, 4),
            bias_modes=("distinct", "none", "shared"),
            losses=("linear", "squared"),
            activations=BOULIGAND + ("abs", "clamp"),
            residual=False,
            **_C1,
        ),
        _prem("theorem5"),
    ),
    "theorem6": Row(
        "theorem6",
        "never_not_member",
        "Thm 6: shared biases, trivial maxpools, common lambda",
        _ties(
            depth=(1, 2),
            kinds=("conv1d", "conv2d", "linear"),
            batch=(1, 3),
            bias_modes=("shared", "distinct"),
            losses=("linear", "squared"),
            activations=COMMON_LAMBDA,
            **_C1,
        ),
        _prem("theorem6"),
    ),
    "theorem8": Row(
        "theorem8",
        "never_not_member",
        "Thm 8: Algorithm 1 sets P_l non-empty",
        _ties(
            depth=(1, 2),
            kinds=("linear", "conv1d", "conv2d"),
            batch=(1, 3),
            pooling=("maxpool", "none"),
            bias_modes=("shared", "distinct", "none", "tied"),
            losses=("linear", "squared"),
            activations=BOULIGAND + ("identity",),
        ),
        _prem("theorem8"),
    ),
    "lemma2": Row(
        "lemma2",
        "counterexample",
        "Lemma 2: no distinct biases, batch 1",
        _ties(
            depth=(1, 1),
            kinds=("linear",),
            batch=(1, 1),
            width=(1, 2),
            bias_modes=("none", "tied"),
            losses=("linear",),
            activations=BOULIGAND,
            ties=(1, 2),
            tie_kinds=("kink",),
            **_C1,
        ),
        lambda s: not any(L.bias_mode == "distinct" for L in s.layers) and s.batch == 1,
    ),
    "lemma3": Row(
        "lemma3",
        "counterexample",
        "Lemma 3: distinct biases, batch >= 2",
        _ties(
            depth=(1, 1),
            kinds=("linear",),
            batch=(2, 3),
            width=(1, 2),
            bias_modes=("distinct",),
            frozen=(False, True),
            losses=("linear",),
            activations=BOULIGAND,
            ties=(2, 3),
            tie_kinds=("kink",),
            **_C1,
        ),
        lambda s: all(L.bias_mode == "distinct" for L in s.layers) and s.batch >= 2,
    ),
    "lemma7": Row(
        "lemma7",
        "counterexample",
        "Lemma 7: shared biases, non-trivial maxpools, D^- proxies",
        _ties(
            depth=(1, 1),
            kinds=("linear",),
            batch=(1, 2),
            width=(1, 2),
            bias_modes=("shared", "tied"),
            pooling=("maxpool",),
            losses=("linear",),
            activations=LEFT,
            ties=(1, 2),
            tie_kinds=("pool_equal", "pool_dup", "pool_dead"),
        ),
        lambda s: (
            all(L.bias_mode == "shared" for L in s.layers)
            and any(L.pool is not None and not L.pool.trivial for L in s.layers)
        ),
    ),
}


# ----------------------------------------------------------------------------------------------------------
# the paper's counterexamples
# ----------------------------------------------------------------------------------------------------------
def _lin(out, weight, wshape, bias_mode="none", bias=(), act="relu", **kw):
    bshape = (len(bias),) if bias else ()
    return Layer(
        "linear",
        out,
        0,
        tuple(F(v) for v in weight),
        wshape,
        bias_mode,
        tuple(F(v) for v in bias),
        bshape,
        act,
        **kw,
    )


PAPER_CASES = {
    # proof of Lemma 2: tau(X, w) = (Xw, -Xw), ReLU, l(x1, x2) = x1 - x2, X = 1, w = 0
    "lemma2": NetSpec(
        "linear", (1,), 1, (F(1),), (_lin(2, [0], (1, 1), tied=True),), "linear", (F(1), F(-1))
    ),
    # proof of Lemma 3: tau(X, w) = X + w, HardSigmoid, l = x1 + x2, X = (3, -3), w = 0
    "lemma3": NetSpec(
        "linear",
        (1,),
        2,
        (F(3), F(-3)),
        (_lin(1, [1], (1, 1), "distinct", [0], "hardsigmoid", frozen=True),),
        "linear",
        (F(1), F(1)),
    ),
    # proof of Lemma 7: tau = (Xu + b, b, -Xu + b, b), identity, maxpool pairs, l = x1 - x2, X = 1, (u, b) = 0
    # (our tied layer also makes the second row a parameter v: rows (u, v, -u, -v))
    "lemma7": NetSpec(
        "linear",
        (1,),
        1,
        (F(1),),
        (_lin(4, [0, 0], (2, 1), "shared", [0], "identity", pool=Pool(2, 2), tied=True),),
        "linear",
        (F(1), F(-1)),
    ),
}


def minimal_shape(spec: NetSpec) -> dict:
    """The shape Park's counterexamples are stated in: L, B, N_0, per-layer widths, pooling, bias mode."""
    return {
        "L": len(spec.layers),
        "B": spec.batch,
        "N0": spec.in_shape[0] if len(spec.in_shape) == 1 else None,
        "widths": [L.out for L in spec.layers],
        "bias": [L.bias_mode for L in spec.layers],
        "tied": [L.tied for L in spec.layers],
        "frozen": [L.frozen for L in spec.layers],
        "pool": [
            None if L.pool is None or L.pool.trivial else (L.pool.kernel, L.pool.stride) for L in spec.layers
        ],
    }


def same_shape(a: NetSpec, b: NetSpec) -> bool:
    return minimal_shape(a) == minimal_shape(b)


def size_key(spec: NetSpec) -> tuple[int, int, int]:
    """The order in which counterexamples are compared: (parameter count, batch size, total layer width).
    Smaller is simpler; a shrunk counterexample is minimal when no one-step structural reduction that is
    smaller in this order is still a counterexample."""
    return (len(spec.w()), spec.batch, sum(L.out for L in spec.layers))


def smaller_counterexamples(spec: NetSpec, still_bad) -> list[NetSpec]:
    """The one-step structural reductions of ``spec`` (drop a sample, an input feature, an output row, a
    trivial pool) that are strictly smaller under :func:`size_key` and still counterexamples. Empty when
    ``spec`` is minimal."""
    from nsverify.strategies import retie

    kinks = [(s.layer, s.index, s.value) for s in spec.sites() if s.kind == "kink"]
    out = []
    for cand, remap in _candidates(spec, values=False):
        try:
            moved = [(li, remap(li, idx), v) for li, idx, v in kinks]
            cand = retie(cand, [k for k in moved if k[1] is not None]) or cand
            if size_key(cand) < size_key(spec) and still_bad(cand):
                out.append(cand)
        except Exception:  # noqa: BLE001 -- an invalid candidate is not a counterexample
            continue
    return out


# ----------------------------------------------------------------------------------------------------------
# counterexample search
# ----------------------------------------------------------------------------------------------------------
@dataclass
class SearchResult:
    row: str
    found: bool
    examples: int  # generated examples until the first not_member (inclusive)
    spec: NetSpec | None = None  # the reduced counterexample
    verdict: object = None
    paper_shape: bool = False
    budget: int = 200
    first: NetSpec | None = None  # the counterexample as generated
    reductions: int = 0  # accepted reduction steps
    still_bad: Callable | None = None  # the search predicate (premise holds and the oracle says not_member)


def _generation_settings(max_examples: int):
    """Hypothesis settings of the report's searches: derandomized (the same examples on every run of one
    Hypothesis version), generation only, no database, no deadline, no health checks."""
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def search_counterexample(row: str, max_examples: int = 200) -> SearchResult:
    """Generate cases of the row's class until the oracle returns not_member (on a case satisfying the row's
    premise), count the generated examples, then shrink the counterexample with :func:`reduce_spec`
    (structural delta debugging: fewer samples, inputs, rows, smaller values) while it stays a premise-satisfying
    not_member. Derandomized: the same count on every run of the same Hypothesis version."""
    from hypothesis import find
    from hypothesis.errors import NoSuchExample

    r = ROWS[row]
    state = {"n": 0}

    def bad(spec):
        state["n"] += 1
        return r.premise(spec) and verdict(spec).status == "not_member"

    try:
        first = find(r.strategy(), bad, settings=_generation_settings(max_examples))
    except NoSuchExample:
        return SearchResult(row, False, state["n"], budget=max_examples)
    n = state["n"]
    spec, steps = reduce_spec(first, bad)
    return SearchResult(
        row, True, n, spec, verdict(spec), same_shape(spec, PAPER_CASES[row]), max_examples, first, steps,
        still_bad=bad,
    )


def premise_verdict_counts(row: str, max_examples: int) -> dict:
    """Draw ``max_examples`` cases from a theorem row's class (Hypothesis, derandomized, generation phase only)
    and count the cases meeting the row's premise and the oracle's verdicts on them (limits :data:`LIMITS`):
    ``{"drawn", "premise", "member", "unknown", "not_member"}``."""
    from hypothesis import given

    r = ROWS[row]
    counts = {"drawn": 0, "premise": 0, "member": 0, "unknown": 0, "not_member": 0}

    @_generation_settings(max_examples)
    @given(st.data())
    def run(data):
        spec = data.draw(r.strategy())
        counts["drawn"] += 1
        if r.premise(spec):
            counts["premise"] += 1
            counts[verdict(spec, **LIMITS).status] += 1

    run()
    return counts


# ----------------------------------------------------------------------------------------------------------
# structural shrinking of a spec
# ----------------------------------------------------------------------------------------------------------
def reduce_spec(spec: NetSpec, still_bad, max_rounds: int = 200) -> tuple[NetSpec, int]:
    """Greedy structural shrinking: try removing a minibatch sample, an input feature, an output row of a
    (un-pooled) layer, then simplifying values (to 0, then to +-1); keep each candidate that ``still_bad``,
    until no candidate is accepted (a fixpoint: then :func:`smaller_counterexamples` is empty).
    Returns (reduced spec, accepted steps)."""
    from nsverify.strategies import retie

    steps = 0
    for _ in range(max_rounds):
        changed = False
        kinks = [(s.layer, s.index, s.value) for s in spec.sites() if s.kind == "kink"]
        for cand, remap in _candidates(spec):
            try:
                moved = [(li, remap(li, idx), v) for li, idx, v in kinks]
                cand = retie(cand, [k for k in moved if k[1] is not None]) or cand
                ok = still_bad(cand)
            except Exception:  # noqa: BLE001 -- an invalid candidate is simply rejected
                ok = False
            if ok:
                spec, steps, changed = cand, steps + 1, True
                break
        if not changed:
            break
    return spec, steps


def _drop_row(idx, rows):
    if idx[1] in rows:
        return None
    return (idx[0], idx[1] - sum(r < idx[1] for r in rows), *idx[2:])


def _candidates(spec: NetSpec, values: bool = True):
    from dataclasses import replace

    import numpy as np

    n_in = int(np.prod(spec.in_shape))
    out_n = int(np.prod(spec.shapes()[-1]))
    base = replace(spec, forced=())
    same = lambda li, idx: idx  # noqa: E731
    # 1. drop a sample
    if spec.batch > 1:
        for b in range(spec.batch):
            x = [v for i, v in enumerate(spec.x) if i // n_in != b]
            if spec.loss == "cross_entropy":
                t = [v for i, v in enumerate(spec.target) if i != b]
            else:
                t = [v for i, v in enumerate(spec.target) if i // out_n != b]
            layers = [L if L.bias_mode != "distinct" or L.kind == "linear" else L for L in spec.layers]
            yield (
                replace(base, batch=spec.batch - 1, x=tuple(x), target=tuple(t), layers=tuple(layers)),
                lambda li, idx, b=b: None if idx[0] == b else (idx[0] - (idx[0] > b), *idx[1:]),
            )
    # 2. drop an input feature (linear first layer)
    L0 = spec.layers[0]
    if len(spec.in_shape) == 1 and n_in > 1 and L0.kind == "linear" and not L0.residual:
        for j in range(n_in):
            x = [v for i, v in enumerate(spec.x) if i % n_in != j]
            W = [v for i, v in enumerate(L0.weight) if i % n_in != j]
            L = replace(L0, weight=tuple(W), wshape=(L0.wshape[0], n_in - 1))
            yield replace(base, in_shape=(n_in - 1,), x=tuple(x), layers=(L,) + spec.layers[1:]), same
    # 3. drop a free output row of the last layer (linear, no pool, no residual)
    Ll = spec.layers[-1]
    if (
        Ll.kind == "linear"
        and Ll.pool is None
        and not Ll.residual
        and Ll.wshape[0] > 1
        and spec.loss != "cross_entropy"
        and Ll.bias_mode != "shared"
    ):
        free, n = Ll.wshape
        last = len(spec.layers) - 1
        for o in range(free):
            rows = [o, o + free] if Ll.tied else [o]
            W = [v for i, v in enumerate(Ll.weight) if i // n != o]
            bias = (
                tuple(v for i, v in enumerate(Ll.bias) if i not in rows)
                if Ll.bias_mode == "distinct"
                else Ll.bias
            )
            bshape = (len(bias),) if Ll.bias_mode == "distinct" else Ll.bshape
            L = replace(
                Ll, weight=tuple(W), wshape=(free - 1, n), out=Ll.out - len(rows), bias=bias, bshape=bshape
            )
            t = tuple(v for i, v in enumerate(spec.target) if i % out_n not in rows)
            yield (
                replace(base, layers=spec.layers[:-1] + (L,), target=t),
                lambda li, idx, rows=rows, last=last: idx if li != last else _drop_row(idx, rows),
            )
    # 4. drop trivial pools (identity maps)
    for li, L in enumerate(spec.layers):
        if L.pool is not None and L.pool.trivial:
            yield (
                replace(base, layers=spec.layers[:li] + (replace(L, pool=None),) + spec.layers[li + 1 :]),
                same,
            )

    if not values:
        return

    # 5. simplify values: inputs, weights, biases, loss coefficients -> 0, then -> sign
    def simpler(v):
        if v != 0:
            yield F(0)
        if abs(v) != 1 and v != 0:
            yield F(1) if v > 0 else F(-1)

    for i, v in enumerate(spec.x):
        for nv in simpler(v):
            yield replace(base, x=spec.x[:i] + (nv,) + spec.x[i + 1 :]), same
    for li, L in enumerate(spec.layers):
        for field_ in ("weight", "bias"):
            vals = getattr(L, field_)
            for i, v in enumerate(vals):
                for nv in simpler(v):
                    L2 = replace(L, **{field_: vals[:i] + (nv,) + vals[i + 1 :]})
                    yield replace(base, layers=spec.layers[:li] + (L2,) + spec.layers[li + 1 :]), same
    if spec.loss != "cross_entropy":
        for i, v in enumerate(spec.target):
            for nv in simpler(v):
                yield replace(base, target=spec.target[:i] + (nv,) + spec.target[i + 1 :]), same
