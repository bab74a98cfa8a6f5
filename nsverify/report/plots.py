"""The report's overview plots, drawn from the report JSON alone (so a stored run renders its own data), as
base64 PNG strings embedded in the page (it works offline):

* :func:`forest_svg`: each claim's measured value with its interval against its threshold (the claims that record
  a numeric value, interval and threshold), one row per claim on its own scale, coloured by verdict (inline SVG:
  text stays sharp, and it costs no matplotlib time);
* :func:`conventions_png`: the conventions matrix, (op, case) x (device, dtype, mode), coloured by rule, the
  evaluations outside the Clarke set crossed (the conventions section's ``convention`` metrics and its
  ``data["outside_clarke"]``);
* :func:`releases_png`: the rule changes across the recorded torch releases (the releases section's
  ``data["releases"]`` and ``data["changes"]``, read from ``nsverify/data/conventions/``);
* :func:`zones_png`: the zone volumes per precision (the zones section's ``share`` metrics with their 95%
  intervals, one line per setting).

Each returns ``None`` when the report has no data for it; the others return base64 PNG.
"""
from __future__ import annotations

from nsverify.report import FIGURE_DPI, figure_png

DTYPES = ("float16", "bfloat16", "float32", "float64")
VERDICT_COLOURS = {True: "#17692b", False: "#b00020", None: "#777777"}
#: the rules' colours in the heatmap: categorical, no red (a rule is not an alarm)
RULE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                "#aec7e8", "#ffbb78", "#98df8a")
#: at most this many rows in the forest plot (the table has every claim) and in the conventions heatmap (the
#: section's table has every case; the cases whose rule varies or leaves the Clarke set are drawn first)
MAX_FOREST = 40
MAX_HEATMAP = 60
#: every label of the PNG plots, in points: 9 pt at FIGURE_DPI = 90 is 11.25 px in the PNG, which the page shows at
#: its own width or wider (PLOT_WIDTH_PX), so a label is never under 11 px on screen
FONT_PT = 9
PLOT_WIDTH_IN = 6.4
PLOT_WIDTH_PX = int(PLOT_WIDTH_IN * FIGURE_DPI)
FONT_PX = FONT_PT * FIGURE_DPI / 72


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")


def forest_rows(claims: list[dict]) -> list[dict]:
    """The claims the forest plot shows: a numeric value, lo, hi and threshold value."""
    return [c for c in claims if all(_number(c.get(k)) for k in ("value", "lo", "hi"))
            and isinstance(c.get("threshold"), dict) and _number(c["threshold"].get("value"))]


#: the forest plot's geometry (px): width, label column, line height, title band, plot area; its font (px). The
#: page draws it across the whole summary (about 1,170 px at a 1280-px window), so its text stays >= 11 px
FOREST_WIDTH_PX, _FLINE, _FTOP = 1160, 15, 26
_FX0, _FX1 = 640, FOREST_WIDTH_PX - 70
FOREST_FONT_PX = 12
#: a label wraps at this many characters (never truncated)
_FWRAP = 92


def forest_label(c: dict) -> list[str]:
    """The forest row's label, wrapped (never truncated): ``paper, where: claim``, then the measured quantity (the
    claim's ``metric``: the row's unit)."""
    import textwrap

    src = c.get("source") if isinstance(c.get("source"), dict) else {}
    head = ", ".join(t for t in (src.get("paper"), src.get("where")) if t)
    lines = textwrap.wrap(" ".join(f"{head}: {c.get('claim', '')}".split()), _FWRAP)
    if c.get("metric"):
        lines += textwrap.wrap(" ".join(f"x: {c['metric']}".split()), _FWRAP)
    return lines or [""]


