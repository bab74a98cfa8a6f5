"""Tables 2.1-2.3 of Boustany, Ch.2 (Sec. 2.4.3 and Sec. 2.7.2) recomputed from the interpreter.

For every column g, a one-node program ``P = g(x_1..x_n)`` is run through :func:`~nsverify.papers.costs.ad.backprop`;
its counted ratio cost(backprop(P)) / cost(P) is exactly (cost(gd) + |pr|(cost(+) + cost(x))) / cost(g), the
omega of the column.  It is compared with the published bound and with omega computed from the *published*
cost(g) formulas.  Where a published bound fails, the row says ``FAILS`` (the norm columns of
Table 2.3 fail for small c_ReLU).

Run ``PYTHONPATH=. python3 -m nsverify.papers.costs.tables`` to print the grid and every failure.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from nsverify.papers.costs.ad import backprop
from nsverify.papers.costs.counting import CostModel
from nsverify.papers.costs.program import Program

EPS = 1e-12
USES_C_NONLIN = ("log", "exp", "inv", "elu")


@dataclass(frozen=True)
class Column:
    table: str
    label: str
    op: str
    bound: float | None  # published bound on omega (None: no published claim)
    pub_cost_g: object  # (c_nl, c_R, n) -> published cost(g)
    pub_cost_gd: object  # (c_nl, c_R, n) -> published cost(gd)
    pub_pr: object  # n -> published |pr|
    note: str = ""


def _k(v):
    return lambda cn, cr, n: v


COLUMNS = [
    # Table 2.1 (Assumption 1: unit costs) -- evaluated at c_nonlin = c_ReLU = 1 only
    Column("2.1", "(+, x)", "mul", 5, _k(1), _k(1), lambda n: 2),
    Column("2.1", "(+c, xc)", "mulc", 3, _k(1), _k(1), lambda n: 1),
    Column("2.1", "log", "log", 4, _k(1), _k(2), lambda n: 1),
    Column("2.1", "exp", "exp", 3, _k(1), _k(1), lambda n: 1),
    Column("2.1", "inv", "inv", 5, _k(1), _k(3), lambda n: 1),
    Column("2.1", "ReLU", "relu", 3, _k(1), _k(1), lambda n: 1),
    # Table 2.2
    Column("2.2", "(+, x)", "add", 5, _k(1), _k(1), lambda n: 2),
    Column("2.2", "(+c, xc)", "addc", 3, _k(1), _k(1), lambda n: 1),
    Column("2.2", "log", "log", 4, lambda cn, cr, n: cn, lambda cn, cr, n: 2 * cn, lambda n: 1),
    Column("2.2", "exp", "exp", 3, lambda cn, cr, n: cn, lambda cn, cr, n: cn, lambda n: 1),
    Column("2.2", "inv", "inv", 5, lambda cn, cr, n: cn, lambda cn, cr, n: cn + 2, lambda n: 1),
    Column("2.2", "xReLU", "mulrelu", 5, lambda cn, cr, n: 1 + cr, lambda cn, cr, n: 1 + cr, lambda n: 2),
    Column(
        "2.2",
        "ReLU (plain)",
        "relu",
        None,
        lambda cn, cr, n: cr,
        lambda cn, cr, n: cr,
        lambda n: 1,
        note="not a published column: the thesis replaces ReLU by xReLU because plain ReLU costs c_ReLU",
    ),
    # Table 2.3
    Column("2.3", "|.|", "abs", 3, lambda cn, cr, n: 1 + cr, lambda cn, cr, n: 1 + cr, lambda n: 1),
    Column("2.3", "ELU", "elu", 2, lambda cn, cr, n: 2 + cr + cn, lambda cn, cr, n: 2 + cr + cn, lambda n: 1),
    Column(
        "2.3",
        "3x3-max-pool",
        "maxpool3x3",
        1.12,
        lambda cn, cr, n: 153 + 8 * cr,
        lambda cn, cr, n: 153 + 8 * cr,
        lambda n: 9,
        note="Case 11 text writes 8 c_nonlin, the table 8 c_R (erratum); the interpreter uses comparisons",
    ),
    Column(
        "2.3",
        "l_inf norm",
        "linf",
        3,
        lambda cn, cr, n: n + 2 * n * cr - 1,
        lambda cn, cr, n: n + 2 * n * cr - 1,
        lambda n: n,
        note="interpreter: n |x_i| (sign + xc each) and n-1 comparisons = n + (2n-1) c_R",
    ),
    Column(
        "2.3",
        "l_1 norm",
        "l1",
        2,
        lambda cn, cr, n: n * (2 + cr) - 1,
        lambda cn, cr, n: n * (2 + cr) - 1,
        lambda n: n,
    ),
]


def _one_node_program(op: str, n: int, rng: random.Random) -> tuple[Program, list]:
    if op in ("l1", "linf"):
        p = n
    elif op == "maxpool3x3":
        p = 9
    elif op in ("add", "mul", "mulrelu"):
        p = 2
    else:
        p = 1
    param = {
        "addc": 0.5,
        "mulc": 1.5,
        "elu": 1.0,
        "maxpool3x3": [[rng.uniform(-1, 1) for _ in range(5)] for _ in range(5)],
    }.get(op)
    prog = Program(p, [])
    prog.add(op, *range(p), param=param)
    x = [rng.uniform(0.5, 2.0) for _ in range(p)]
    return prog, x


def _ratio(num, den):
    return num / den if den > 0 else float("inf")


def recompute(c_nonlin=(1, 2, 10), c_relu=(0, 0.01, 0.1, 0.5, 1, 2), ns=(2, 3, 10, 100)) -> list[dict]:
    """One row per (column, c_nonlin, c_ReLU, n) with the interpreter's omega and the published bound."""
    rng = random.Random(0)
    rows = []
    for col in COLUMNS:
        grid_cn = c_nonlin if col.table != "2.1" and col.op in USES_C_NONLIN else (1,)
        grid_cr = (
            c_relu
            if col.table != "2.1" and col.op not in ("add", "mul", "addc", "mulc", "log", "exp", "inv")
            else (1,)
        )
        grid_n = ns if col.op in ("l1", "linf") else (None,)
        for cn in grid_cn:
            for cr in grid_cr:
                model = CostModel(cn, cr)
                for n in grid_n:
                    prog, x = _one_node_program(col.op, n or 1, rng)
                    rep = backprop(prog, x, model)
                    nn = n or len(prog.nodes[0].pr)
                    pub_g = col.pub_cost_g(cn, cr, nn)
                    pub_w = _ratio(col.pub_cost_gd(cn, cr, nn) + 2 * col.pub_pr(nn), pub_g)
                    bound = col.bound
                    omega = rep.ratio
                    rows.append(
                        dict(
                            table=col.table,
                            column=col.label,
                            op=col.op,
                            c_nonlin=cn,
                            c_relu=cr,
                            n=n,
                            cost_g=rep.cost_program,
                            pub_cost_g=pub_g,
                            cost_g_matches=abs(rep.cost_program - pub_g) < EPS,
                            cost_backprop=rep.cost,
                            omega=omega,
                            omega_published_costs=pub_w,
                            bound=bound,
                            holds=None if bound is None else omega <= bound + EPS,
                            holds_published_costs=None if bound is None else pub_w <= bound + EPS,
                            note=col.note,
                        )
                    )
    return rows


