"""Figure export to PDF/SVG/PNG (through kaleido and a system Chromium) and interactive HTML.

Static export goes through kaleido, which drives a system Chromium (started once per process and
reused, so each further figure costs well under a second). HTML needs no browser.

Every exported file says what made it: PDF (document info: Title, Creator, Subject, Keywords and a
``/WorkbenchProvenance`` entry), SVG (``<title>`` and ``<metadata id="workbench-provenance">``) and
PNG (``tEXt`` chunks ``Title``, ``Software`` and ``workbench:provenance``) carry a JSON provenance
record: workbench version, git commit, creation time and, inside ``workbench run``, the analysis and
its parameters (see :mod:`workbench.provenance`). :func:`read_provenance` reads it back.
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

FORMATS = ("pdf", "svg", "png", "html")
"""Every format :func:`export` writes."""
STATIC_FORMATS = ("pdf", "svg", "png")
"""The formats that need kaleido and a Chromium."""


class ExportError(WorkbenchError):
    """Static export is impossible here (no kaleido or no Chromium)."""


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
    from workbench.provenance import git_state, now_iso, run_record, versions

    record: dict[str, Any] = {"workbench": versions().get("workbench"), "created": now_iso()}
    record["git_commit"] = git_state()[0]
    record.update(run_record())
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


NO_CHROMIUM = (
    "static figure export (PDF/SVG/PNG) needs Chromium: apt-get install chromium "
    "(or set BROWSER_PATH to a Chrome/Chromium executable)"
)
"""The fix for a missing browser, as every message that needs it says it."""


def static_export_problem() -> str | None:
    """Why PDF/SVG/PNG export cannot work here (``None`` when kaleido and a Chromium are found).

    This only looks for the pieces; a Chromium that is found but will not start shows up when the
    first figure is rendered.
    """
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "static figure export (PDF/SVG/PNG) needs kaleido: pip install kaleido"
    browser = chromium_path()
    if browser is None or not (os.path.isfile(browser) and os.access(browser, os.X_OK)):
        return NO_CHROMIUM
    return None


def resolve_formats(formats: str | Sequence[str] | None = "auto") -> tuple[list[str], str | None]:
    """Turns a ``formats`` request into the formats to write and, if any were dropped, why.

    Args:
        formats: ``"auto"`` (or ``None``): HTML always, PDF/SVG/PNG when static export works here.
            Otherwise a comma list or sequence of :data:`FORMATS`: exactly these, and an error if
            a static one cannot be written.

    Returns:
        ``(formats, reason)``; ``reason`` says why static formats were skipped (``auto`` only).

    Raises:
        ExportError: An unknown format, or a static format asked for explicitly where static
            export is impossible.
    """
    if formats is None or formats == "auto":
        problem = static_export_problem()
        return (["html"], problem) if problem else (list(FORMATS), None)
    wanted = [f.strip() for f in formats.split(",")] if isinstance(formats, str) else list(formats)
    wanted = [f for f in wanted if f]
    unknown = sorted(set(wanted) - set(FORMATS))
    if unknown or not wanted:
        raise ExportError(
            f"unknown figure format(s) {unknown or wanted}; use auto or a comma list of "
            f"{', '.join(FORMATS)}"
        )
    if set(wanted) & set(STATIC_FORMATS):
        problem = static_export_problem()
        if problem:
            raise ExportError(problem)
    return list(dict.fromkeys(wanted)), None


def _start_kaleido() -> None:
    """Checks kaleido and Chromium, and starts kaleido's browser once per process."""
    problem = static_export_problem()
    if problem:
        raise ExportError(problem)
    import kaleido

    os.environ.setdefault("BROWSER_PATH", chromium_path() or "")
    kaleido.start_sync_server(silence_warnings=True)


def write_html(fig: Any, target: Path) -> None:
    """Writes ``fig`` as a standalone HTML page (atomically) next to a shared ``plotly.min.js``."""
    from plotly.offline import get_plotlyjs

    from workbench.files import atomic_write_bytes

    script = target.parent / "plotly.min.js"
    if not script.is_file():
        atomic_write_bytes(script, get_plotlyjs().encode())
    page = fig.to_html(include_plotlyjs="directory", full_html=True)
    # plotly's page sets html and body to 100% height but keeps the body's 8 px margin, so the page
    # is always 16 px taller than its window: embedded in a frame of the figure's size it would
    # scroll. Without the margin, a frame as large as the figure shows it whole.
    page = page.replace("</head>", "<style>body {margin: 0;}</style>\n</head>", 1)
    atomic_write_bytes(target, page.encode())


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
    from workbench.files import atomic_write_bytes

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
            write_html(fig, target)
        else:
            data = _render(fig, fmt, scale if fmt == "png" else 1)
            atomic_write_bytes(target, _EMBED[fmt](data, meta))
        written.append(target)
    return written
