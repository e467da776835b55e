"""Paper figures: one plotly template for the whole workbench, and export to PDF/SVG/PNG/HTML.

The template (``"workbench"``) fixes fonts, margins and a colour-blind-safe palette (Okabe & Ito,
2008). Sizes follow two-column paper layouts: :data:`ONE_COLUMN` and :data:`TWO_COLUMN` widths in
pixels at the export scale. Static export goes through kaleido, which drives a system Chromium
(started once per process and reused, so each further figure costs well under a second).

Every exported file says what made it: PDF (document info: Title, Creator, Subject, Keywords and a
``/WorkbenchProvenance`` entry), SVG (``<title>`` and ``<metadata id="workbench-provenance">``) and
PNG (``tEXt`` chunks ``Title``, ``Software`` and ``workbench:provenance``) carry a JSON provenance
record: workbench version, git commit, creation time and, inside ``workbench run``, the analysis and
its parameters (passed to the kernel through ``$WORKBENCH_PROVENANCE``). :func:`read_provenance`
reads it back.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import warnings
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
"""Colour-blind-safe qualitative palette."""
ONE_COLUMN = 480
TWO_COLUMN = 980
HEIGHT = 360
FORMATS = ("pdf", "svg", "png", "html")
TEMPLATE = "workbench"


class ExportError(WorkbenchError):
    """Static export is impossible here (no kaleido or no Chromium)."""


def template() -> Any:
    """Registers (once) and returns the ``workbench`` plotly template."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if TEMPLATE not in pio.templates:
        pio.templates[TEMPLATE] = go.layout.Template(
            layout=go.Layout(
                font={"family": "Helvetica, Arial, sans-serif", "size": 12, "color": "#222"},
                colorway=list(OKABE_ITO),
                paper_bgcolor="white",
                plot_bgcolor="white",
                margin={"l": 60, "r": 20, "t": 40, "b": 50},
                xaxis={
                    "showline": True,
                    "linecolor": "#444",
                    "ticks": "outside",
                    "gridcolor": "#eee",
                },
                yaxis={
                    "showline": True,
                    "linecolor": "#444",
                    "ticks": "outside",
                    "gridcolor": "#eee",
                },
                legend={"bgcolor": "rgba(255,255,255,0.8)"},
                colorscale={"sequential": "Viridis", "diverging": "RdBu"},
                width=ONE_COLUMN,
                height=HEIGHT,
            )
        )
    return pio.templates[TEMPLATE]


def style(
    fig: Any, *, title: str | None = None, width: int = ONE_COLUMN, height: int = HEIGHT
) -> Any:
    """Applies the workbench template and a paper size to ``fig``; returns it."""
    fig.update_layout(template=template(), width=width, height=height)
    if title is not None:
        # a taller top margin keeps the title clear of subplot titles
        fig.update_layout(title={"text": title, "x": 0.02, "font": {"size": 14}}, margin={"t": 80})
    return fig


def notebook_renderer() -> None:
    """Makes figures in notebooks render everywhere offline: JupyterLab, nbconvert HTML, papermill.

    Sets plotly's default renderer to ``plotly_mimetype+notebook``: JupyterLab draws the plotly
    mimetype, and exported HTML (nbconvert) gets plotly.js embedded once per notebook, no CDN.
    Call it once, in a notebook's imports cell.
    """
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+notebook"


