"""Small HTML building blocks: escaped text, tables, colour scales, bars and cards.

Everything here returns plain HTML strings with inline styles (no script, no stylesheet link, no
network): the output reads the same in JupyterLab, VS Code, an exported HTML page, a sanitized
untrusted notebook (which keeps inline styles but drops ``<style>`` blocks) and GitHub's viewer.
Every piece of text that comes from data (tokens, site names, model names) goes through
:func:`esc`, so a token such as ``<script>`` shows as text.

Cells are strings; a :class:`Raw` string is HTML already built (and escaped) by a caller.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px"
"""The font of every card: monospace, so tokens and numbers line up."""
MUTED = "#6b7280"
"""Colour of secondary text (works on light and dark backgrounds)."""
_CELL = "padding:2px 6px;border:1px solid rgba(128,128,128,0.25);text-align:left"
_HEAD = _CELL + ";font-weight:600;background:rgba(128,128,128,0.12)"


class Raw(str):
    """HTML that is already built and escaped (not escaped again by :func:`table`)."""

    __slots__ = ()


def esc(value: Any) -> str:
    """``value`` as escaped text (``<`` ``>`` ``&`` and quotes), safe in content and attributes."""
    return html.escape(str(value), quote=True)


def cell(value: Any) -> str:
    """A table cell's content: :class:`Raw` as is, numbers formatted, everything else escaped."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, float):
        return esc(fmt(value))
    return esc(value)


def fmt(value: Any, digits: int = 3) -> str:
    """A number for people: ``digits`` significant digits, ``-`` for ``None``/NaN."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(number):
        return "-"
    if number != 0 and (abs(number) >= 1e6 or abs(number) < 1e-3):
        return f"{number:.{digits - 1}e}"
    if abs(number) >= 10**digits:
        return f"{number:,.0f}"
    return f"{number:.{digits}g}"


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def token(text: str) -> str:
    """A token made visible: leading spaces as ``␣``, newlines as ``⏎``, tabs as ``⇥``; escaped."""
    shown = str(text).replace("\n", "⏎").replace("\t", "⇥").replace("\r", "")
    stripped = shown.lstrip(" ")
    shown = "␣" * (len(shown) - len(stripped)) + stripped
    return esc(shown if shown else "∅")


def table(
    header: Sequence[Any] | None,
    rows: Iterable[Sequence[Any]],
    *,
    cell_styles: Iterable[Sequence[str]] | None = None,
) -> str:
    """An HTML table; cells are escaped unless :class:`Raw`.

    Args:
        header: Column titles (``None``: no header row).
        rows: The rows.
        cell_styles: Extra inline CSS per cell, in the same shape as ``rows``.
    """
    parts = ["<table style='border-collapse:collapse;margin:4px 0'>"]
    if header is not None:
        parts.append("<tr>" + "".join(f"<th style='{_HEAD}'>{cell(h)}</th>" for h in header))
        parts.append("</tr>")
    styles = iter(cell_styles) if cell_styles is not None else None
    for row in rows:
        extra = next(styles) if styles is not None else [""] * len(row)
        parts.append(
            "<tr>"
            + "".join(
                f"<td style='{_CELL};{s}'>{cell(v)}</td>" for v, s in zip(row, extra, strict=True)
            )
            + "</tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def kv(pairs: Iterable[tuple[str, Any]]) -> str:
    """A two-column key/value table (keys in the muted colour)."""
    rows = [(Raw(f"<span style='color:{MUTED}'>{esc(k)}</span>"), v) for k, v in pairs]
    return table(None, rows)


def note(text: str) -> str:
    """A small muted paragraph (used for what was left out of a capped view)."""
    return f"<div style='color:{MUTED};margin:2px 0'>{esc(text)}</div>"


def section(title: str) -> str:
    """A small bold heading inside a card."""
    return f"<div style='font-weight:600;margin:8px 0 2px'>{esc(title)}</div>"


def card(title: str, subtitle: str, body: str, footer: str = "") -> str:
    """The frame every object shows itself in: a title line, the body and a footer."""
    head = f"<span style='font-weight:700'>{esc(title)}</span>"
    if subtitle:
        head += f" <span style='color:{MUTED}'>{esc(subtitle)}</span>"
    return (
        f"<div class='workbench-repr' style='{FONT};line-height:1.35;max-width:100%;"
        "overflow-x:auto;padding:4px 0'>"
        f"<div style='margin-bottom:4px'>{head}</div>{body}{footer}</div>"
    )


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


_WHITE = (255, 255, 255)
_BLUE = (8, 69, 148)
_RED = (165, 15, 21)


def sequential(value: float, lo: float = 0.0, hi: float = 1.0) -> str:
    """Inline CSS colouring a cell from white (``lo``) to dark blue (``hi``), text readable."""
    if value is None or not math.isfinite(value):
        return "background:#f3f4f6;color:#111"
    t = 0.0 if hi <= lo else min(max((value - lo) / (hi - lo), 0.0), 1.0)
    t = math.sqrt(t)  # small probabilities stay visible
    r, g, b = _mix(_WHITE, _BLUE, t)
    return f"background:rgb({r},{g},{b});color:{'#fff' if t > 0.55 else '#111'}"


def diverging(value: float, limit: float) -> str:
    """Inline CSS: red below zero, white at zero, blue above, saturating at ``±limit``."""
    if value is None or not math.isfinite(value) or limit <= 0:
        return "background:#f3f4f6;color:#111"
    t = min(abs(value) / limit, 1.0)
    r, g, b = _mix(_WHITE, _BLUE if value > 0 else _RED, t)
    return f"background:rgb({r},{g},{b});color:{'#fff' if t > 0.6 else '#111'}"


def bar(value: float, hi: float, width: int = 80, colour: str = "#0072B2") -> Raw:
    """A horizontal bar of ``value / hi`` of ``width`` pixels, followed by the number."""
    if value is None or not math.isfinite(value) or hi <= 0:
        return Raw(esc(fmt(value)))
    px = round(width * min(max(value / hi, 0.0), 1.0))
    return Raw(
        f"<span style='display:inline-block;width:{width}px;background:rgba(128,128,128,0.15);"
        f"vertical-align:middle'><span style='display:block;width:{px}px;height:9px;"
        f"background:{colour}'></span></span> {esc(fmt(value))}"
    )


def compress_sites(names: Sequence[str]) -> list[str]:
    """Site names grouped by kind with layer ranges: ``["resid_post.0-11", "final_norm"]``."""
    groups: dict[str, list[int]] = {}
    singles: list[str] = []
    for name in names:
        kind, _, layer = name.rpartition(".")
        if kind and layer.lstrip("-").isdigit():
            groups.setdefault(kind, []).append(int(layer))
        else:
            singles.append(name)
    out = []
    for kind, layers in groups.items():
        out.append(f"{kind}.{_ranges(layers)}")
    return out + singles


def _ranges(layers: list[int]) -> str:
    values = sorted(set(layers))
    if len(values) == 1:
        return str(values[0])
    spans, start, prev = [], values[0], values[0]
    for v in values[1:]:
        if v != prev + 1:
            spans.append((start, prev))
            start = v
        prev = v
    spans.append((start, prev))
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return f"{{{text}}}" if len(spans) > 1 else text
