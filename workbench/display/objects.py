"""How a Subject, Activations and an ActivationStore show themselves (HTML, text, JSON).

Each ``*_bundle`` function takes the object (duck-typed: this module imports none of their
classes, so the lower layers may call it) and returns the dict of a ``_repr_mimebundle_``.

Activations hold token ids, not texts: the few texts shown with their token boundaries are
decoded with the capture's tokenizer, read from the model folder the capture names
(``meta["source"]``, local files only, cached per folder), or the one passed as ``tokenizer=``.
Where none can be had the token ids are shown instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.display import html as H
from workbench.display.bundle import clip_text, footer, mimebundle, provenance_record

log = logging.getLogger(__name__)

MAX_TEXTS = 3
"""Texts shown with their token boundaries."""
MAX_TOKENS = 40
"""Tokens shown per text."""
MAX_SITE_ROWS = 24
"""Rows of a sites table before the rest is summarized."""


# ----- Subject -----------------------------------------------------------------------------------


def _count_parameters(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def _placement(subject: Any) -> str:
    device_map = getattr(subject.model, "hf_device_map", None)
    if isinstance(device_map, Mapping) and len(set(map(str, device_map.values()))) > 1:
        counts: dict[str, int] = {}
        for where in device_map.values():
            counts[str(where)] = counts.get(str(where), 0) + 1
        return ", ".join(f"{n} modules on {d}" for d, n in counts.items())
    return str(subject.device)


def _site_rows(subject: Any) -> list[tuple[str, str, str, str]]:
    family = subject.family
    n = subject.n_layers
    rows = []
    for kind, spec in family.sites.items():
        layers = f"0-{n - 1}" if spec.per_layer else "-"
        rows.append((kind, layers, spec.module, spec.io))
    return rows


def subject_bundle(
    subject: Any, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
) -> dict[str, Any]:
    """The bundle of a :class:`~workbench.Subject`: identity, size and its hook sites."""
    params = _count_parameters(subject.model)
    dtype = str(subject.dtype).removeprefix("torch.")
    placement = _placement(subject)
    arch = type(subject.model).__name__
    pairs = [
        ("name", subject.name),
        ("revision", subject.revision or "default"),
        ("architecture", f"{arch} (family {subject.family.name})"),
        ("kind", "decoder (causal)" if subject.is_causal else "encoder"),
        ("layers", subject.n_layers),
        ("width (d_model)", subject.d_model),
        ("parameters", f"{params:,} ({H.fmt(params / 1e6)} M)"),
        ("dtype", dtype),
        ("placement", placement),
        ("source", subject.source or "-"),
    ]
    weights = subject.weights
    if weights is not None:
        pairs.append(("weights", weights_summary(weights)))
    rows = _site_rows(subject)
    body = H.kv(pairs) + H.section("hook sites (hooks/" + subject.family.name + ".toml)")
    body += H.table(["site", "layers", "module", "reads"], rows)
    record = provenance_record(subject.name, subject.revision)
    html = H.card("Subject", f"{subject.name} · {arch}", body, footer(record))
    n_sites = len(subject.site_names())
    lines = [
        f"Subject({subject.name!r}, revision={subject.revision!r}, family={subject.family.name})",
        f"  {arch}: {subject.n_layers} layers x {subject.d_model}, {params:,} parameters, "
        f"{dtype} on {placement}",
        f"  {n_sites} hook sites: {', '.join(kind for kind, *_ in rows)}",
    ]
    if weights is not None:
        lines.append(f"  weights: {weights_summary(weights)}")
    data = {
        "name": subject.name,
        "revision": subject.revision,
        "architecture": arch,
        "family": subject.family.name,
        "n_layers": subject.n_layers,
        "d_model": subject.d_model,
        "parameters": params,
        "dtype": dtype,
        "placement": placement,
        "sites": [dict(zip(("kind", "layers", "module", "io"), r, strict=True)) for r in rows],
    }
    if weights is not None:
        data["weights"] = dict(weights)
    return mimebundle(html=html, text=clip_text(lines), data=data, include=include, exclude=exclude)


def weights_summary(weights: Mapping[str, Any]) -> str:
    """One phrase on where the weights came from, e.g. ``Q4_1 GGUF (sha256 b179c952…)...``."""
    sha = str(weights.get("sha256", ""))[:12]
    quant = weights.get("quantization", "?")
    fmt = str(weights.get("format", "")).upper()
    to = weights.get("dequantized_to", "?")
    package = weights.get("package")
    source = f" from {package}" if package else ""
    return f"{quant} {fmt} (sha256 {sha}…){source}, dequantised to {to}: 4-bit-rounded weights"


def subject_repr(subject: Any) -> str:
    """The short text form of a Subject (no parameter count: that walks every tensor).

    A model placed over devices (``load_model(..., device_map=...)``) adds its placement in one
    phrase, e.g. ``placement='12 on cuda:0, 8 on cpu, 4 on disk'``.
    """
    placed = f", placement={subject.placement_summary()!r}" if subject.is_placed else ""
    return (
        f"Subject({subject.name!r}, revision={subject.revision!r}, "
        f"family={subject.family.name}, layers={subject.n_layers}, d_model={subject.d_model}, "
        f"dtype={str(subject.dtype).removeprefix('torch.')}, device={subject.device}{placed})"
    )


# ----- tokens ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _tokenizer_at(source: str) -> Any:
    """The tokenizer saved at a local folder (or in the HF cache), or ``None``; never downloads."""
    if not source:
        return None
    try:
        import transformers

        local = Path(source).is_dir()
        return transformers.AutoTokenizer.from_pretrained(source, local_files_only=not local)
    except Exception as exc:  # no tokenizer is a display detail, not an error
        log.debug("no tokenizer at %s: %s", source, exc)
        return None


def find_tokenizer(meta: Mapping[str, Any], tokenizer: Any = None) -> Any:
    """The tokenizer to decode a capture's token ids: the one given, else the model folder's."""
    if tokenizer is not None:
        return tokenizer
    source = meta.get("source") or ""
    return _tokenizer_at(str(source)) if source else None


def decode_tokens(ids: Sequence[int], tokenizer: Any) -> list[str]:
    """Each id as its text (``#id`` without a tokenizer, ``∅`` for pooled rows' ``-1``)."""
    if tokenizer is None:
        return [f"#{i}" if i >= 0 else "∅" for i in ids]
    out = []
    for i in ids:
        if i < 0:
            out.append("∅")
            continue
        try:
            out.append(tokenizer.decode([int(i)]))
        except Exception:  # an id the tokenizer does not know
            out.append(f"#{i}")
    return out


def token_strip(tokens: Sequence[str], total: int) -> str:
    """One text as token chips (the boundaries visible), with a note of any left out."""
    chips = "".join(
        "<span style='display:inline-block;border:1px solid rgba(128,128,128,0.45);"
        f"border-radius:3px;padding:0 3px;margin:1px'>{H.token(t)}</span>"
        for t in tokens
    )
    if total > len(tokens):
        chips += f"<span style='color:{H.MUTED}'> … +{total - len(tokens)} tokens</span>"
    return f"<div style='margin:2px 0'>{chips}</div>"


def _texts_html(offsets: Any, token_ids: Any, tokenizer: Any, positions: str) -> tuple[str, list]:
    n_texts = len(offsets) - 1
    parts, sample = [], []
    for i in range(min(n_texts, MAX_TEXTS)):
        start, end = int(offsets[i]), int(offsets[i + 1])
        ids = [int(x) for x in token_ids[start : min(end, start + MAX_TOKENS)]]
        toks = decode_tokens(ids, tokenizer)
        sample.append(toks)
        label = f"text {i} ({end - start} {'tokens' if positions == 'all' else 'row'})"
        parts.append(H.note(label) + token_strip(toks, end - start))
    if n_texts > MAX_TEXTS:
        parts.append(H.note(f"… {n_texts - MAX_TEXTS} more texts not shown"))
    head = "texts and their tokens" if positions == "all" else f"texts (positions={positions})"
    return H.section(head) + "".join(parts), sample


def _sites_table(shapes: Sequence[tuple[str, tuple, str]]) -> str:
    rows = [(name, " x ".join(map(str, shape)), dtype) for name, shape, dtype in shapes]
    if len(rows) > MAX_SITE_ROWS:
        left = len(rows) - MAX_SITE_ROWS
        rows = rows[: MAX_SITE_ROWS - 1]
        return H.table(["site", "shape", "dtype"], rows) + H.note(f"… {left + 1} more sites")
    return H.table(["site", "shape", "dtype"], rows)


# ----- Activations -------------------------------------------------------------------------------


def activations_bundle(
    acts: Any,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    tokenizer: Any = None,
) -> dict[str, Any]:
    """The bundle of in-memory :class:`~workbench.Activations`."""
    meta = dict(acts.meta)
    shapes = [
        (name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in acts.data.items()
    ]
    n_bytes = sum(t.numel() * t.element_size() for t in acts.data.values())
    n_texts = len(acts.offsets) - 1
    n_rows = int(acts.offsets[-1])
    pairs = [
        ("model", _model_line(meta)),
        ("texts", n_texts),
        ("rows", f"{n_rows:,} ({'tokens' if acts.positions == 'all' else acts.positions})"),
        ("sites", len(shapes)),
        ("in memory", H.human_bytes(n_bytes)),
    ]
    tok = find_tokenizer(meta, tokenizer)
    texts, sample = _texts_html(acts.offsets, acts.token_ids, tok, acts.positions)
    body = H.kv(pairs) + H.section("sites") + _sites_table(shapes) + texts
    record = provenance_record(meta.get("model"), meta.get("revision"), list(acts.data))
    html = H.card("Activations", f"{n_texts} texts · {n_rows:,} rows", body, footer(record))
    data = {
        "kind": "activations",
        "model": meta.get("model"),
        "revision": meta.get("revision"),
        "positions": acts.positions,
        "n_texts": n_texts,
        "n_rows": n_rows,
        "bytes": n_bytes,
        "sites": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in shapes],
        "sample_tokens": sample,
    }
    return mimebundle(
        html=html, text=activations_repr(acts), data=data, include=include, exclude=exclude
    )


def activations_repr(acts: Any) -> str:
    """A few lines: sites, shapes, bytes; never a tensor."""
    meta = acts.meta
    n_texts, n_rows = len(acts.offsets) - 1, int(acts.offsets[-1])
    n_bytes = sum(t.numel() * t.element_size() for t in acts.data.values())
    lines = [
        f"Activations({_model_line(meta)}: {n_texts} texts, {n_rows} rows, "
        f"positions={acts.positions!r}, {H.human_bytes(n_bytes)})"
    ]
    items = list(acts.data.items())
    for name, t in items[:6]:
        lines.append(f"  {name}: {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}")
    if len(items) > 6:
        lines.append(f"  ... {len(items) - 6} more sites ({', '.join(H.compress_sites(acts))})")
    return clip_text(lines)


def _model_line(meta: Mapping[str, Any]) -> str:
    model = str(meta.get("model") or "?")
    return f"{model} @ {meta['revision']}" if meta.get("revision") else model


# ----- ActivationStore ---------------------------------------------------------------------------


def _store_bytes(store: Any) -> int:
    total = 0
    for name in ("manifest.json", "index.safetensors"):
        path = store.path / name
        total += path.stat().st_size if path.is_file() else 0
    return total + sum(s.get("bytes") or 0 for s in store.manifest["shards"])


def _store_shapes(store: Any) -> list[tuple[str, tuple, str]]:
    """Each site's (rows, width) from the first written shard's header (nothing is read)."""
    manifest = store.manifest
    widths = store.site_widths()
    return [(s, (manifest["n_rows"], widths.get(s, "?")), manifest["dtype"]) for s in store.sites]


def store_bundle(
    store: Any,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    tokenizer: Any = None,
) -> dict[str, Any]:
    """The bundle of an :class:`~workbench.ActivationStore` (reads headers and the index only)."""
    m = store.manifest
    shards = m["shards"]
    done = sum(s.get("bytes") is not None for s in shards)
    complete = done == len(shards)
    status = (
        "complete"
        if complete
        else f"resumable: {done}/{len(shards)} shards written; rerun the same capture to finish"
    )
    prov = m.get("provenance", {})
    meta = {"model": m.get("model"), "revision": m.get("revision"), "source": prov.get("source")}
    shapes = _store_shapes(store)
    pairs = [
        ("path", str(store.path)),
        ("model", _model_line(meta)),
        ("texts", m["n_texts"]),
        ("rows", f"{m['n_rows']:,} ({'tokens' if m['positions'] == 'all' else m['positions']})"),
        ("on disk", f"{H.human_bytes(_store_bytes(store))} in {len(shards)} shards"),
        ("status", status),
        ("created", prov.get("created", "-")),
    ]
    body = H.kv(pairs) + H.section("sites") + _sites_table(shapes)
    sample: list = []
    try:
        tok = find_tokenizer(meta, tokenizer)
        texts, sample = _texts_html(store.offsets, store.token_ids, tok, m["positions"])
        body += texts
    except Exception as exc:  # an unreadable index: the card still shows the manifest
        body += H.note(f"texts not shown: {exc}")
    extra = {"cpu_capability_at_capture": prov.get("cpu_capability")}
    record = provenance_record(m.get("model"), m.get("revision"), store.sites, extra)
    html = H.card(
        "ActivationStore", f"{m['n_texts']} texts · {status.split(':')[0]}", body, footer(record)
    )
    data = {
        "kind": "activation_store",
        "path": str(store.path),
        "model": m.get("model"),
        "revision": m.get("revision"),
        "positions": m["positions"],
        "n_texts": m["n_texts"],
        "n_rows": m["n_rows"],
        "bytes_on_disk": _store_bytes(store),
        "shards": len(shards),
        "shards_written": done,
        "complete": complete,
        "sites": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in shapes],
        "sample_tokens": sample,
    }
    return mimebundle(
        html=html, text=store_repr(store), data=data, include=include, exclude=exclude
    )


def store_repr(store: Any) -> str:
    """A few lines: path, model, sites, rows, shards, complete or resumable."""
    m = store.manifest
    shards = m["shards"]
    done = sum(s.get("bytes") is not None for s in shards)
    state = "complete" if done == len(shards) else f"resumable ({done}/{len(shards)} shards)"
    lines = [
        f"ActivationStore({str(store.path)!r}, model={m['model']!r}, sites={len(m['sites'])}, "
        f"rows={m['n_rows']}, shards={len(shards)}, complete={done == len(shards)})",
        f"  {m['n_texts']} texts, positions={m['positions']!r}, {m['dtype']}, "
        f"{H.human_bytes(_store_bytes(store))} on disk, {state}",
        f"  sites: {', '.join(H.compress_sites(m['sites']))}",
    ]
    return clip_text(lines)
