"""The activations explorer: a 2-D PCA map of token activations, one per layer, with a slider.

Rows (tokens) of one site kind (``resid_post`` at every layer captured) are sampled once (at most
``max_points``, seeded) and projected on each layer's own top two principal components (signs
fixed so that the largest loading is positive). Hovering a point shows its token in context;
points are coloured by position in the text, token frequency in the capture, text, or labels
the user gives (one per row or one per text). ``layer`` (an index into ``data["layers"]``),
``color_by`` and ``hovered`` (a point index) are synced both ways.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import traitlets

from workbench.display import html as H
from workbench.display.bundle import footer, provenance_record
from workbench.display.objects import decode_tokens, find_tokenizer
from workbench.explore._base import ExplorerError, esm
from workbench.explore._widget import Explorer

MAX_TWIN_POINTS = 600
"""Points drawn in the static twin (the widget holds every sampled point)."""
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000")
_VIRIDIS = ((68, 1, 84), (33, 145, 140), (253, 231, 37))


def continuous_colour(t: float) -> str:
    """A viridis-like colour for ``t`` in [0, 1]."""
    t = min(max(t, 0.0), 1.0) * 2
    a, b = (_VIRIDIS[0], _VIRIDIS[1]) if t <= 1 else (_VIRIDIS[1], _VIRIDIS[2])
    f = t if t <= 1 else t - 1
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def _resolve_site(sites: Sequence[str], site: str | None) -> tuple[str, list[str], list, int]:
    """(site kind, its sites in layer order, their layers, index of the starting layer).

    ``site`` is a site name (``"resid_post.3"``: every captured layer of its kind, starting at 3),
    a bare kind (``"resid_post"``), or ``None`` (the first captured site's kind).
    """
    site = sites[0] if site is None else site
    kind, _, layer = site.rpartition(".")
    if site in sites and not (kind and layer.lstrip("-").isdigit()):
        return site, [site], [site], 0
    if site not in sites:
        kind = site
    found = sorted(
        (int(tail), name)
        for name in sites
        for head, _, tail in [name.rpartition(".")]
        if head == kind and tail.lstrip("-").isdigit()
    )
    if not found:
        raise ExplorerError(f"no site {site!r}; captured: {', '.join(sites)}")
    layer_sites = [name for _, name in found]
    start = layer_sites.index(site) if site in layer_sites else 0
    return kind, layer_sites, [n for n, _ in found], start


def pca_2d(x: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """``(n, 2)`` coordinates on the top two principal components and their variance shares."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0, keepdims=True)
    if x.shape[0] < 2:
        return np.zeros((x.shape[0], 2)), [0.0, 0.0]
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    comps = vt[:2]
    signs = np.sign(comps[np.arange(len(comps)), np.abs(comps).argmax(axis=1)])
    comps = comps * np.where(signs == 0, 1, signs)[:, None]
    coords = x @ comps.T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    total = float((s**2).sum()) or 1.0
    shares = [float(v**2 / total) for v in s[:2]] + [0.0] * (2 - len(s[:2]))
    return coords, shares


def _read_rows(source: Any, site: str, idx: np.ndarray) -> np.ndarray:
    import torch

    tensor = source.read(site) if hasattr(source, "read") else source[site]
    rows = tensor[torch.from_numpy(idx)] if isinstance(tensor, torch.Tensor) else tensor[idx]
    return torch.as_tensor(rows).float().numpy()


def _colourings(
    color_by: Any, row_text: np.ndarray, positions: np.ndarray, ids: np.ndarray, counts: dict
) -> dict[str, dict[str, Any]]:
    """Every colouring the widget can switch between (``label`` only when labels were given)."""
    freq = np.array([math.log10(counts.get(int(i), 1)) for i in ids])
    out = {
        "position": {"kind": "continuous", "values": positions.tolist()},
        "frequency": {"kind": "continuous", "values": np.round(freq, 3).tolist()},
        "text": {"kind": "categorical", "values": [f"text {t}" for t in row_text]},
    }
    if color_by is not None and not isinstance(color_by, str):
        out["label"] = {"kind": "categorical", "values": None}
    return out


def _labels_for(labels: Any, n_rows: int, n_texts: int, idx: np.ndarray, row_text: np.ndarray):
    values = list(labels.tolist() if hasattr(labels, "tolist") else labels)
    if len(values) == n_rows:
        picked = [values[i] for i in idx]
    elif len(values) == n_texts:
        picked = [values[t] for t in row_text]
    else:
        raise ExplorerError(
            f"color_by has {len(values)} labels; give one per row ({n_rows}) or per text "
            f"({n_texts})"
        )
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in picked)
    if numeric and len(set(picked)) > 12:
        return {"kind": "continuous", "values": [float(v) for v in picked]}
    return {"kind": "categorical", "values": [str(v) for v in picked]}


