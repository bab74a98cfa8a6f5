"""``python -m nsverify.registry COMMAND``: the registry's own commands.

* ``docs --write`` regenerates the docs' blocks generated from the registry (:mod:`nsverify.registry.docs`);
  ``docs --check`` exits 1 with one line naming the stale files and the command that fixes them.
* ``select [--kind KIND] [CAPABILITY=VALUE ...]`` lists the entries that have the given capabilities
  (:func:`nsverify.registry.select`), one per line with all of its capabilities.
"""
from __future__ import annotations

import sys
from pathlib import Path

from nsverify.argtypes import InputDir, Parser, UsageError, one_line
from nsverify.errors import NsverifyError
from nsverify.registry import docs
from nsverify.registry.table import KINDS, select
from nsverify.registry.types import CAPABILITIES

PROG = "python -m nsverify.registry"


def _capability(text: str) -> tuple[str, object]:
    key, eq, value = text.partition("=")
    if not eq:
        raise NsverifyError(f"{text!r}: write CAPABILITY=VALUE, e.g. park_layer=true or autograd_node=ReluBackward0.")
    if key == "autograd_node":
        return key, value
    if key == "learnable":
        return key, None if value.lower() in ("none", "") else value
    if value.lower() not in ("true", "false"):
        raise NsverifyError(f"{text!r}: {key} is true or false.")
    return key, value.lower() == "true"


def parser() -> Parser:
    p = Parser(prog=PROG, description="The registry of nonsmooth primitives: regenerate its doc blocks, or list "
                                      "the entries that have given capabilities.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("docs", help="regenerate (--write) or check (--check) the doc blocks generated from the "
                                    "registry (docs/registry.md, docs/oracle.md, README.md)")
    mode = d.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite every stale block")
    mode.add_argument("--check", action="store_true", help="exit 1, naming the stale files, when a block is stale")
    d.add_argument("--root", type=InputDir("--root"), default=None,
                   help="the repository root holding README.md and docs/ (default: this checkout's)")
    s = sub.add_parser("select", help="list the entries that have the given capabilities "
                                      f"({', '.join(sorted(set(CAPABILITIES) - {'kind', 'autograd_nodes'}))}, "
                                      "autograd_node=NAME)")
    s.add_argument("--kind", choices=KINDS, default=None, help="only entries of this kind")
    s.add_argument("capabilities", nargs="*", metavar="CAPABILITY=VALUE", help="e.g. park_layer=true")
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.command is None:
        raise UsageError(PROG, f"give a command: docs or select. See `{PROG} --help`.")
    if args.command == "docs":
        root = Path(args.root) if args.root else None
        if args.check:
            files = docs.stale(root)
            if files:
                print(docs.check_message(files), file=sys.stderr)
                return 1
            print("the registry's doc blocks are current")
            return 0
        changed = docs.write(root)
        print(f"rewrote {', '.join(changed)}" if changed else "the registry's doc blocks are current")
        return 0
    for e in select(args.kind, **dict(_capability(c) for c in args.capabilities)):
        caps = e.capabilities()
        print(e.name, " ".join(f"{k}={v}" for k, v in caps.items() if k != "autograd_nodes"),
              "autograd_nodes=" + ",".join(caps["autograd_nodes"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"{exc.prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except NsverifyError as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
