"""The documentation matches the code and the stored results.

* No Markdown file (README.md, docs/*.md) repeats a section heading.
* README's Commands table names every command and every option of the parsers (``nsverify.cli``).
* README's library table names exactly the public API, ``nsverify.__all__``.
* The H200 zone-volume table of docs/zones.md is the one generated from ``nsverify/data/gpu/zones.json``
  (:func:`h200_table`); when the stored results change, the failure prints the new table.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nsverify.cli import build_parser
from tests.test_cli_validation import leaf_parsers, value_actions

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def headings(text: str) -> list[str]:
    """The ATX headings of a Markdown text, outside fenced code blocks (where '# ...' is a shell comment)."""
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m:
            fence = None if fence and m.group(1)[0] == fence[0] else (fence or m.group(1))
            continue
        if fence is None:
            h = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if h:
                out.append(h.group(2).strip())
    return out


def test_headings_parser_ignores_code_and_finds_repeats():
    text = "# A\n## B\n```bash\n# not a heading\n```\n## B\n"
    assert headings(text) == ["A", "B", "B"]


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: p.name)
def test_no_section_heading_is_repeated(path):
    hs = headings(path.read_text(encoding="utf-8"))
    repeated = sorted({h for h in hs if hs.count(h) > 1})
    assert not repeated, f"{path.name} repeats the section heading(s) {repeated}: merge them into one"


def readme_commands_table() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Commands")
    end = text.index("\n## ", start + 1)
    return text[start:end]


@pytest.mark.parametrize("words", [w for w, _ in leaf_parsers()], ids=lambda w: " ".join(w))
def test_readme_commands_table_lists_every_command_and_option(words):
    table = readme_commands_table()
    rows = [line for line in table.splitlines() if line.startswith("| `nsverify " + " ".join(words))]
    assert rows, f"README's Commands table has no row for `nsverify {' '.join(words)}`"
    parser = dict(leaf_parsers())[words]
    flags = [a for a in parser._actions if a.option_strings and a.dest not in ("help",)]
    missing = [a.option_strings[0] for a in flags if not any(a.option_strings[0] in r for r in rows)]
    assert not missing, f"README's row for `nsverify {' '.join(words)}` lacks {missing}"


def library_table_names(text: str) -> list[str]:
    """The names in the first column of README's "The library" table (`name(args)` -> name)."""
    start = text.index("## The library")
    end = text.index("\n## ", start + 1)
    names = []
    for line in text[start:end].splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names += [re.match(r"\w+", n).group(0) for n in re.findall(r"`([^`]+)`", first)]
    return names


def test_readme_library_table_is_the_public_api():
    import nsverify

    names = library_table_names((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(names) == len(set(names)), f"README's library table names some twice: {names}"
    public = set(nsverify.__all__) - {"__version__"}
    assert set(names) == public, (f"README's library table and nsverify.__all__ differ: only in the table "
                                  f"{sorted(set(names) - public)}, only in __all__ {sorted(public - set(names))}")


def test_library_table_reader_sees_names_and_calls():
    text = "## The library\n| name | what |\n|---|---|\n| `f(x, y)` | a |\n| `A`, `B` | b |\n\n## Next\n"
    assert library_table_names(text) == ["f", "A", "B"]


def test_every_command_is_a_leaf_of_the_parser():
    """The parser walk the two tests above rely on sees every command module."""
    assert len(list(leaf_parsers())) == 9 and build_parser().prog == "nsverify"
    assert all(value_actions(p) is not None for _, p in leaf_parsers())


def sci(x: float) -> str:
    """Two significant digits, as the docs write them: 0, 0.24, 3.5, 668, 6.5e-4."""
    if x == 0:
        return "0"
    if 0.01 <= abs(x) < 10:
        return f"{x:.2g}"
    if abs(x) >= 10:
        return f"{x:.0f}"
    mant, exp = f"{x:.1e}".split("e")
    return f"{mant.removesuffix('.0')}e{int(exp)}"


def h200_table(data: dict) -> str:
    """The Markdown table of docs/zones.md, generated from the stored H200 results."""
    lines = ["| dtype | BN | pairs with D > tau (Table 3.4) | max D | tau1 measured | pairs with D > tau1 |",
             "|---|---|---|---|---|---|"]
    for bn in ("noBN", "BN"):
        vol = data["volumes"][bn]
        for dt in vol["config"]["dtypes"]:
            d = vol["dtypes"][dt]
            tau = vol["thresholds"][dt]
            tau1 = data["taus"][f"{dt}|{bn}"]["tau1"]
            above = sum(x > tau1 for x in d["D"])
            ps = d["pair_share"]
            lines.append(f"| {dt} | {'yes' if bn == 'BN' else 'no'} | {ps['count']}/{ps['n']} (tau {sci(tau)}) | "
                         f"{sci(d['max_D'])} | {sci(tau1)} | {above}/{len(d['D'])} |")
    return "\n".join(lines)


def test_zones_doc_h200_table_is_generated_from_the_stored_results():
    data = json.loads((ROOT / "nsverify" / "data" / "gpu" / "zones.json").read_text())
    expected = h200_table(data)
    doc = (ROOT / "docs" / "zones.md").read_text(encoding="utf-8")
    assert expected in doc, f"docs/zones.md should hold this table (from nsverify/data/gpu/zones.json):\n{expected}"
