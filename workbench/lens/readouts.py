"""The logit lens and the last-block lens: residual vectors decoded by the model's own head.

**Logit lens** (nostalgebraist 2020, "interpreting GPT: the logit lens"): the residual stream
after block ``l`` (``resid_post.l``) is passed through the model's final norm and unembedding, as
if the remaining blocks were skipped. Which modules those are comes from the family file's
``final_norm`` and ``unembed`` sites, so every family that declares them works unchanged. For a
pre-LN decoder the last layer's lens *is* the model's output.

**Last-block lens**: ``h_l`` is fed through the last block, then the norm and unembedding. The
model is run with an edit hook that replaces the last block's input (``resid_pre.{last}``) by
``h_l`` read earlier in the same forward pass, so the block gets its real attention mask, rotary
embedding and position arguments, with no per-architecture code. Attention in the last block then
mixes the positions of ``h_l``: that is the definition. Fed ``h_{last-1}`` (the block's real
input) it reproduces the model's logits; at the last layer itself (already the last block's
output) it reports the model's own output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from workbench.capturing import Activations, capture
from workbench.hooking import edit_hooks, read_hooks
from workbench.lens.core import (
    LensError,
    LogitsFn,
    PositionSpec,
    Request,
    Rows,
    chunks,
    collect_stats,
    decode,
    prepare,
    rows_at,
    select_rows,
)
from workbench.lens.results import LensResult
from workbench.models.subject import Subject
from workbench.sites import Site

Translate = Callable[[int, Tensor], Tensor]
"""``(layer, h) -> h'``: what a tuned lens does to a residual vector before decoding."""


def logit_lens(
    subject: Subject,
    inputs: Any,
    *,
    layers: str | int | Sequence[int] = "all",
    positions: PositionSpec = "all",
    top_k: int = 5,
    target: str | int | None = None,
    n_texts: int | None = None,
    max_length: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
) -> LensResult:
    """Reads every layer's residual stream through the model's final norm and unembedding.

    Args:
        subject: A causal LM whose family declares ``unembed`` (and usually ``final_norm``).
        inputs: Texts, token-id sequences or a source spec (as :func:`workbench.capturing`).
        layers: ``resid_post`` layers: ``"all"``, ``"0,3,-1"``, ``"2:6"`` or ints.
        positions: ``"all"``, ``"last"``, an index or a list of indices within every text.
        top_k: Top tokens kept per cell.
        target: A token (string or id) whose rank and probability are reported.
        n_texts: For a source spec, use the first ``n_texts`` texts.
        max_length: Truncate longer texts.
        batch_size: Texts per forward pass.
        progress: Show capture progress.

    Returns:
        The :class:`LensResult` (``lens="logit"``).

    Raises:
        LensError: No unembedding, a bad ``positions``, ``top_k`` or ``target``.
        SiteError: Unknown layer.
    """
    request = prepare(subject, layers, positions, top_k, target)
    kw = dict(n_texts=n_texts, max_length=max_length, batch_size=batch_size, progress=progress)
    return decoded_lens("logit", subject, inputs, request, None, kw, {})


def last_block_lens(
    subject: Subject,
    inputs: Any,
    *,
    layers: str | int | Sequence[int] = "all",
    positions: PositionSpec = "all",
    top_k: int = 5,
    target: str | int | None = None,
    n_texts: int | None = None,
    max_length: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
) -> LensResult:
    """Feeds every layer's residual stream through the last block, then norm and unembedding.

    One forward pass per layer (below the last): a read hook keeps ``resid_post.l`` and an edit
    hook puts it in place of the last block's input, so the block runs with the model's own
    masks and position arguments. Arguments as :func:`logit_lens`.

    Returns:
        The :class:`LensResult` (``lens="last_block"``).

    Raises:
        LensError: No unembedding, a bad ``positions``, ``top_k`` or ``target``.
        SiteError: Unknown layer, or a family without ``resid_pre``.
    """
    request = prepare(subject, layers, positions, top_k, target)
    last = subject.n_layers - 1
    block_in = subject.site(f"resid_pre.{last}")
    kw = dict(n_texts=n_texts, max_length=max_length, batch_size=batch_size, progress=progress)
    acts = capture(subject, inputs, sites=[request.unembed.name], **kw)
    rows = select_rows(acts.offsets.numpy(), acts.token_ids.numpy(), request.positions)
    final = acts[request.unembed.name][torch.from_numpy(rows.index)]
    del acts

    def layer_logits(layer: int) -> LogitsFn:
        if layer == last:
            return lambda s: final[s]
        fed = _through_last_block(subject, inputs, layer, block_in, request.unembed, kw)
        logits = fed[request.unembed.name][torch.from_numpy(rows.index)]
        return lambda s: logits[s]

    stats = collect_stats(request, rows, final, layer_logits)
    return build_result("last_block", subject, request, rows, stats, {})


def _through_last_block(
    subject: Subject,
    inputs: Any,
    layer: int,
    block_in: Site,
    unembed: Site,
    kw: dict[str, Any],
) -> Activations:
    """Captures the logits with the last block's input replaced by ``resid_post.layer``."""
    source = subject.site(f"resid_post.{layer}")
    held: dict[str, Tensor] = {}

    def keep(_site: Site, h: Tensor) -> None:
        held["h"] = h

    def swap(_site: Site, h: Tensor) -> Tensor:
        new = held.pop("h")
        if new.shape != h.shape:  # pragma: no cover - a family file that does not fit
            raise RuntimeError(f"resid_post.{layer} {tuple(new.shape)} != {tuple(h.shape)}")
        return new

    with read_hooks([source], keep), edit_hooks([block_in], swap):
        return capture(subject, inputs, sites=[unembed.name], **kw)


