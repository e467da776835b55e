"""How readout and intervention results show themselves in a notebook and a terminal.

Lens tables, probe sweeps, patching grids and steering tests: an HTML card, short text, JSON and
a snapshot of the main figure.

Large results are capped before they are embedded (:data:`MAX_POSITIONS` positions of
:data:`MAX_LENS_TEXTS` texts, :data:`MAX_GRID_SITES` sites), with a visible note of what was left
out; the objects themselves keep everything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from workbench.display import html as H
from workbench.display.bundle import clip_text, footer, mimebundle, provenance_record

MAX_LENS_TEXTS = 2
"""Texts of a lens result drawn as tables."""
MAX_POSITIONS = 32
"""Positions (columns) per lens table or patching grid."""
MAX_GRID_SITES = 48
"""Sites (rows) of a patching grid."""
MAX_JSON_CELLS = 4096
"""Cells of a patching grid embedded as JSON (a larger grid keeps only its headline numbers)."""


# ----- LensResult --------------------------------------------------------------------------------


def _topk_title(result: Any, li: int, row: int) -> str:
    toks, probs = result.top_tokens[li, row], result.top_probs[li, row]
    return "\n".join(f"{t!r} {p:.3f}" for t, p in zip(toks, probs, strict=True))


def lens_table(result: Any, text: int = 0, max_positions: int = MAX_POSITIONS) -> str:
    """One text's top-token table: input tokens across, layers down, cells coloured by p(top-1).

    Hovering a cell shows its top-k tokens with probabilities (a ``title``, no script); the last
    column is the layer's mean KL(final || lens) over this text.
    """
    rows = result.text_rows(text)
    start, stop = rows.start, rows.stop
    shown = min(stop - start, max_positions)
    header: list[Any] = [H.Raw("layer")]
    header += [H.Raw(H.token(result.tokens[r])) for r in range(start, start + shown)]
    header.append("KL")
    kl_text = result.kl[:, start:stop].mean(axis=1)
    kl_hi = float(np.nanmax(kl_text)) if kl_text.size else 0.0
    body, styles = [], []
    for li, layer in enumerate(result.layers):
        line: list[Any] = [int(layer)]
        style = [""]
        for r in range(start, start + shown):
            p = float(result.top_probs[li, r, 0])
            title = H.esc(_topk_title(result, li, r))
            top = H.token(result.top_tokens[li, r, 0])
            line.append(H.Raw(f"<span title='{title}'>{top}</span>"))
            style.append(H.sequential(p))
        line.append(H.bar(float(kl_text[li]), kl_hi, width=50, colour="#D55E00"))
        style.append("white-space:nowrap")
        body.append(line)
        styles.append(style)
    out = H.table(header, body, cell_styles=styles)
    if stop - start > shown:
        out += H.note(f"positions {shown}-{stop - start - 1} of this text not shown")
    return out


def lens_bundle(
    result: Any, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
) -> dict[str, Any]:
    """The bundle of a :class:`~workbench.lens.LensResult`."""
    kl, loss = result.kl_by_layer(), result.loss_by_layer()
    kl_hi = float(np.nanmax(kl)) if kl.size else 0.0
    parts = [
        H.note(
            f"{result.lens} lens · {result.n_texts} texts · {result.n_rows} positions · "
            f"top-{result.top_k} per cell · colour = p(top-1) · hover a cell for its top-"
            f"{result.top_k}"
        )
    ]
    for i in range(min(result.n_texts, MAX_LENS_TEXTS)):
        parts.append(H.section(f"text {i}") + lens_table(result, i))
    if result.n_texts > MAX_LENS_TEXTS:
        parts.append(H.note(f"{result.n_texts - MAX_LENS_TEXTS} more texts not drawn"))
    rows = [
        (int(layer), H.bar(float(kl[i]), kl_hi, colour="#D55E00"), float(loss[i]))
        for i, layer in enumerate(result.layers)
    ]
    parts.append(H.section("by layer (mean over every position)"))
    parts.append(H.table(["layer", "KL(final || lens) nats", "next-token loss"], rows))
    parts.append(
        H.note(
            f"model's own loss {H.fmt(result.final_loss())} nats; figures: "
            "heatmap, by_layer (result.figure(kind))"
        )
    )
    record = provenance_record(
        result.model, result.revision, [f"resid_post.{int(x)}" for x in result.layers]
    )
    html = H.card(
        "LensResult", f"{result.lens} lens · {result.model}", "".join(parts), footer(record)
    )
    data = result.to_dict()
    return mimebundle(
        html=html,
        text=lens_repr(result),
        data=data,
        figure=lambda: result.figure("heatmap"),
        include=include,
        exclude=exclude,
    )


def lens_repr(result: Any) -> str:
    """Lens, model, sizes, KL by layer and the top-1 tokens of the last layer for text 0."""
    kl = result.kl_by_layer()
    rows = result.text_rows(0)
    last = [str(t) for t in result.top_tokens[-1, rows, 0][:12]]
    lines = [
        f"LensResult({result.lens} lens, {result.model}"
        f"{' @ ' + result.revision if result.revision else ''}: {result.n_texts} texts, "
        f"{result.n_rows} positions, layers {result.layers.tolist()[:12]}, top-{result.top_k})",
        "  KL by layer: " + ", ".join(H.fmt(float(x)) for x in kl[:12]),
        f"  loss by layer: {', '.join(H.fmt(float(x)) for x in result.loss_by_layer()[:12])} "
        f"(model {H.fmt(result.final_loss())})",
        f"  text 0, layer {int(result.layers[-1])} top-1: {last!r}"[:160],
    ]
    return clip_text(lines)


# ----- ProbeSweepResult --------------------------------------------------------------------------


def probe_bundle(
    sweep: Any, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
) -> dict[str, Any]:
    """The bundle of a :class:`~workbench.probes.ProbeSweepResult`: per-site accuracy table."""
    summary = sweep.summary()
    acc = summary["accuracy"].to_numpy(dtype=float)
    sel = summary["selectivity"].to_numpy(dtype=float)
    best = int(np.nanargmax(acc)) if np.isfinite(acc).any() else 0
    rows = []
    for _, r in summary.iterrows():
        rows.append(
            (
                r["site"],
                H.bar(float(r["accuracy"]), 1.0),
                _interval(r["accuracy_lo"], r["accuracy_hi"]),
                H.fmt(r["control"]),
                H.bar(float(r["selectivity"]), 1.0, colour="#009E73"),
                _interval(r["selectivity_lo"], r["selectivity_hi"]),
            )
        )
    head = (
        f"best {summary['site'][best]}: accuracy {H.fmt(acc[best])}"
        + (f", selectivity {H.fmt(sel[best])}" if sweep.control else "")
        + f" · majority class {H.fmt(sweep.chance)}"
    )
    body = (
        H.note(
            f"{sweep.probe} probe · {sweep.cv}-fold CV x {sweep.seeds} seeds · control "
            f"{sweep.control or 'none'} · {sweep.n_rows:,} rows · {sweep.n_classes} classes"
        )
        + f"<div style='margin:4px 0;font-weight:600'>{H.esc(head)}</div>"
        + H.table(["site", "accuracy", "95% CI", "control", "selectivity", "95% CI"], rows)
        + H.note("figures: layers (result.figure('layers'))")
    )
    record = provenance_record(sweep.params.get("model"), sweep.params.get("revision"), sweep.sites)
    html = H.card(
        "ProbeSweepResult", f"{sweep.probe} · {len(sweep.sites)} sites", body, footer(record)
    )
    lines = [
        f"ProbeSweepResult({sweep.probe}, {len(sweep.sites)} sites, cv={sweep.cv}, "
        f"seeds={sweep.seeds}, control={sweep.control!r}, chance={H.fmt(sweep.chance)})",
        f"  {head}",
        "  accuracy: " + ", ".join(H.fmt(x) for x in acc[:12]),
    ]
    if sweep.control:
        lines.append("  selectivity: " + ", ".join(H.fmt(x) for x in sel[:12]))
    lines.append("  .summary() for the table, .figure() for the plot")
    data = {k: v for k, v in sweep.to_dict().items() if k != "scores"}
    return mimebundle(
        html=html,
        text=clip_text(lines),
        data=data,
        figure=lambda: sweep.figure("layers"),
        include=include,
        exclude=exclude,
    )


def _interval(lo: Any, hi: Any) -> str:
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return "-"
    return f"[{H.fmt(float(lo))}, {H.fmt(float(hi))}]"


def probe_repr(sweep: Any) -> str:
    """The text form of a sweep (the first lines of its bundle's text)."""
    return probe_bundle(sweep, include=("text/plain",))["text/plain"]


# ----- PatchingResult ----------------------------------------------------------------------------


def patching_grid(
    result: Any, max_sites: int = MAX_GRID_SITES, max_positions: int = MAX_POSITIONS
) -> str:
    """Sites down, positions across (clean/corrupt tokens), cells coloured by recovered."""
    rec = result.recovered
    n_sites, n_pos = min(len(result.sites), max_sites), min(len(result.positions), max_positions)
    header: list[Any] = ["site"]
    for j in range(n_pos):
        c, k = result.clean_tokens[j], result.corrupt_tokens[j]
        label = H.token(c) if c == k else f"{H.token(c)}<br><i>{H.token(k)}</i>"
        header.append(H.Raw(f"{result.positions[j]}<br>{label}"))
    body, styles = [], []
    for i in range(n_sites):
        line: list[Any] = [result.sites[i]]
        style = [""]
        for j in range(n_pos):
            v = float(rec[i, j])
            tip = H.esc(
                f"{result.sites[i]} @ {result.positions[j]}: metric "
                f"{result.scores[i, j]:.4g}, recovered {v:.3f}"
            )
            line.append(H.Raw(f"<span title='{tip}'>{H.esc(H.fmt(v, 2))}</span>"))
            style.append(H.diverging(v, 1.0))
        body.append(line)
        styles.append(style)
    out = H.table(header, body, cell_styles=styles)
    left = []
    if len(result.sites) > n_sites:
        left.append(f"{len(result.sites) - n_sites} sites")
    if len(result.positions) > n_pos:
        left.append(f"{len(result.positions) - n_pos} positions")
    if left:
        out += H.note(f"not shown: {' and '.join(left)} (result.table has every cell)")
    return out


def patching_bundle(
    result: Any, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
) -> dict[str, Any]:
    """The bundle of a :class:`~workbench.interventions.PatchingResult`."""
    head = patching_headline(result)
    body = (
        H.note(
            f"metric {result.metric or '?'}: clean {H.fmt(result.clean_metric)}, corrupt "
            f"{H.fmt(result.corrupt_metric)} · cell = fraction of the clean metric recovered "
            "(1 = restored) · hover for the metric · italics: corrupt token"
        )
        + f"<div style='margin:4px 0;font-weight:600'>{H.esc(head)}</div>"
        + patching_grid(result)
        + H.note("figures: recovered, metric (result.figure(kind)); .table is the tidy table")
    )
    record = provenance_record(None, None, list(result.sites))
    html = H.card(
        "PatchingResult",
        f"{len(result.sites)} sites x {len(result.positions)} positions",
        body,
        footer(record),
    )
    data = result.to_dict()
    if result.scores.size > MAX_JSON_CELLS:
        for key in ("scores", "recovered"):
            data[key] = None
        data["note"] = (
            f"grid of {result.scores.size} cells not embedded (over {MAX_JSON_CELLS}); "
            "result.to_dict() has it"
        )
    return mimebundle(
        html=html,
        text=patching_repr(result),
        data=data,
        figure=lambda: result.figure("recovered"),
        include=include,
        exclude=exclude,
    )


def patching_headline(result: Any) -> str:
    """Where patching restores the most."""
    rec = result.recovered
    if not np.isfinite(rec).any():
        return "clean and corrupt metrics are equal: nothing to recover"
    i, j = np.unravel_index(int(np.nanargmax(rec)), rec.shape)
    return (
        f"most recovered: {result.sites[i]} at position {result.positions[j]} "
        f"({result.clean_tokens[j]!r}) = {H.fmt(float(rec[i, j]))}"
    )


def patching_repr(result: Any) -> str:
    """A few lines: the metric, clean vs corrupt, the grid's size and its maximum."""
    lines = [
        f"PatchingResult({len(result.sites)} sites x {len(result.positions)} positions, "
        f"metric {result.metric!r})",
        f"  clean {H.fmt(result.clean_metric)}, corrupt {H.fmt(result.corrupt_metric)}",
        f"  {patching_headline(result)}",
        f"  sites: {', '.join(H.compress_sites(result.sites))}",
    ]
    return clip_text(lines)


# ----- steering ----------------------------------------------------------------------------------


def steering_bundle(
    result: Any,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    *,
    model: str | None = None,
    revision: str | None = None,
) -> dict[str, Any]:
    """The bundle of a steering test (``layer``, ``norm``, ``scales``, ``effect``, ``random``).

    Written for the readouts study's ``SteeringResult``: the steering vector's effect at each
    scale beside the mean of random vectors of the same norm.
    """
    rand = np.asarray(result.random, dtype=float).reshape(-1, len(result.scales))
    mean_rand = rand.mean(axis=0) if len(rand) else np.full(len(result.scales), np.nan)
    hi = max([abs(x) for x in (*result.effect, *mean_rand) if math.isfinite(x)] or [0.0])
    rows = [
        (H.fmt(s), H.bar(abs(e), hi), H.fmt(e), H.fmt(r))
        for s, e, r in zip(result.scales, result.effect, mean_rand, strict=True)
    ]
    head = (
        f"layer {result.layer}: effect {H.fmt(result.effect[-1])} at scale "
        f"{H.fmt(result.scales[-1])} vs random {H.fmt(float(mean_rand[-1]))}"
    )
    body = (
        H.note(
            f"difference-of-means vector, norm {H.fmt(result.norm)} · {len(rand)} random "
            f"vectors of the same norm · {getattr(result, 'n_rows', '?')} positions"
        )
        + f"<div style='margin:4px 0;font-weight:600'>{H.esc(head)}</div>"
        + H.table(["scale", "|effect|", "effect", "random (mean)"], rows)
    )
    if getattr(result, "generated", 0):
        body += H.note(
            f"generation: {result.generated} greedy tokens a prompt at the largest scale; "
            f"share of word-starting tokens {H.fmt(result.gen_base)}, steered "
            f"{H.fmt(result.gen_effect)} more, random vectors at most "
            f"{H.fmt(result.gen_random_max)} more"
        )
        body += H.table(
            ["prompt", "unsteered", "steered"],
            [tuple(example) for example in result.gen_examples],
        )
    record = provenance_record(model, revision, [f"resid_post.{result.layer}"])
    html = H.card("SteeringResult", f"layer {result.layer}", body, footer(record))
    lines = [
        f"{type(result).__name__}(layer {result.layer}, norm {H.fmt(result.norm)}, "
        f"scales {list(result.scales)[:8]})",
        f"  {head}",
    ]
    data = result.to_dict() if hasattr(result, "to_dict") else {"layer": result.layer}
    return mimebundle(html=html, text=clip_text(lines), data=data, include=include, exclude=exclude)
