"""Register this machine with asv under a name that carries its CPU and GPU model, then run asv with it.

    python asv_bench/asv_machine.py                      # print the name; write it to ~/.asv-machine.json
    python asv_bench/asv_machine.py asv run --quick ...   # same, then run `asv run --machine NAME --quick ...`
    python asv_bench/asv_machine.py asv continuous -E virtualenv main HEAD

asv's own machine name is the hostname, which says nothing about the GPU; results of a CPU box and a GPU box
must not share a name. The entry also records ``gpu``, ``torch`` and ``cuda`` (asv keeps extra fields).
"""
from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _slug(text: str, limit: int = 40) -> str:
    text = re.sub(r"\((R|TM)\)|CPU|Processor|@.*$", "", text, flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")


def machine_entry() -> tuple[str, dict]:
    """``(name, asv machine dict)`` for this machine: ``<host>-<cpu model>-<gpu model or no-gpu>``."""
    import torch

    from nsverify.report.machine import cpu_model, gpu_model

    cpu, gpu = cpu_model(), gpu_model()
    name = f"{_slug(socket.gethostname(), 24)}-{_slug(cpu)}-{_slug(gpu) if gpu else 'no-gpu'}"
    try:
        ram = str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024)
    except (ValueError, OSError, AttributeError):
        ram = ""
    return name, {"machine": name, "os": f"{platform.system()} {platform.release()}",
                  "arch": platform.machine(), "cpu": cpu + (f" + GPU {gpu}" if gpu else ""),
                  "num_cpu": str(os.cpu_count()), "ram": ram, "gpu": gpu or "none",
                  "torch": torch.__version__, "cuda": torch.version.cuda or "none"}


def register(path: Path | None = None) -> str:
    """Add this machine to asv's machine file (default ``~/.asv-machine.json``); return its name."""
    path = Path(path or os.path.expanduser("~/.asv-machine.json"))
    name, entry = machine_entry()
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[name] = entry
    data["version"] = 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=4, sort_keys=True))
    os.replace(tmp, path)
    return name


#: asv subcommands that take --machine (others, such as `asv check`, run unchanged)
MACHINE_COMMANDS = {"run", "continuous", "find", "compare", "show", "profile"}


def main(argv: list[str]) -> int:
    name = register()
    if not argv:
        print(name)
        return 0
    if len(argv) < 2 or "--machine" in argv:
        print("usage: asv_machine.py [asv SUBCOMMAND ARGS...]  (--machine is added for you)", file=sys.stderr)
        return 2
    cmd = [*argv[:2], "--machine", name, *argv[2:]] if argv[1] in MACHINE_COMMANDS else list(argv)
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