def decoded_lens(
    name: str,
    subject: Subject,
    inputs: Any,
    request: Request,
    translate: Translate | None,
    kw: dict[str, Any],
    meta: dict[str, Any],
) -> LensResult:
    """A lens that decodes (possibly translated) ``resid_post`` vectors with the model's head.

    One capture of the requested layers and the model's logits, then the statistics in chunks.
    """
    sites = [f"resid_post.{layer}" for layer in request.layers] + [request.unembed.name]
    acts = capture(subject, inputs, sites=sites, **kw)
    rows = select_rows(acts.offsets.numpy(), acts.token_ids.numpy(), request.positions)
    final = acts[request.unembed.name][torch.from_numpy(rows.index)]
    return _decode_rows(name, subject, acts, request, rows, final, translate, meta)


def _decode_rows(
    name: str,
    subject: Subject,
    acts: Activations,
    request: Request,
    rows: Rows,
    final: Tensor,
    translate: Translate | None,
    meta: dict[str, Any],
) -> LensResult:
    """The lens statistics of ``acts``' ``resid_post`` at ``rows`` against the ``final`` logits."""
    index = torch.from_numpy(rows.index)

    def layer_logits(layer: int) -> LogitsFn:
        h = acts[f"resid_post.{layer}"][index]
        if translate is None:
            return lambda s: decode(subject, request.norm, request.unembed, h[s])
        return lambda s: decode(subject, request.norm, request.unembed, translate(layer, h[s]))

    stats = collect_stats(request, rows, final, layer_logits)
    return build_result(name, subject, request, rows, stats, meta)


def activations_lens(
    subject: Subject,
    acts: Activations,
    *,
    translate: Translate | None = None,
    name: str = "logit",
    layers: str | int | Sequence[int] = "all",
    rows: np.ndarray | None = None,
    top_k: int = 5,
    target: str | int | None = None,
    meta: dict[str, Any] | None = None,
) -> LensResult:
    """A lens on activations already captured: no forward pass of the model.

    The model's own output at each row is decoded from the last layer's ``resid_post`` through
    the same final norm and unembedding (for the pre-norm decoders the hook files describe,
    that is the model's output), so ``acts`` needs ``resid_post`` at the requested layers and at
    the last one. Use it to read many lenses, or many samples of rows, off one capture or off an
    activation cache.

    Args:
        subject: The model the activations come from.
        acts: In-memory :class:`~workbench.capturing.Activations` (every token of each text).
        translate: ``(layer, h) -> h'`` before decoding (a tuned lens's ``translate``), or
            ``None`` for the logit lens.
        name: The lens's name in the result.
        layers: ``resid_post`` layers to read.
        rows: Capture rows to read (ascending), e.g. a random sample of positions; ``None``:
            every row.
        top_k: Top tokens kept per cell.
        target: A token whose rank and probability are reported.
        meta: Extra entries for the result's ``meta``.

    Raises:
        LensError: No unembedding, a missing layer in ``acts``, bad rows or ``top_k``.
    """
    request = prepare(subject, layers, "all", top_k, target)
    last = subject.n_layers - 1
    wanted = sorted({*request.layers, last})
    missing = [layer for layer in wanted if f"resid_post.{layer}" not in acts.sites]
    if missing:
        raise LensError(f"the activations lack resid_post at layers {missing}")
    offsets, token_ids = acts.offsets.numpy(), acts.token_ids.numpy()
    index = np.arange(int(offsets[-1])) if rows is None else np.asarray(rows, dtype=np.int64)
    picked = rows_at(offsets, token_ids, index)
    with torch.inference_mode():
        top = acts[f"resid_post.{last}"][torch.from_numpy(picked.index)]
        parts = chunks(len(top), request.vocab_size)
        final = torch.cat([decode(subject, request.norm, request.unembed, top[s]) for s in parts])
    return _decode_rows(name, subject, acts, request, picked, final, translate, dict(meta or {}))


def build_result(
    name: str,
    subject: Subject,
    request: Request,
    rows: Rows,
    stats: dict[str, Any],
    meta: dict[str, Any],
) -> LensResult:
    """Assembles a :class:`LensResult`, decoding token ids to text."""
    text = _decoder(subject.tokenizer)
    as_text = np.vectorize(text, otypes=[object])
    return LensResult(
        lens=name,
        model=subject.name,
        revision=subject.revision,
        layers=np.asarray(request.layers, dtype=np.int64),
        offsets=rows.offsets,
        positions=rows.position,
        token_ids=rows.token_ids,
        next_ids=rows.next_ids,
        tokens=as_text(rows.token_ids).astype(str),
        top_ids=stats["top_ids"],
        top_probs=stats["top_probs"],
        top_tokens=as_text(stats["top_ids"]).astype(str),
        entropy=stats["entropy"],
        kl=stats["kl"],
        cross_entropy=stats["cross_entropy"],
        final_entropy=stats["final_entropy"],
        final_cross_entropy=stats["final_cross_entropy"],
        target=request.target,
        target_token=None if request.target is None else text(request.target),
        target_rank=stats.get("target_rank"),
        target_prob=stats.get("target_prob"),
        meta={
            **subject.provenance(),
            "lens": name,
            "positions": _json_positions(request.positions),
            "top_k": request.top_k,
            **meta,
        },
    )


def _json_positions(positions: PositionSpec) -> str | int | list[int]:
    if isinstance(positions, str):
        return positions
    if isinstance(positions, int | np.integer):
        return int(positions)
    return [int(p) for p in positions]


def _decoder(tokenizer: Any) -> Callable[[int], str]:
    @cache
    def text(token: int) -> str:
        return str(tokenizer.decode([int(token)]))

    return text
