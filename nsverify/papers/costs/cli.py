"""``nsverify costs``: op-count tables, hardness instances and measured ratios from the command line.

    nsverify costs tables [--failures] [--json]
    nsverify costs sat --vars 3 --clauses 4 [--seed 0] [--max-regions 20000]
    nsverify costs ratio --depth 5 --width 256 [--dtype float32] [--device cpu] [--batch 64]
"""
from __future__ import annotations

import json

from nsverify.argtypes import Checked, Number, deferred

#: torch's dtype and device parsers, imported when an option is parsed (``--help`` imports no torch)
parse_dtype = deferred("nsverify.devices", "parse_dtype")
parse_device = deferred("nsverify.devices", "parse_device")

#: the brute-force SAT check tries 2^vars assignments: 2^20 (about a million) is seconds, 2^30 would be hours
MAX_SAT_VARS = 20
SEED = Number(integer=True, lo=0, hi=2**63 - 1, hint="a random seed")


def register_cli(sub) -> None:
    p = sub.add_parser("costs", help="the cost of nonsmooth AD (Boustany Ch.2): tables, hardness, ratios")
    cs = p.add_subparsers(dest="costs_command", metavar="WHAT")
    t = cs.add_parser("tables", help="Tables 2.1-2.3 recomputed from the interpreter; marks failing bounds")
    t.add_argument("--failures", action="store_true", help="print only the grid points where a bound fails")
    t.add_argument("--json", action="store_true", help="print JSON rows instead of a text table")
    t.set_defaults(func=_tables)
    s = cs.add_parser("sat", help="3-SAT -> ReLU network: exact Clarke set at 0 vs Proposition 4")
    s.add_argument("--vars", type=Number(integer=True, lo=1, hi=MAX_SAT_VARS, hint="number of Boolean variables "
                                         "p; the brute-force check tries 2^p assignments"), default=3,
                   help="number of Boolean variables p of the random 3-CNF formula (the brute-force check tries "
                        "2^p assignments)")
    s.add_argument("--clauses", type=Number(integer=True, lo=1, hi=1000, hint="number of 3-clauses"), default=4,
                   help="number of 3-clauses of the formula")
    s.add_argument("--seed", type=SEED, default=0, help="random seed of the formula")
    s.add_argument("--max-regions", type=Number(integer=True, lo=1, hi=10**7, hint="bound on the activation "
                                                "regions the exact Clarke enumeration may visit"), default=20_000,
                   help="bound on the activation regions the exact Clarke enumeration may visit")
    s.set_defaults(func=_sat)
    r = cs.add_parser("ratio", help="measured (fwd+bwd)/fwd wall-clock and FLOP ratio of a ReLU MLP")
    r.add_argument("--depth", type=Number(integer=True, lo=1, hi=1000, hint="number of hidden layers"), default=3,
                   help="number of hidden layers of the ReLU MLP")
    r.add_argument("--width", type=Number(integer=True, lo=1, hi=65536, hint="units per hidden layer"),
                   default=256, help="units per hidden layer")
    r.add_argument("--batch", type=Number(integer=True, lo=1, hi=65536, hint="inputs per forward pass"),
                   default=64, help="inputs per forward pass")
    r.add_argument("--dtype", type=Checked(parse_dtype, "float32"), default="float32",
                   help="float16, bfloat16, float32 or float64")
    r.add_argument("--device", type=Checked(parse_device, "cpu"), default="cpu", help="cpu, cuda or cuda:N")
    r.set_defaults(func=_ratio, check=_check_ratio)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _check_ratio(args) -> None:
    from nsverify.papers.costs.measure import check_mlp_size

    check_mlp_size(args.depth, args.width, args.batch)


def _tables(args) -> int:
    from nsverify.papers.costs.tables import failures, format_rows, recompute

    rows = recompute()
    shown = failures(rows) if args.failures else rows
    if args.json:
        print(json.dumps(shown, indent=1))
    else:
        print(format_rows(shown))
        print(f"\n{len(failures(rows))} of {sum(r['bound'] is not None for r in rows)} published bounds FAIL")
    return 0


def _sat(args) -> int:
    import time

    from nsverify.papers.costs.bouligand import bouligand_set
    from nsverify.papers.costs.prop4 import ad_set_two
    from nsverify.papers.costs.relunet import sat_network
    from nsverify.papers.costs.sat import brute_force_sat, random_3cnf

    clauses = random_3cnf(args.vars, args.clauses, args.seed)
    net = sat_network(clauses, args.vars)
    sat, assignment = brute_force_sat(clauses, args.vars)
    print(f"formula: {clauses}\nsatisfiable (brute force): {sat} {assignment or ''}")
    print(f"network: {net.n_relu_layers} ReLU layers, widths {net.widths}, {net.n_neurons} neurons")
    t0 = time.perf_counter()
    res = ad_set_two(net, [0] * args.vars)
    print(f"Proposition 4: D^a(0) non-singleton = {res.nonsingleton} ({time.perf_counter() - t0:.4f}s)"
          + (f"; two elements {[str(v) for v in res.first]} and {[str(v) for v in res.second]}"
             if res.nonsingleton else ""))
    t0 = time.perf_counter()
    b = bouligand_set(net, [0] * args.vars, max_regions=args.max_regions)
    print(f"exact Clarke at 0: {len(b.gradients)} Bouligand gradients, != {{0}}: {not b.clarke_is_zero} "
          f"({b.regions} regions, {b.lp_calls} LPs, {time.perf_counter() - t0:.2f}s)")
    return 0


def _ratio(args) -> int:
    from nsverify.papers.costs.measure import mlp_row

    row = mlp_row(args.depth, args.width, args.dtype, args.device, batch=args.batch)
    print(json.dumps(row, indent=1))
    return 0
