"""The numbers the README and docs/conventions.md quote from the shipped data, generated from it.

Each number sits in a doc between two markers, ``<!-- numbers:NAME begin -->`` and ``<!-- numbers:NAME end -->``
(inside its sentence), as the registry's op lists do (:mod:`nsverify.registry.docs`, whose
:class:`~nsverify.files.DocBlock` and writer this module shares). :data:`BLOCKS` lists every block with its file and
renderer; ``python -m nsverify.report.readme_numbers --write`` rewrites them and ``--check`` fails naming the
stale file and that command (``tests/test_readme_numbers.py`` runs the check). The renderers read only what ships
with the package (``nsverify/data/conventions/``: the recorded conventions of each torch and JAX release;
``nsverify/data/gpu/claims.json``: the GPU measurements with their provenance), never the installed torch, so the
docs read the same on every machine. A number no shipped file holds (a CPU timing, how many Hypothesis examples a
search took) is not quoted in the docs: the nightly report measures it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nsverify.errors import NsverifyError
from nsverify.files import DocBlock, regenerate_docs

#: the command that regenerates the blocks (the check's failure message names it)
COMMAND = "python -m nsverify.report.readme_numbers --write"
#: the torch release whose recorded run the README's findings quote (its section "What it found so far")
TORCH_RELEASE = "2.13.0"


def NumberBlock(path: str, name: str, render) -> DocBlock:
    """A generated number inside a sentence: a doc block with the ``numbers:`` markers."""
    return DocBlock(path, name, render, inline=True, prefix="numbers")


def _torch_run():
    from nsverify.conventions import baselines as bl

    return bl.load_recorded(TORCH_RELEASE)


def _jax_runs():
    from nsverify.conventions import baselines as bl

    releases = bl.recorded_releases(bl.DATA_DIRS["jax"])
    if not releases:
        raise NsverifyError("no recorded JAX run in nsverify/data/conventions/jax: the docs' JAX numbers have no "
                            "source (run `nsverify releases --framework jax ... --publish nsverify/data/conventions/"
                            "jax`).")
    return [(r, bl.load_recorded(r, bl.DATA_DIRS["jax"])) for r in releases]


def _modes(results) -> str:
    order = ("eager", "func", "grad", "jvp", "jit", "vmap", "compile")
    modes = {r.mode for r in results}
    return ", ".join(sorted(modes, key=lambda m: order.index(m) if m in order else len(order)))


def torch_matrix() -> str:
    """README: the recorded torch run's evaluations, how many are not the registry's rule, and the registry ops
    newer than the record (each nightly measures them)."""
    from nsverify.registry.table import names

    run = _torch_run()
    rs = list(run.results.values())
    unexpected = sum(1 for r in rs if not r.as_expected and r.rule != "crashed")
    newer = sorted(set(names()) - {r.op for r in rs})
    return (f"{len(rs)} evaluations in the recorded torch {run.meta.get('version') or TORCH_RELEASE} run, "
            f"{unexpected} unexpected" + (f"; {', '.join(newer)}, added to the registry since, are measured by "
                                          "every nightly, so its count is larger" if newer else ""))


def jax_matrix() -> str:
    """README and docs/conventions.md: the newest recorded JAX run's size, cells outside the Clarke set and
    refused cells."""
    release, run = _jax_runs()[-1]
    rs = list(run.results.values())
    outside = sum(1 for r in rs if r.in_clarke == "no")
    rounding = sum(1 for r in rs if r.in_clarke == "rounding")
    refused = sorted({f"{r.op} {r.case}" for r in rs if r.rule == "error"})
    return (f"JAX {release}: {len({r.op for r in rs})} ops ({len({(r.op, r.case) for r in rs})} cases) x "
            f"{len({r.dtype for r in rs})} dtypes x {_modes(rs)} = {len(rs)} evaluations, {outside} outside the "
            f"Clarke set ({rounding} `rounding`: even splits over 3 tied entries), "
            f"{sum(1 for r in rs if r.rule == 'error')} refused ({', '.join(refused) or 'none'}, in reverse mode)")


def jax_releases() -> str:
    """The recorded JAX releases and the cells that change between consecutive ones."""
    from nsverify.conventions import baselines as bl

    runs = _jax_runs()
    n = sum(len(bl.changes(a, b)) for (_, a), (_, b) in zip(runs, runs[1:]))
    return (f"{len(runs)} JAX releases recorded, {runs[0][0]} .. {runs[-1][0]}: "
            + ("not one cell changes across them" if n == 0 else f"{n} cells change across them"))


def jax_vs_torch() -> str:
    """The recorded JAX run paired with the recorded torch run: cells and cases that differ."""
    from nsverify.conventions import sidebyside as sbs

    release, run = _jax_runs()[-1]
    ps = sbs.pairs(list(_torch_run().results.values()), list(run.results.values()))
    differ = [p for p in ps if p.differs]
    return (f"{len(differ)} of {len(ps)} paired cells differ from torch {TORCH_RELEASE}'s, in "
            f"{len({(p.op, p.case) for p in differ})} cases")


def monitor_overhead() -> str:
    """README: the monitor's overhead per training step (the ratio of a monitored to a plain step, per network and
    width) from the newest stored GPU run (:func:`nsverify.papers.park.overhead.newest_gpu_run`: older runs are
    stale) and from the stored CPU run (``nsverify/data/monitor_cpu.json``), each with its device, date and
    commit, against Park et al.'s 1.77x."""
    from nsverify.papers.park.overhead import PAPER_OVERHEAD, cpu_overhead_run, newest_gpu_run

    def listing(nets: dict) -> str:
        return "; ".join(f"{n} {m['ratio']:.2f}x at width {w:g}" for (n, w), m in nets.items())

    parts = []
    gpu = newest_gpu_run()
    if gpu is not None:
        when = ", ".join(x for x in (gpu.date[:10], (gpu.commit or "")[:7]) if x)
        parts.append(f"a monitored step costs {listing(gpu.networks)} of a plain one on an {gpu.gpu} ({when})")
    cpu = cpu_overhead_run()
    if cpu is not None:
        when = ", ".join(x for x in (cpu["date"][:10], (cpu["commit"] or "")[:7]) if x)
        parts.append(f"{listing(cpu['networks'])} on 2 CPU cores shared with other jobs ({when}, median of "
                     f"{min(m['rounds'] for m in cpu['networks'].values())} interleaved rounds)")
    return "; ".join(parts + [f"Park et al. report {round(PAPER_OVERHEAD, 2)}x on a GPU"])