def chromium_path() -> str | None:
    """The Chromium (or Chrome) executable kaleido will drive, if any."""
    override = os.environ.get("BROWSER_PATH")
    if override:
        return override
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def provenance(fig: Any = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance record embedded in exported figures.

    Args:
        fig: The figure (its title is recorded).
        extra: More entries (they win over the automatic ones).
    """
    from workbench.runner.provenance import git_state, now_iso, versions

    record: dict[str, Any] = {"workbench": versions().get("workbench"), "created": now_iso()}
    record["git_commit"] = git_state()[0]
    run = os.environ.get("WORKBENCH_PROVENANCE")
    if run:
        try:
            record.update(json.loads(run))
        except ValueError:
            record["run"] = run
    if fig is not None:
        title = fig.layout.title.text
        if title:
            record["title"] = title
    record.update(extra or {})
    return record


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def embed_png(data: bytes, meta: Mapping[str, Any]) -> bytes:
    """Adds ``tEXt`` chunks (Title, Software, workbench:provenance) right after the PNG header."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ExportError("kaleido returned something that is not a PNG")
    ihdr_end = 8 + 12 + struct.unpack(">I", data[8:12])[0]
    texts = {
        "Title": str(meta.get("title", "")),
        "Software": f"workbench {meta.get('workbench')}",
        "workbench:provenance": json.dumps(meta, default=str),
    }
    chunks = b"".join(
        _png_chunk(b"tEXt", k.encode("latin-1") + b"\0" + v.encode("latin-1", "replace"))
        for k, v in texts.items()
    )
    return data[:ihdr_end] + chunks + data[ihdr_end:]


def embed_svg(data: bytes, meta: Mapping[str, Any]) -> bytes:
    """Adds ``<title>`` and ``<metadata id="workbench-provenance">`` inside the root ``<svg>``."""
    from xml.sax.saxutils import escape

    text = data.decode()
    start = text.find("<svg")
    end = text.find(">", start)
    if start < 0 or end < 0:
        raise ExportError("kaleido returned something that is not an SVG")
    record = escape(json.dumps(meta, default=str))
    inner = f"<title>{escape(str(meta.get('title', '')))}</title>"
    inner += f'<metadata id="workbench-provenance">{record}</metadata>'
    return (text[: end + 1] + inner + text[end + 1 :]).encode()


def embed_pdf(data: bytes, meta: Mapping[str, Any]) -> bytes:
    """Sets the PDF document info (Title, Creator, Subject, Keywords, /WorkbenchProvenance)."""
    import io

    from pypdf import PdfReader, PdfWriter

    # Chromium's PDFs declare one object fewer in the trailer than they hold; pypdf reads them
    # correctly but logs a warning per file, which would land in every notebook's output.
    pdf_log = logging.getLogger("pypdf")
    level = pdf_log.level
    pdf_log.setLevel(logging.ERROR)
    try:
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    finally:
        pdf_log.setLevel(level)
    record = json.dumps(meta, default=str)
    writer.add_metadata(
        {
            "/Title": str(meta.get("title", "")),
            "/Creator": f"workbench {meta.get('workbench')}",
            "/Subject": f"{meta.get('analysis', 'figure')} (git {meta.get('git_commit')})",
            "/Keywords": record,
            "/WorkbenchProvenance": record,
        }
    )
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def read_provenance(path: str | Path) -> dict[str, Any] | None:
    """The provenance record embedded in an exported PDF, SVG or PNG (``None`` if absent)."""
    import re
    from xml.sax.saxutils import unescape

    target = Path(path)
    data = target.read_bytes()
    text = None
    if target.suffix == ".pdf":
        import io

        from pypdf import PdfReader

        info = PdfReader(io.BytesIO(data)).metadata or {}
        text = info.get("/WorkbenchProvenance")
    elif target.suffix == ".svg":
        found = re.search(
            r'<metadata id="workbench-provenance">(.*?)</metadata>', data.decode(), re.S
        )
        text = unescape(found.group(1)) if found else None
    elif target.suffix == ".png":
        pos = 8
        while pos < len(data):
            (length,) = struct.unpack(">I", data[pos : pos + 4])
            if data[pos + 4 : pos + 8] == b"tEXt":
                key, _, value = data[pos + 8 : pos + 8 + length].partition(b"\0")
                if key == b"workbench:provenance":
                    text = value.decode("latin-1")
                    break
            pos += 12 + length
    return json.loads(text) if text else None


_EMBED = {"pdf": embed_pdf, "svg": embed_svg, "png": embed_png}


def _start_kaleido() -> None:
    """Checks kaleido and Chromium, and starts kaleido's browser once per process."""
    try:
        import kaleido
    except ImportError as exc:
        raise ExportError("static figure export needs kaleido: pip install kaleido") from exc
    browser = chromium_path()
    if browser is None:
        raise ExportError(
            "static figure export needs Chromium: apt-get install chromium "
            "(or set BROWSER_PATH to a Chrome/Chromium executable)"
        )
    os.environ.setdefault("BROWSER_PATH", browser)
    kaleido.start_sync_server(silence_warnings=True)


def _render(fig: Any, fmt: str, scale: float) -> bytes:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # plotly warns that kopts are unused with a server
            return fig.to_image(format=fmt, scale=scale)
    except Exception as exc:  # kaleido/choreographer raise many types when Chromium will not run
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ExportError(
            f"Chromium failed to render the {fmt} ({type(exc).__name__}: {first}); "
            "check that `chromium --headless` runs here, or set BROWSER_PATH"
        ) from exc


def export(
    fig: Any,
    path: str | Path,
    formats: Sequence[str] = FORMATS,
    *,
    scale: float = 2.0,
    metadata: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Writes ``fig`` as ``path.<format>`` for each format, with provenance embedded.

    Args:
        fig: A plotly figure.
        path: Target path without extension (an extension, if given, is replaced).
        formats: Any of ``pdf``, ``svg``, ``png`` (static, through kaleido) and ``html``.
        scale: Pixel scale for PNG.
        metadata: Extra provenance entries (see :func:`provenance`).

    Returns:
        The written files.

    Raises:
        ExportError: A static format was asked for and kaleido or Chromium is missing or broken.
    """
    from workbench.store import atomic_write_bytes

    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ExportError(f"unknown figure format(s) {unknown}; use {', '.join(FORMATS)}")
    base = Path(path)
    base = base.with_suffix("") if base.suffix.lstrip(".") in FORMATS else base
    base.parent.mkdir(parents=True, exist_ok=True)
    if any(f != "html" for f in formats):
        _start_kaleido()
    meta = provenance(fig, metadata)
    written = []
    for fmt in formats:
        target = base.with_name(f"{base.name}.{fmt}")
        if fmt == "html":
            fig.write_html(target, include_plotlyjs="directory", full_html=True)
        else:
            data = _render(fig, fmt, scale if fmt == "png" else 1)
            atomic_write_bytes(target, _EMBED[fmt](data, meta))
        written.append(target)
    return written