def _forest_row(top: float, i: int, c: dict) -> tuple[str, float]:
    """One row of the forest plot starting at ``top`` px, and its height."""
    from html import escape

    v, lo, hi, th = c["value"], c["lo"], c["hi"], c["threshold"]["value"]
    left, right = min(lo, th, v), max(hi, th, v)
    span = (right - left) or abs(right) or 1.0
    left, right = left - 0.05 * span, right + 0.05 * span

    def x(t: float) -> str:
        return f"{_FX0 + (_FX1 - _FX0) * (t - left) / (right - left):.1f}"

    lines = forest_label(c)
    height = _FLINE * max(len(lines), 2) + 6
    y = top + 3 + _FLINE  # the bar sits on the label's first line
    colour = VERDICT_COLOURS.get(c.get("held"), "#777777")
    title = escape(f"{c.get('claim', '')}: {v:.4g} [{lo:.4g}, {hi:.4g}], threshold {th:.4g} "
                   f"({c['threshold'].get('origin', '')}); {c.get('verdict', '')}")
    band = "#f7f7f7" if i % 2 else "#ffffff"
    text = "".join(f'<text x="4" y="{top + 3 + _FLINE * (k + 1) - 3:.1f}"'
                   + (' fill="#555"' if k and line.startswith("x: ") else "") + f">{escape(line)}</text>"
                   for k, line in enumerate(lines))
    return (f'<g class="forest-row"><title>{title}</title>'
            f'<rect x="0" y="{top:.1f}" width="{FOREST_WIDTH_PX}" height="{height}" fill="{band}"/>{text}'
            f'<text x="{_FX0 - 4}" y="{y + _FLINE - 1:.1f}" text-anchor="end" fill="#555">{left:.3g}</text>'
            f'<text x="{_FX1 + 4}" y="{y + _FLINE - 1:.1f}" fill="#555">{right:.3g}</text>'
            f'<line x1="{_FX0}" x2="{_FX1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<line x1="{x(lo)}" x2="{x(hi)}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" stroke-width="3"/>'
            f'<line x1="{x(th)}" x2="{x(th)}" y1="{y - 7:.1f}" y2="{y + 7:.1f}" stroke="#cc6600" stroke-width="2"/>'
            f'<circle cx="{x(v)}" cy="{y:.1f}" r="4.5" fill="{colour}"/></g>'), height


def forest_svg(claims: list[dict]) -> str | None:
    """The forest plot as inline SVG (one row per claim on its own scale, in the unit of the claim's measured
    quantity, named under its label: the interval as a bar, the value as a dot coloured by verdict, the threshold
    as an orange tick; the row's scale printed at both ends)."""
    rows = forest_rows(claims)[:MAX_FOREST]
    if not rows:
        return None
    parts, top = [], float(_FTOP)
    for i, c in enumerate(rows):
        svg, height = _forest_row(top, i, c)
        parts.append(svg)
        top += height
    h = int(top) + 6
    w = FOREST_WIDTH_PX
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'role="img" aria-label="forest plot of the claims" font-family="sans-serif" '
            f'font-size="{FOREST_FONT_PX}">'
            f'<text x="4" y="17">claim (x: the measured quantity, the row\'s unit)</text>'
            f'<text x="{_FX0}" y="17">measured value (dot), its interval (bar), the threshold (orange tick); '
            'each row on its own scale</text>'
            + "".join(parts) + "</svg>")


def _columns(keys) -> list[tuple[str, str, str]]:
    rank = {d: i for i, d in enumerate(DTYPES)}
    modes = ("eager", "func", "jvp", "compile")
    return sorted(keys, key=lambda k: (k[0] != "cpu", k[0], rank.get(k[1], 9), modes.index(k[2])
                                       if k[2] in modes else 9, k[2]))


def conventions_png(section: dict) -> str | None:
    data = section.get("data") or {}
    cells = {}
    for m in data.get("metrics") or []:
        parts = str(m.get("key", "")).split("|")
        if m.get("kind") == "convention" and len(parts) == 5 and isinstance(m.get("value"), str):
            cells[(parts[0], parts[1]), (parts[3], parts[2], parts[4])] = m["value"]
    if not cells:
        return None
    outside = {tuple(str(k).split("|")) for k in data.get("outside_clarke") or []}
    rows = list(dict.fromkeys(r for r, _ in cells))
    varied = {r for r in rows if len({v for (rr, _), v in cells.items() if rr == r}) > 1}
    varied |= {(k[0], k[1]) for k in outside}
    total = len(rows)
    rows = sorted(rows, key=lambda r: r not in varied)[:MAX_HEATMAP]
    cells = {k: v for k, v in cells.items() if k[0] in rows}
    cols = _columns({c for _, c in cells})
    rules = sorted({v for v in cells.values()})
    plt = _plt()
    import numpy as np
    from matplotlib.colors import ListedColormap

    grid = np.full((len(rows), len(cols)), np.nan)
    for (r, c), v in cells.items():
        grid[rows.index(r), cols.index(c)] = rules.index(v)
    cmap = ListedColormap([RULE_COLOURS[i % len(RULE_COLOURS)] for i in range(len(rules))])
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_IN, 0.16 * len(rows) + 0.14 * len(rules) + 2.6),
                           layout="constrained")
    ax.imshow(grid, aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(rules) - 0.5, interpolation="nearest")
    for (op, case), (dev, dt, mode) in cells:
        if (op, case, dt, dev, mode) in outside:
            ax.plot(cols.index((dev, dt, mode)), rows.index((op, case)), "x", color="black", ms=4, mew=1.2)
    ax.set_yticks(range(len(rows)), [_short(f"{op} {case}", 34) for op, case in rows], fontsize=FONT_PT)
    ax.set_xticks(range(len(cols)), [f"{dev} {dt.replace('float', 'f')} {mode}"
                                     for dev, dt, mode in cols], fontsize=FONT_PT, rotation=90)
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i)) for i in range(len(rules))]
    handles.append(plt.Line2D([], [], marker="x", color="black", ls=""))
    fig.legend(handles, rules + ["outside the Clarke set"], fontsize=FONT_PT, ncol=3, loc="outside upper center",
               frameon=False, title="rule PyTorch's derivative follows (colour)", title_fontsize=FONT_PT)
    if total > len(rows):
        ax.set_xlabel(f"{len(rows)} of {total} cases shown (those whose rule varies first)", fontsize=FONT_PT)
    return figure_png(fig, tight=False)