#: every generated number of the docs
BLOCKS: tuple[DocBlock, ...] = (
    NumberBlock("README.md", "monitor", monitor_overhead),
    NumberBlock("README.md", "torch-matrix", torch_matrix),
    NumberBlock("README.md", "jax-matrix", jax_matrix),
    NumberBlock("README.md", "jax-vs-torch", jax_vs_torch),
    NumberBlock("README.md", "jax-releases", jax_releases),
    NumberBlock("docs/conventions.md", "jax-matrix", jax_matrix),
    NumberBlock("docs/conventions.md", "jax-releases", jax_releases),
    NumberBlock("docs/conventions.md", "jax-vs-torch", jax_vs_torch),
)


def stale(root: Path | None = None) -> list[str]:
    """The docs (paths relative to ``root``) whose generated numbers are not the shipped data's."""
    return regenerate_docs(BLOCKS, COMMAND, root)


def write(root: Path | None = None) -> list[str]:
    """Regenerate every number; returns the docs that changed."""
    return regenerate_docs(BLOCKS, COMMAND, root, write=True)


def check_message(files: list[str]) -> str:
    return f"stale numbers from the shipped data in {', '.join(files)}: run {COMMAND}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsverify.report.readme_numbers",
                                description="the docs' numbers quoted from the shipped data: check or rewrite them")
    p.add_argument("--write", action="store_true", help="rewrite the stale blocks (default: check only)")
    p.add_argument("--root", type=Path, default=None, help="the clone's root (default: this checkout)")
    args = p.parse_args(argv)
    try:
        if args.write:
            changed = write(args.root)
            print("rewrote " + ", ".join(changed) if changed else "every number is current")
            return 0
        files = stale(args.root)
    except NsverifyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if files:
        print(check_message(files), file=sys.stderr)
        return 1
    print("every number is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
