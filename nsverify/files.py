"""nsverify's files: checking paths before any work, and writing output crash-safely (low level).

*Checks* (every command runs them on its path options before computing anything; each failure is an
:class:`~nsverify.errors.OutputDirError` or :class:`~nsverify.errors.InputFileError` naming the path, the
problem and the fix):

* :func:`check_output_file`: not a directory, under a directory (existing, or creatable from its nearest
  existing ancestor), and that directory is writable. Creates nothing.
* :func:`check_output_dir`: a directory, or a path where one can be created, that is writable.
* :func:`check_input_file` / :func:`check_input_dir`: exists, the right kind, readable.

Writability is *probed* (a temporary file created and removed in the directory), because permission bits
do not tell: root ignores them, and read-only or virtual filesystems refuse writes regardless.

*Writes*: a file is written beside its target and renamed into place (:func:`atomic_write_text`), so no reader
sees half of it; files and directories get the permissions the process umask gives (0644/0755 under the usual
umask 022), so a web server can serve a report. Used by the report (``report.json``, ``index.html``, partial
results), ``conventions --json`` and the resumable experiments (:mod:`nsverify.papers.zones.volume`,
:mod:`nsverify.papers.arnekvist.dying_relu`).
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from nsverify.errors import InputFileError, NsverifyError, OutputDirError


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def default_mode(directory: bool = False) -> int:
    """The mode ``open``/``mkdir`` would give a new file (0666) or directory (0777) under the current umask."""
    return (0o777 if directory else 0o666) & ~_umask()


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and not p.is_symlink():
        if p.parent == p:
            break
        p = p.parent
    return p


def _probe(directory: Path, make_dir: bool) -> str | None:
    """None if a file (``make_dir``: a directory) can be created in ``directory``, else the OS's reason."""
    try:
        if make_dir:
            os.rmdir(tempfile.mkdtemp(dir=directory, prefix=".nsverify-probe-"))
        else:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".nsverify-probe-")
            os.close(fd)
            os.unlink(tmp)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _check_parent(path: Path, option: str, fix: str) -> None:
    parent = path.parent
    anc = _nearest_existing(parent)
    if not anc.is_dir():
        raise OutputDirError(f"{option} {str(path)!r}: {str(anc)!r} is a file, not a directory, so nothing can be "
                             f"written under it. {fix}")
    missing = anc != parent
    why = _probe(anc, make_dir=missing)
    if why is not None:
        what = f"cannot create the directory {str(parent)!r} in {str(anc)!r}" if missing else \
            f"cannot write in the directory {str(anc)!r}"
        raise OutputDirError(f"{option} {str(path)!r}: {what} ({why}). {fix}")


def check_output_file(path: str | os.PathLike, option: str = "output file") -> Path:
    """Raise :class:`OutputDirError` unless a file can be written at ``path`` (see the module docstring)."""
    p = Path(path)
    fix = f"Choose a writable file path for {option}, for example ./{p.name or 'out.json'}."
    if p.is_dir():
        raise OutputDirError(f"{option} {str(p)!r} is a directory; give a file path, for example "
                             f"{str(p / 'out.json')!r}.")
    _check_parent(p, option, fix)
    return p


def check_output_dir(path: str | os.PathLike, option: str = "output directory") -> Path:
    """Raise :class:`OutputDirError` unless ``path`` is (or can become) a writable directory. Creates nothing."""
    p = Path(path)
    fix = f"Choose a writable directory with {option} DIR (for example {option} ./reports)."
    if p.exists() or p.is_symlink():
        if not p.is_dir():
            raise OutputDirError(f"{option} {str(p)!r} is a file, not a directory. {fix}")
        why = _probe(p, make_dir=False)
        if why is not None:
            raise OutputDirError(f"{option} {str(p)!r}: cannot write in it ({why}). {fix}")
        return p
    _check_parent(p, option, fix)
    return p


def make_output_dir(path: str | os.PathLike, option: str = "output directory") -> Path:
    """Check ``path`` with :func:`check_output_dir`, then create it (and its parents) if it does not exist."""
    p = check_output_dir(path, option)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"{option} {str(p)!r}: cannot create it ({exc.strerror or exc}). Choose a writable "
                             f"directory.") from exc
    return p