def status(row: dict) -> str:
    if row["bound"] is None:
        return "no claim"
    if row["holds"] and row["holds_published_costs"]:
        return "holds"
    if not row["holds"]:
        return "FAILS"
    return "FAILS (published costs)"


def failures(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["bound"] is not None and not (r["holds"] and r["holds_published_costs"])]


def format_rows(rows: list[dict]) -> str:
    out = [
        f"{'table':5} {'column':14} {'c_nl':>5} {'c_R':>5} {'n':>4} {'cost(g)':>8} {'pub':>8} "
        f"{'omega':>7} {'omega_pub':>9} {'bound':>6}  status"
    ]
    for r in rows:
        out.append(
            f"{r['table']:5} {r['column']:14} {r['c_nonlin']:>5} {r['c_relu']:>5} {str(r['n'] or ''):>4} "
            f"{r['cost_g']:>8.3g} {r['pub_cost_g']:>8.3g} {r['omega']:>7.4g} "
            f"{r['omega_published_costs']:>9.4g} {str(r['bound'] or ''):>6}  {status(r)}"
        )
    return "\n".join(out)


def as_dicts(cols=COLUMNS) -> list[dict]:
    return [{k: v for k, v in asdict(c).items() if not callable(v)} for c in cols]


def main() -> None:  # pragma: no cover - printing
    rows = recompute()
    print(format_rows(rows))
    bad = failures(rows)
    print(f"\n{len(bad)} of {sum(r['bound'] is not None for r in rows)} published bounds FAIL:")
    print(format_rows(bad))


if __name__ == "__main__":
    main()