def explorer_data(
    source: Any,
    *,
    site: str | None = None,
    color_by: Any = "position",
    max_points: int = 2000,
    tokenizer: Any = None,
    seed: int = 0,
    context: int = 6,
) -> tuple[dict[str, Any], int]:
    """The widget's data (JSON) and the index of the starting layer."""
    sites = list(source.sites)
    kind, layer_sites, labels, start = _resolve_site(sites, site)
    offsets = np.asarray(source.offsets, dtype=np.int64)
    token_ids = np.asarray(source.token_ids, dtype=np.int64)
    n_rows, n_texts = int(offsets[-1]), len(offsets) - 1
    if n_rows == 0:
        raise ExplorerError("no rows to map: the capture is empty")
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n_rows, size=min(n_rows, max_points), replace=False))
    row_text = np.searchsorted(offsets, idx, side="right") - 1
    positions = idx - offsets[row_text]
    ids, counts_ = np.unique(token_ids, return_counts=True)
    counts = dict(zip(ids.tolist(), counts_.tolist(), strict=True))
    meta = dict(getattr(source, "meta", {}) or {})
    if not meta and hasattr(source, "manifest"):
        m = source.manifest
        meta = {
            "model": m.get("model"),
            "revision": m.get("revision"),
            "source": m.get("provenance", {}).get("source"),
        }
    tok = find_tokenizer(meta, tokenizer)
    need = sorted({int(i) for i in token_ids[_windows(idx, offsets, row_text, context)]})
    text_of = dict(zip(need, decode_tokens(need, tok), strict=True))
    tokens, contexts = [], []
    for r, t in zip(idx, row_text, strict=True):
        tokens.append(text_of.get(int(token_ids[r]), "?"))
        lo, hi = max(int(offsets[t]), r - context), min(int(offsets[t + 1]), r + 3)
        parts = [text_of.get(int(token_ids[j]), "?") for j in range(lo, hi)]
        parts[r - lo] = f"[{parts[r - lo]}]"
        contexts.append(
            ("…" if lo > offsets[t] else "") + "".join(parts) + ("…" if hi < offsets[t + 1] else "")
        )
    points, shares = [], []
    for s in layer_sites:
        coords, share = pca_2d(_read_rows(source, s, idx))
        points.append(np.round(coords, 4).tolist())
        shares.append([round(x, 4) for x in share])
    colours = _colourings(color_by, row_text, positions, token_ids[idx], counts)
    if "label" in colours:
        colours["label"] = _labels_for(color_by, n_rows, n_texts, idx, row_text)
    chosen = "label" if "label" in colours else (color_by or "position")
    if chosen not in colours:
        raise ExplorerError(
            f"unknown color_by {color_by!r}; use 'position', 'frequency', 'text' or a sequence "
            "of labels (one per row or per text)"
        )
    data = {
        "model": meta.get("model"),
        "revision": meta.get("revision"),
        "kind": kind,
        "sites": layer_sites,
        "layers": labels,
        "points": points,
        "variance": shares,
        "tokens": tokens,
        "context": contexts,
        "rows": idx.tolist(),
        "colors": colours,
        "default_color": chosen,
        "note": f"{len(idx)} of {n_rows} rows (sampled, seed {seed})" if len(idx) < n_rows else "",
    }
    return data, start