def _check_input(path: str | os.PathLike, option: str, directory: bool) -> Path:
    p = Path(path)
    kind = "directory" if directory else "file"
    if not p.exists():
        raise InputFileError(f"{option} {str(p)!r} does not exist; give an existing {kind}.")
    if p.is_dir() != directory:
        other = "a directory" if p.is_dir() else "a file"
        raise InputFileError(f"{option} {str(p)!r} is {other}, not a {kind}; give a {kind}.")
    try:
        if directory:
            next(os.scandir(p), None)
        else:
            with open(p, "rb") as fh:
                fh.read(1)
    except OSError as exc:
        raise InputFileError(f"{option} {str(p)!r} cannot be read ({exc.strerror or exc}); check its "
                             f"permissions.") from exc
    return p


def check_input_file(path: str | os.PathLike, option: str = "input file") -> Path:
    """Raise :class:`InputFileError` unless ``path`` is an existing, readable file (not a directory)."""
    return _check_input(path, option, directory=False)


def check_input_dir(path: str | os.PathLike, option: str = "input directory") -> Path:
    """Raise :class:`InputFileError` unless ``path`` is an existing directory whose entries can be listed."""
    return _check_input(path, option, directory=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    The file gets the umask's default permissions (``tempfile`` alone would leave it 0600).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), default_mode())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_default(obj):
    """``json.dumps(default=...)`` for numpy scalars/arrays, Fractions (as strings), sets and tuples."""
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    from fractions import Fraction

    if isinstance(obj, Fraction):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"report sections must return JSON-able data; got {type(obj).__name__}")


# --------------------------------------------------------------------------------------------------------------
# Generated blocks of the docs: the one writer and checker (the registry's op lists, the README's numbers)
# --------------------------------------------------------------------------------------------------------------
def repo_root() -> Path:
    """The repository root of this checkout (the directory above the package)."""
    return Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class DocBlock:
    """One generated block: ``name`` in ``path`` (relative to the repository root), between the markers
    ``<!-- PREFIX:NAME begin -->`` and ``<!-- PREFIX:NAME end -->``, rendered by ``render``; ``inline``: the block
    sits inside a line (no line breaks around it)."""

    path: str
    name: str
    render: Callable[[], str]
    inline: bool = False
    prefix: str = "registry"

    @property
    def begin(self) -> str:
        return f"<!-- {self.prefix}:{self.name} begin -->"

    @property
    def end(self) -> str:
        return f"<!-- {self.prefix}:{self.name} end -->"

    def text(self) -> str:
        """The block as it belongs between its markers."""
        body = self.render()
        return body if self.inline else f"\n{body}\n"

    def pattern(self) -> re.Pattern:
        return re.compile(re.escape(self.begin) + "(.*?)" + re.escape(self.end), re.S)


def regenerate_docs(blocks: Sequence[DocBlock], command: str, root: Path | None = None, *,
                    write: bool = False) -> list[str]:
    """The docs (paths relative to ``root``, default this checkout) whose generated blocks are stale; with
    ``write``, rewrite them (the docs that changed). A doc that is missing, or holds a block's markers other than
    once, raises naming ``command``, the command that regenerates the blocks."""
    root = root or repo_root()
    out: list[str] = []
    for rel in dict.fromkeys(b.path for b in blocks):
        path = root / rel
        if not path.is_file():
            raise NsverifyError(f"{path} does not exist: run {command} from a clone of nsverify (the docs are not "
                                "installed with the package), or pass --root DIR of the clone.")
        text = path.read_text(encoding="utf-8")
        new = text
        for b in (b for b in blocks if b.path == rel):
            found = b.pattern().findall(new)
            if len(found) != 1:
                raise NsverifyError(f"{rel}: expected one block between {b.begin} and {b.end}, found {len(found)}: "
                                    f"put the two markers where the block belongs (once), then run {command}.")
            body = b.text()
            new = b.pattern().sub(lambda m, body=body, b=b: b.begin + body + b.end, new)
        if new != text:
            if write:
                path.write_text(new, encoding="utf-8")
            out.append(rel)
    return out

