"""One output bundle per object: HTML, short text, JSON data and, where it can be drawn, a PNG.

``_repr_mimebundle_`` of every workbench object returns :func:`mimebundle`'s dict:

* ``text/html``: the card, ending with a provenance footer (model, revision, sites, git commit,
  CPU kernel level and threads, see :mod:`workbench.provenance`);
* ``text/plain``: at most :data:`MAX_LINES` lines and :data:`MAX_CHARS` characters;
* ``image/png``: a snapshot of the main figure, only where static export works here (kaleido and
  a Chromium, see :func:`workbench.figures.static_export_problem`); otherwise left out silently.
  ``WORKBENCH_SNAPSHOTS=0`` turns snapshots off (``=1`` keeps them even without a front end);
* :data:`JSON_MIME`: the object's small JSON form (headline numbers; large arrays are capped).

The JSON travels under a vendor MIME type rather than ``application/json`` on purpose: JupyterLab
ranks its JSON tree viewer above HTML (rank 0 against 50), so a plain ``application/json`` entry
would replace the card with a collapsible tree. Tools read it with
``output["data"]["application/vnd.workbench+json"]``.
"""

from __future__ import annotations

import base64
import importlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from workbench.display import html as H

log = logging.getLogger(__name__)

JSON_MIME = "application/vnd.workbench+json"
"""MIME type of the JSON data in every bundle (see the module docstring for why not plain JSON)."""
SNAPSHOT_ENV = "WORKBENCH_SNAPSHOTS"
"""``0`` turns figure snapshots off; anything else (or unset) draws them where possible."""
MAX_LINES = 12
MAX_CHARS = 990
TEXT_METRICS = 5
"""Metrics a study result's text repr lists (its card lists all of them)."""


def clip_text(lines: Sequence[str]) -> str:
    """Joins ``lines``, keeping at most :data:`MAX_LINES` lines and :data:`MAX_CHARS` chars.

    Long lines are cut at 160 characters; lines that do not fit are replaced by one last line
    that says how many were left out.
    """
    kept = [line if len(line) <= 160 else line[:157] + "..." for line in lines]
    dropped = 0
    while len(kept) > MAX_LINES - (1 if dropped else 0) or len("\n".join(kept)) > MAX_CHARS - 40:
        if len(kept) <= 1:
            break
        kept.pop()
        dropped += 1
    if dropped:
        kept.append(f"  ... ({dropped} more lines)")
    return "\n".join(kept)[:MAX_CHARS]


