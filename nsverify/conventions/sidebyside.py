"""PyTorch and JAX side by side at every registry kink and tie: the cells where their derivatives differ, and every
cell outside the Clarke set in either framework (the report's conventions section; ``nsverify conventions
--framework jax`` measures the JAX column, ``nsverify releases --framework jax`` records it per release).

Cells are paired by (op, case, dtype) and by mode: PyTorch's reverse mode with ``jax.grad``, forward mode with
forward mode, ``torch.compile`` with ``jax.jit(jax.grad)`` (:data:`MODE_PAIRS`). Two cells differ when their exact
derivatives differ, or when one framework refused the cell (``error``) and the other did not. An op without a
JAX counterpart is a row of its own (never dropped)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from nsverify.conventions.baselines import fmt_value

#: (torch mode, JAX mode) pairs compared
MODE_PAIRS = (("eager", "grad"), ("jvp", "jvp"), ("compile", "jit"))


@dataclass
class Pair:
    """One (op, case, dtype, mode pair): PyTorch's cell and JAX's (either None when not measured)."""

    op: str
    case: str
    dtype: str
    torch_mode: str
    jax_mode: str
    torch: object | None
    jax: object | None

    @property
    def differs(self) -> bool:
        t, j = self.torch, self.jax
        if t is None or j is None:
            return False
        if bool(t.error) != bool(j.error):
            return True
        return not t.error and list(t.derivative) != list(j.derivative)

    @property
    def outside(self) -> list[str]:
        """The frameworks whose cell is outside the Clarke set."""
        return [name for name, r in (("torch", self.torch), ("jax", self.jax)) if r is not None
                and r.in_clarke == "no"]

    def text(self) -> str:
        def one(r):
            if r is None:
                return "-"
            return "error" if r.error else f"{fmt_value(r)} ({r.rule}, Clarke {r.in_clarke})"
        return (f"{self.op} [{self.case}] {self.dtype} {self.torch_mode}/{self.jax_mode}: torch {one(self.torch)} "
                f"vs jax {one(self.jax)}")


def pairs(torch_results: Sequence, jax_results: Sequence) -> list[Pair]:
    """Every paired cell of the two runs (CPU), in PyTorch's case order."""
    tj = {(r.op, r.case, r.dtype, r.mode): r for r in torch_results if r.device == "cpu" and r.rule != "crashed"}
    jj = {(r.op, r.case, r.dtype, r.mode): r for r in jax_results}
    keys = list(dict.fromkeys((r.op, r.case, r.dtype) for r in [*torch_results, *jax_results]))
    out = []
    for op, case, dt in keys:
        for tm, jm in MODE_PAIRS:
            t, j = tj.get((op, case, dt, tm)), jj.get((op, case, dt, jm))
            if t is not None or j is not None:
                out.append(Pair(op, case, dt, tm, jm, t, j))
    return out


def _where(ps: Sequence[Pair]) -> str:
    """The dtypes and mode pairs of some cells, compactly ("all 12 cells", "float16,float32; eager/grad")."""
    dts = sorted({p.dtype for p in ps})
    modes = sorted({f"{p.torch_mode}/{p.jax_mode}" for p in ps})
    return f"{len(ps)} cells: {','.join(dts)}; {','.join(modes)}"


def table_rows(torch_results: Sequence, jax_results: Sequence, missing: Sequence[dict] = ()) -> tuple[list, list]:
    """(rows, row classes) of the side-by-side table: one row per (op, case) with PyTorch's and JAX's float32
    reverse-mode derivative, rule and Clarke status, where their cells differ (``DIFFERS``: which dtypes and mode
    pairs) and which cells leave the Clarke set (``OUTSIDE``). Row class ``outside`` (either framework leaves the
    Clarke set somewhere), else ``differs``, else ""."""
    by_case: dict = {}
    for p in pairs(torch_results, jax_results):
        by_case.setdefault((p.op, p.case), []).append(p)
    rows, classes = [], []
    for (op, case), ps in by_case.items():
        rep = next((p for p in ps if p.dtype == "float32" and p.torch_mode == "eager"), ps[0])

        def cell(r):
            if r is None:
                return "-", "-", "-"
            return ("error" if r.error else fmt_value(r)), r.rule, r.in_clarke
        diff = [p for p in ps if p.differs]
        out = {fw: [p for p in ps if fw in p.outside] for fw in ("torch", "jax")}
        outside = "; ".join(f"OUTSIDE in {fw} ({_where(v)})" for fw, v in out.items() if v) or "-"
        rows.append([op, case, *cell(rep.torch), *cell(rep.jax),
                     f"DIFFERS ({_where(diff)})" if diff else "same", outside])
        classes.append("outside" if outside != "-" else "differs" if diff else "")
    for m in missing:
        rows.append([m["op"], "(every case)", "-", "-", "-", "no JAX counterpart", "-", "-", m["reason"], "-"])
        classes.append("")
    return rows, classes


COLUMNS = ["op", "case", "torch (fp32 reverse)", "torch rule", "torch Clarke", "jax (fp32 grad)", "jax rule",
           "jax Clarke", "torch vs jax", "outside the Clarke set"]


def newest_jax_run(data_dir=None):
    """The newest recorded JAX run (:class:`~nsverify.conventions.baselines.Run`) and the ops it lists as having no
    JAX counterpart; (None, []) when none is recorded."""
    import json

    from nsverify.conventions.baselines import DATA_DIRS, load_recorded, recorded_releases

    d = DATA_DIRS["jax"] if data_dir is None else data_dir
    rec = recorded_releases(d)
    if not rec:
        return None, []
    run = load_recorded(rec[-1], d)
    missing = json.loads(open(run.source, encoding="utf-8").read()).get("missing", [])
    return run, missing