def _windows(idx: np.ndarray, offsets: np.ndarray, row_text: np.ndarray, context: int):
    rows: set[int] = set()
    for r, t in zip(idx, row_text, strict=True):
        rows.update(range(max(int(offsets[t]), r - context), min(int(offsets[t + 1]), r + 3)))
    return np.array(sorted(rows), dtype=np.int64)


def point_colours(colouring: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """Each point's colour and a legend ``[(label, colour)]`` for one colouring."""
    values = colouring["values"]
    if colouring["kind"] == "categorical":
        cats = list(dict.fromkeys(values))
        palette = {c: OKABE_ITO[i % len(OKABE_ITO)] for i, c in enumerate(cats)}
        return [palette[v] for v in values], list(palette.items())[:12]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    legend = [(H.fmt(lo), continuous_colour(0.0)), (H.fmt(hi), continuous_colour(1.0))]
    return [continuous_colour((v - lo) / span) for v in values], legend


def svg_map(data: dict[str, Any], layer: int, color_by: str, max_points: int) -> str:
    """One layer's map as inline SVG; each point's ``<title>`` is its token in context."""
    pts = data["points"][layer][:max_points]
    colours, legend = point_colours(data["colors"][color_by])
    w, h, pad = 440, 320, 12
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = (min(xs), max(xs)) if xs else (0, 1)
    y0, y1 = (min(ys), max(ys)) if ys else (0, 1)
    sx = (w - 2 * pad) / ((x1 - x0) or 1)
    sy = (h - 2 * pad) / ((y1 - y0) or 1)
    dots = "".join(
        f"<circle cx='{pad + (x - x0) * sx:.1f}' cy='{h - pad - (y - y0) * sy:.1f}' r='3' "
        f"fill='{c}' fill-opacity='0.75'><title>{H.esc(ctx)}</title></circle>"
        for (x, y), c, ctx in zip(pts, colours, data["context"], strict=False)
    )
    svg = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' "
        f"style='border:1px solid rgba(128,128,128,0.3);background:#fff'>{dots}</svg>"
    )
    keys = " ".join(
        f"<span style='white-space:nowrap'><span style='display:inline-block;width:9px;"
        f"height:9px;background:{c}'></span> {H.esc(label)}</span>"
        for label, c in legend
    )
    return svg + f"<div style='margin:2px 0'>{H.esc(color_by)}: {keys}</div>"


class ActivationsExplorer(Explorer):
    """A PCA map of token activations per layer; slide layers, hover tokens, switch colours."""

    _esm = esm("activations")
    data = traitlets.Dict().tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    color_by = traitlets.Unicode("position").tag(sync=True)
    hovered = traitlets.Int(-1).tag(sync=True)
    """The point under the pointer (an index into ``data["rows"]``), -1 for none."""

    def __init__(self, data: dict[str, Any], layer: int = 0) -> None:
        super().__init__(data=data, layer=layer, color_by=data["default_color"])

    def describe(self) -> str:
        """One line: model, site kind, layers, points."""
        d = self.data
        return (
            f"ActivationsExplorer({d['model']}: {d['kind']} at {len(d['layers'])} layers, "
            f"{len(d['rows'])} tokens, colour {self.color_by})"
        )

    def static_html(self) -> str:
        """The twin: the current layer's map as SVG (hover a point for its token in context)."""
        d = self.data
        share = d["variance"][self.layer]
        body = H.note(
            f"{d['sites'][self.layer]} · PC1 {share[0]:.0%}, PC2 {share[1]:.0%} of variance · "
            f"{len(d['rows'])} tokens · hover a point for its token in context · open with a "
            "live kernel to slide layers"
        )
        body += svg_map(d, self.layer, self.color_by, MAX_TWIN_POINTS)
        if len(d["rows"]) > MAX_TWIN_POINTS:
            body += H.note(f"static view: first {MAX_TWIN_POINTS} of {len(d['rows'])} points")
        if d["note"]:
            body += H.note(d["note"])
        record = provenance_record(d["model"], d["revision"], d["sites"])
        return H.card("activations explorer", f"{d['kind']}", body, footer(record))
