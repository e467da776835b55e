"""MkDocs hook: a study page's verdict table, rendered from a committed replication record.

A page holding ``<!-- replication: NAME -->`` gets, in its place, the table of
``docs/replications/NAME.json`` (a ``replication.json`` that ``workbench replicate`` wrote): one row
per claim with the share of runs it held on, its value's mean and 95% interval, and the verdict.
The numbers on the page are therefore the ones that were run; a missing record fails the build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MARK = re.compile(r"<!-- replication: ([A-Za-z0-9_.-]+) -->")
RECORDS = Path(__file__).parent / "replications"


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def table(name: str) -> str:
    """The verdict table of ``replications/NAME.json`` as Markdown."""
    path = RECORDS / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no committed replication record {path}")
    record = json.loads(path.read_text())
    seeds = record["seeds"]
    kernels = ", ".join(record["cpu_kernels"])
    wall = record.get("seconds", {}).get("wall")
    lines = [
        f"`workbench replicate {record['analysis']}` over seeds {seeds[0]}-{seeds[-1]}, CPU "
        f"kernels: {kernels}" + (f" ({wall / 60:.1f} min wall)" if wall else "") + ".",
        "",
        "| claim | held | value: mean [95% interval] | verdict |",
        "|---|---|---|---|",
    ]
    for claim in record["claims"]:
        value = claim.get("value") or {}
        low, high = (value.get("ci95") or [None, None])[:2]
        lines.append(
            f"| {claim['name']} (`{claim['claim']}`) | {claim['held']}/{claim['runs']} | "
            f"{_fmt(value.get('mean'))} [{_fmt(low)}, {_fmt(high)}] | **{claim['verdict']}** |"
        )
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: object) -> str:
    """Replaces every replication marker of a page by its table."""
    return MARK.sub(lambda m: table(m.group(1)), markdown)


TOUR = Path(__file__).parent.parent / "notebooks" / "tour.ipynb"
TOUR_PAGE = "tour-executed.html"
"""The executed tour, generated into the site at build time (linked from ``tour.md``)."""
TOUR_CACHE = Path(__file__).parent.parent / "build" / "docs"


def _tour_key() -> str:
    """The notebook and the workbench's code the export was made from (a rebuild reuses it)."""
    import hashlib

    digest = hashlib.sha256(TOUR.read_bytes())
    for path in sorted((TOUR.parent.parent / "workbench").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def tour_html() -> bytes:
    """The tour executed (embedded SmolLM2, its defaults) and exported without widget state.

    ``WORKBENCH_DOCS_TOUR=0`` leaves it out (a page saying so takes its place). The export is
    kept under ``build/docs/`` keyed by the notebook and the library's code, so a rebuild with
    neither changed reuses it.
    """
    import os

    if os.environ.get("WORKBENCH_DOCS_TOUR", "1") == "0":
        return b"<p>The executed tour was left out of this build (WORKBENCH_DOCS_TOUR=0).</p>"
    cached = TOUR_CACHE / f"tour-{_tour_key()}.html"
    if not cached.is_file():
        from workbench.runner.export import export_html

        _, seconds = export_html(TOUR, cached, {"device": "cpu"}, cwd=TOUR_CACHE)
        print(f"the tour executed in {seconds:.0f} s for the site")
    return cached.read_bytes()


def on_files(files, config, **_: object):
    """Adds the executed tour to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, TOUR_PAGE, content=tour_html()))
    return files