def releases_png(section: dict) -> str | None:
    data = section.get("data") or {}
    releases = [str(r) for r in data.get("releases") or []]
    changes = [c for c in data.get("changes") or [] if isinstance(c, dict) and str(c.get("release")) in releases]
    if not releases:
        return None
    lanes = list(dict.fromkeys(f"{c.get('op')} {c.get('case')}" for c in changes)) or ["(no change)"]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_IN, 0.36 * len(lanes) + 1.9), layout="constrained")
    for x in range(len(releases)):
        ax.axvline(x, color="#dddddd", lw=0.8, zorder=0)
    for c in changes:
        x, y = releases.index(str(c["release"])), lanes.index(f"{c.get('op')} {c.get('case')}")
        bad = "no" in (c.get("clarke_before"), c.get("clarke_after"))
        ax.plot([x], [y], "D", color="#b00020" if bad else "#245", ms=6)
        ax.annotate(f"{c.get('rule_before')} \u2192 {c.get('rule_after')}\n({c.get('cells')} cells"
                    + (f"; Clarke {c.get('clarke_before')} \u2192 {c.get('clarke_after')}" if bad else "") + ")",
                    (x, y), xytext=(6, 3), textcoords="offset points", fontsize=FONT_PT)
    ax.set_xticks(range(len(releases)), releases, fontsize=FONT_PT, rotation=45)
    ax.set_yticks(range(len(lanes)), [_short(lane, 34) for lane in lanes], fontsize=FONT_PT)
    ax.set_xlim(-0.5, len(releases) + 3.5)
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    ax.invert_yaxis()
    ax.set_title(f"torch {releases[0]} .. {releases[-1]}, CPU; red: a side outside the Clarke set",
                 fontsize=FONT_PT)
    return figure_png(fig, tight=False)


def zone_series(section: dict) -> dict[str, dict[str, tuple]]:
    """``{setting: {dtype: (value, lo, hi)}}`` from the zones section's share metrics whose key names a dtype
    (the setting is the key without it)."""
    out: dict[str, dict[str, tuple]] = {}
    for m in (section.get("data") or {}).get("metrics") or []:
        parts = str(m.get("key", "")).split("|")
        dts = [p for p in parts if p in DTYPES]
        if m.get("kind") != "share" or len(dts) != 1 or not all(_number(m.get(k)) for k in ("value", "lo", "hi")):
            continue
        setting = "|".join(p for p in parts if p != dts[0])
        out.setdefault(setting, {})[dts[0]] = (m["value"], m["lo"], m["hi"])
    return out


def zones_png(section: dict) -> str | None:
    from nsverify.report.claims_table import metric_label

    series = zone_series(section)
    if not series:
        return None
    plt = _plt()
    dts = [d for d in DTYPES if any(d in s for s in series.values())]
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_IN, 3.4 + 0.2 * len(series)), layout="constrained")
    n = len(series)
    for i, (setting, pts) in enumerate(series.items()):
        xs = [dts.index(d) + (i - (n - 1) / 2) * 0.6 / max(n, 1) for d in dts if d in pts]
        vs = [pts[d] for d in dts if d in pts]
        ax.errorbar(xs, [v for v, _, _ in vs], yerr=[[v - lo for v, lo, _ in vs], [hi - v for v, _, hi in vs]],
                    fmt="o", ms=4, capsize=2, label=_short(metric_label(setting), 60))
    ax.set_xticks(range(len(dts)), dts, fontsize=FONT_PT)
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("share of impacted pairs/draws (95% interval)", fontsize=FONT_PT)
    ax.tick_params(axis="y", labelsize=FONT_PT)
    fig.legend(fontsize=FONT_PT, loc="outside lower center", frameon=False, ncol=1)
    return figure_png(fig, tight=False)