def provenance_record(
    model: str | None = None,
    revision: str | None = None,
    sites: Sequence[str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the footer shows, as data: model, revision, sites, commit, kernels, versions."""
    from workbench.provenance import git_state, numerics, versions

    commit, dirty = git_state()
    record: dict[str, Any] = {"model": model, "revision": revision}
    if sites is not None:
        record["sites"] = list(sites)
    record["git_commit"] = commit
    record["git_dirty"] = dirty
    record["workbench"] = versions().get("workbench")
    nums = numerics()
    for key in ("cpu_capability", "threads", "numerics_env"):
        record[key] = nums.get(key)
    record.update(extra or {})
    return record


def footer(record: Mapping[str, Any]) -> str:
    """The provenance footer line of every card."""
    parts = []
    if record.get("model"):
        model = str(record["model"])
        if record.get("revision"):
            model += f" @ {record['revision']}"
        parts.append(f"model {model}")
    sites = record.get("sites")
    if sites:
        shown = H.compress_sites(list(sites))
        text = ", ".join(shown[:6]) + (f" (+{len(shown) - 6} groups)" if len(shown) > 6 else "")
        parts.append(f"sites {text}")
    commit = record.get("git_commit")
    if commit:
        parts.append(f"git {str(commit)[:10]}{' (dirty)' if record.get('git_dirty') else ''}")
    else:
        parts.append("git -")
    if record.get("workbench"):
        parts.append(f"workbench {record['workbench']}")
    kernels = record.get("cpu_capability")
    if kernels is not None:
        parts.append(f"CPU kernels {kernels}, {record.get('threads')} threads")
    env = record.get("numerics_env")
    if env:
        parts.append(" ".join(f"{k}={v}" for k, v in env.items()))
    for key, value in record.items():
        if key not in _FOOTER_KEYS and value is not None and not isinstance(value, dict | list):
            parts.append(f"{key} {value}")
    return (
        f"<div class='workbench-provenance' style='color:{H.MUTED};font-size:11px;"
        "border-top:1px solid rgba(128,128,128,0.3);margin-top:6px;padding-top:3px'>"
        + " · ".join(H.esc(p) for p in parts)
        + "</div>"
    )


_FOOTER_KEYS = {
    "model",
    "revision",
    "sites",
    "git_commit",
    "git_dirty",
    "workbench",
    "cpu_capability",
    "threads",
    "numerics_env",
}


def snapshots_wanted() -> bool:
    """Whether figure snapshots are drawn (``$WORKBENCH_SNAPSHOTS`` and static export here)."""
    if os.environ.get(SNAPSHOT_ENV, "").strip() in ("0", "false", "no", "off"):
        return False
    from workbench.figures.export import static_export_problem

    return static_export_problem() is None


def snapshot(figure: Any | Callable[[], Any]) -> dict[str, str]:
    """``{"image/png": base64}`` of the figure, or ``{}`` where it cannot be drawn (silently).

    Args:
        figure: A plotly figure, or a function that builds one (called only when a snapshot can
            be drawn, so a bundle costs nothing extra on a machine without Chromium).
    """
    if figure is None or not snapshots_wanted():
        return {}
    try:
        export = importlib.import_module("workbench.figures.export")  # the module, not the function

        fig = figure() if callable(figure) else figure
        export._start_kaleido()
        data = export._render(fig, "png", 1.0)
    except Exception as exc:  # a broken Chromium must never break a repr
        log.debug("no figure snapshot: %s", exc)
        return {}
    return {"image/png": base64.b64encode(data).decode("ascii")}


def _wanted(mime: str, include: Iterable[str] | None, exclude: Iterable[str] | None) -> bool:
    return (include is None or mime in include) and (exclude is None or mime not in exclude)


def mimebundle(
    *,
    html: str,
    text: str,
    data: Mapping[str, Any] | None = None,
    figure: Any | Callable[[], Any] | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The dict a ``_repr_mimebundle_`` returns (see the module docstring).

    Args:
        html: The card (with its footer).
        text: The short text repr.
        data: JSON-ready data, under :data:`JSON_MIME`.
        figure: The main figure or a function building it, for the PNG snapshot.
        include: MIME types the front end asked for (``None``: all).
        exclude: MIME types it asked to leave out.
    """
    bundle: dict[str, Any] = {"text/plain": text, "text/html": html}
    if data is not None:
        bundle[JSON_MIME] = _jsonable(data)
    if figure is not None and _wanted("image/png", include, exclude):
        bundle.update(snapshot(figure))
    return {k: v for k, v in bundle.items() if _wanted(k, include, exclude)}


def _jsonable(value: Any) -> Any:
    """Plain JSON: numpy scalars and arrays to Python, NaN to ``None``."""
    import math

    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, str):
        return _jsonable(value.tolist())
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def study_result_bundle(
    result: Any,
    *,
    title: str,
    metrics: Mapping[str, Any],
    claims: Any = None,
    figure_kinds: Sequence[str] = (),
    provenance: Mapping[str, Any] | None = None,
    main_figure: str | None = None,
    notes: Sequence[str] = (),
    shortfalls: Sequence[str] = (),
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The bundle of a study's result: headline metrics, claims, figures, provenance.

    Every study result reaches it through :func:`workbench.display.studies.study_bundle`, which
    passes the result's own ``metrics()``, ``claims()``, ``figure_kinds()`` and
    ``provenance()``.

    Args:
        result: The result (its ``figure(kind)`` draws the snapshot).
        title: The study's name.
        metrics: The ``results.json`` metrics block (lists are shown capped, as sparkline bars).
        claims: A :class:`workbench.claims.ClaimTable` (or anything with ``to_list()``), or None.
        figure_kinds: The figure kinds ``result.figure`` knows.
        provenance: ``model``, ``revision``, ``sites`` and any extra short entries.
        main_figure: Kind of the snapshot figure (default: the first of ``figure_kinds``).
        notes: Lines to show under the metrics (what was skipped and why).
        shortfalls: One line per training that missed its criterion, shown first in the card
            and in the text.
        include: As for :func:`mimebundle`.
        exclude: As for :func:`mimebundle`.
    """
    prov = dict(provenance or {})
    record = provenance_record(
        prov.pop("model", None), prov.pop("revision", None), prov.pop("sites", None), prov
    )
    body = [H.note(f"warning: {line}") for line in shortfalls]
    body += [H.section("metrics"), metrics_table(metrics)]
    claim_rows = _claim_rows(claims)
    if claim_rows:
        held = sum(r["holds"] is True for r in claim_rows)
        body += [H.section(f"claims: {held}/{len(claim_rows)} hold"), _claims_html(claim_rows)]
    if figure_kinds:
        body.append(H.note(f"figures: {', '.join(figure_kinds)} (result.figure(kind) draws one)"))
    body += [H.note(n) for n in notes]
    subtitle = _model_line(record)
    html = H.card(f"{title} result", subtitle, "".join(body), footer(record))
    lines = [f"{type(result).__name__}({title}; {subtitle})"]
    lines += [f"  warning: {line}" for line in shortfalls]
    for key, value in list(metrics.items())[:TEXT_METRICS]:
        lines.append(f"  {key}: {_short(value, limit=100)}")
    if len(metrics) > TEXT_METRICS:
        lines.append(f"  ... {len(metrics) - TEXT_METRICS} more metrics (the card has them all)")
    if claim_rows:
        failed = [r["name"] for r in claim_rows if r["holds"] is not True]
        lines.append(
            f"  claims: {held}/{len(claim_rows)} hold"
            + (f" (not: {', '.join(failed[:3])})" if failed else "")
        )
    if figure_kinds:
        lines.append(f"  figures: {', '.join(figure_kinds)}")
    kind = main_figure or (figure_kinds[0] if figure_kinds else None)
    draw = (lambda: result.figure(kind)) if kind and hasattr(result, "figure") else None
    data = {
        "analysis": title,
        "metrics": metrics,
        "claims": claim_rows,
        "figures": list(figure_kinds),
        "provenance": record,
    }
    return mimebundle(
        html=html, text=clip_text(lines), data=data, figure=draw, include=include, exclude=exclude
    )


def _model_line(record: Mapping[str, Any]) -> str:
    model = record.get("model") or ""
    return f"{model} @ {record['revision']}" if record.get("revision") else str(model)


def _short(value: Any, n: int = 6, limit: int = 200) -> str:
    """A value in at most ``limit`` characters: numbers formatted, nested lists summarized."""
    if isinstance(value, list | tuple) and value and all(isinstance(v, Mapping) for v in value):
        keys = list(map(str, value[0]))
        shown = ", ".join(keys[:4]) + (", ..." if len(keys) > 4 else "")
        text = f"{len(value)} rows of {{{shown}}}"
    elif isinstance(value, list | tuple):
        items = [
            _short(v, 3, 40) if isinstance(v, list | tuple | Mapping) else _list_item(v)
            for v in value[:n]
        ]
        text = f"[{', '.join(items)}{', ...' if len(value) > n else ''}] ({len(value)})"
    elif isinstance(value, Mapping) and all(
        v is None or isinstance(v, bool | int | float | str) for v in value.values()
    ):  # a flat record: its entries with their values
        items = [f"{k}: {_list_item(v)}" for k, v in list(value.items())[:n]]
        text = "{" + ", ".join(items) + (", ...}" if len(value) > n else "}")
    elif isinstance(value, Mapping):
        text = "{" + ", ".join(list(map(str, value))[:n]) + (", ...}" if len(value) > n else "}")
    else:
        text = H.fmt(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _list_item(value: Any) -> str:
    """A number inside a list: no thousands separator, so the list's commas stay unambiguous."""
    return H.fmt(value).replace(",", "")


def metrics_table(metrics: Mapping[str, Any], max_items: int = 12) -> str:
    """Metrics as a table: scalars as numbers, lists as bars (first ``max_items`` entries)."""
    rows = []
    for key, value in metrics.items():
        if (
            isinstance(value, list | tuple)
            and value
            and all(isinstance(v, int | float) or v is None for v in value)
        ):
            nums = [float(v) for v in value if v is not None]
            hi = max((abs(v) for v in nums), default=0.0)
            bars = "".join(
                f"<span title='{H.esc(H.fmt(v))}' style='display:inline-block;width:7px;"
                f"margin-right:1px;vertical-align:bottom;height:"
                f"{2 + round(16 * abs(v) / hi) if v is not None and hi else 2}px;"
                f"background:{'#0072B2' if v is None or v >= 0 else '#D55E00'}'></span>"
                for v in value[:max_items]
            )
            shown = ", ".join(_list_item(v) for v in value[:max_items])
            more = f" ... (+{len(value) - max_items})" if len(value) > max_items else ""
            rows.append((key, H.Raw(f"{bars} <span>{H.esc(shown + more)}</span>")))
        elif _is_rows(value):
            rows.append((key, H.Raw(_rows_table(value, max_items))))
        elif isinstance(value, Mapping) and value and _is_rows(list(value.values())):
            named = [{"": name, **record} for name, record in value.items()]
            rows.append((key, H.Raw(_rows_table(named, max_items))))
        else:
            rows.append((key, H.Raw(H.esc(_short(value)))))
    return H.table(["metric", "value"], rows)


def _is_rows(value: Any) -> bool:
    """A list of flat records (``[{"layer": 0, "mean_cosine": 0.4}, ...]``): a small table."""
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
        and all(not isinstance(x, list | tuple | Mapping) for v in value for x in v.values())
    )


def _rows_table(value: Sequence[Mapping[str, Any]], max_rows: int) -> str:
    """Records as a nested table: the first ``max_rows`` rows, at most 8 columns."""
    keys: list[str] = []
    for record in value:
        keys += [str(k) for k in record if str(k) not in keys]
    shown = keys[:8]
    body = [[H.fmt(r.get(k)) if not isinstance(r.get(k), str) else r[k] for k in shown]
            for r in value[:max_rows]]  # fmt: skip
    out = H.table(shown, body)
    left = []
    if len(value) > max_rows:
        left.append(f"{len(value) - max_rows} more rows")
    if len(keys) > len(shown):
        left.append(f"columns {', '.join(keys[len(shown) :])}")
    if left:
        out += H.note(f"not shown: {'; '.join(left)} (the JSON data has them)")
    return out


def _claim_rows(claims: Any) -> list[dict[str, Any]]:
    if claims is None:
        return []
    if hasattr(claims, "to_list"):
        return list(claims.to_list())
    return [dict(c) for c in claims]


def _claims_html(rows: list[dict[str, Any]]) -> str:
    colours = {True: "#009E73", False: "#D55E00", None: H.MUTED}
    words = {True: "holds", False: "fails", None: "not measured"}
    body = [
        (
            r.get("name", ""),
            r.get("claim", ""),
            r.get("value"),
            r.get("threshold"),
            H.Raw(
                f"<span style='color:{colours[r.get('holds')]};font-weight:600'>"
                f"{'not evaluable' if r.get('not_evaluable') else words[r.get('holds')]}</span>"
            ),
        )
        for r in rows
    ]
    return H.table(["claim", "definition", "value", "threshold", ""], body)
