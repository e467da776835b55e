"""Activation capture with plain PyTorch forward hooks.

:func:`hooks` attaches one forward hook (or pre-hook, for input sites) per site inside a context
manager that removes every handle on exit, normal or not. :func:`capture` batches the inputs
(length-sorted, to waste little on padding), pads them on the tokenizer's side, passes explicit
position ids so that left padding does not shift positions, and keeps only real tokens: padded
positions never reach the output.

Two orders, same numbers. *Batch-major* (the default for a model in memory) runs the whole model
on one batch, then the next. *Layer-major* (``order="layer"``, and what ``"auto"`` picks for a
model with blocks offloaded to disk) runs the embeddings for every batch, then block 0 over every
batch, then block 1, ... (see :mod:`workbench.models.layerwise`), so an offloaded block's weights
are read from disk once per capture instead of once per batch. The batches are the same (same
order, same padding), so each site sees the same tensors either way.

Output layout (shared by memory and disk): for each site an ``(n_rows, d)`` tensor holding every
real token of every text, concatenated in input order; ``offsets`` (``n_texts + 1``) delimits the
texts and ``token_ids`` gives each row's token. With ``positions="last"`` or ``"mean"`` each text is
one row and ``offsets`` is ``arange(n_texts + 1)``.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from workbench import backends as _backends
from workbench.devices import format_bytes, memory_report, resolve_dtype
from workbench.errors import ConfigError
from workbench.hooking import pad, position_ids, read_hooks
from workbench.inputs import TokenizedInputs, tokenize
from workbench.models import layerwise
from workbench.models.subject import Subject
from workbench.provenance import numerics
from workbench.sites import Site
from workbench.store import FORMAT, ActivationStore, ShardPlan, StoreWriter, plan_shards

log = logging.getLogger(__name__)

Positions = Literal["all", "last", "mean"]
POSITIONS: tuple[str, ...] = ("all", "last", "mean")
Order = Literal["auto", "batch", "layer"]
ORDERS: tuple[str, ...] = ("auto", "batch", "layer")
DEFAULT_SHARD_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Activations(Mapping[str, Tensor]):
    """Captured activations in memory; a read-only mapping from site name to ``(n_rows, d)``.

    Attributes:
        data: Site name to tensor.
        offsets: ``(n_texts + 1,)``; text ``i`` is rows ``offsets[i]:offsets[i + 1]``.
        token_ids: ``(n_rows,)`` token of each row (last token for ``"last"``, -1 for ``"mean"``).
        positions: Which positions were kept.
        meta: What produced them (model, revision, dtype, ...).
    """

    data: dict[str, Float[Tensor, "row d"]]
    offsets: Int[Tensor, " text_plus_1"]
    token_ids: Int[Tensor, " row"]
    positions: str = "all"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n_rows = int(self.offsets[-1])
        for name, tensor in self.data.items():
            if tensor.shape[0] != n_rows:
                raise ValueError(f"site {name}: {tensor.shape[0]} rows, offsets say {n_rows}")
        if self.token_ids.shape != (n_rows,):
            raise ValueError(
                f"token_ids has shape {tuple(self.token_ids.shape)}, expected ({n_rows},)"
            )

    def __getitem__(self, site: str) -> Tensor:
        try:
            return self.data[site]
        except KeyError:
            raise KeyError(f"no site {site!r}; captured: {', '.join(self.data)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def sites(self) -> list[str]:
        """Captured site names in forward order."""
        return list(self.data)

    def __repr__(self) -> str:
        from workbench.display.objects import activations_repr

        return activations_repr(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """HTML card, short text and JSON for notebooks (see :mod:`workbench.display`)."""
        from workbench.display.objects import activations_bundle

        return activations_bundle(self, include, exclude)

    def text(self, i: int, site: str) -> Tensor:
        """Rows of text ``i`` at ``site``."""
        return self.data[site][int(self.offsets[i]) : int(self.offsets[i + 1])]


def capture(
    subject: Subject,
    inputs: Any,
    *,
    sites: str | Sequence[str],
    layers: str | int | Sequence[int] = "all",
    positions: Positions = "all",
    batch_size: int = 8,
    max_length: int | None = None,
    dtype: str | torch.dtype | None = None,
    out: str | os.PathLike[str] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    padding_side: Literal["left", "right"] | None = None,
    n_texts: int | None = None,
    progress: bool = True,
    backend: str = "hooks",
    remote: bool | str = False,
    order: Order = "auto",
) -> Activations | ActivationStore:
    """Runs the model over the inputs and records activations at the given sites.

    Args:
        subject: The model (from :func:`workbench.load_model`).
        inputs: Texts, token-id sequences, a 2-D token-id tensor, or a source spec
            (``builtin:pydoc``, a ``.txt`` or ``.jsonl`` file).
        sites: Site kinds (``"resid_post"``, expanded over ``layers``) or names
            (``"resid_post.3"``, ``"final_norm"``), as a list or a comma-separated string.
        layers: Layers for bare per-layer kinds: ``"all"``, ``"0,3,-1"``, ``"2:6"`` or ints.
        positions: ``"all"`` real tokens, the ``"last"`` real token of each text, or the
            ``"mean"`` over each text's real tokens.
        batch_size: Texts per forward pass.
        max_length: Truncate longer texts; default: the model's context length (at most 512).
        dtype: Dtype of the stored activations; default: float32.
        out: ``None`` returns :class:`Activations` in memory; a folder streams to an
            :class:`ActivationStore` there (resumable).
        shard_bytes: Target size of one shard on disk; bounds the memory of a streamed capture.
        padding_side: Pad on the ``"left"`` or ``"right"``; default: the tokenizer's side.
        n_texts: For a source spec, use only the first ``n_texts`` texts.
        progress: Show a progress bar.
        backend: ``"hooks"`` (plain PyTorch hooks), ``"transformer_lens"`` or ``"nnsight"``;
            same output either way (see :mod:`workbench.backends`).
        remote: With ``backend="nnsight"``, run each batch on NDIF (``True``), or rehearse
            that in-process (``"local"``).
        order: ``"batch"`` runs the whole model batch after batch; ``"layer"`` runs each block
            over every batch before the next block, so offloaded weights are read once (the
            residuals wait in memory, or on disk past :data:`SPILL_SHARE` of free memory);
            ``"auto"``: layer-major when blocks are offloaded to disk and there is more than
            one batch. Same activations either way.

    Returns:
        In-memory :class:`Activations`, or the :class:`ActivationStore` written at ``out``.

    Raises:
        SiteError: Unknown site or layer out of range.
        InputError: Empty or unreadable inputs.
        StoreMismatchError: ``out`` holds a capture of other inputs or settings.
    """
    resolved = subject.expand(sites, layers)
    if positions not in POSITIONS:
        raise ConfigError(f"unknown positions {positions!r}; use one of {', '.join(POSITIONS)}")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
    side = padding_side or getattr(subject.tokenizer, "padding_side", "right")
    if side not in ("left", "right"):
        raise ConfigError(f"unknown padding_side {side!r}; use 'left' or 'right'")
    store_dtype = resolve_dtype(dtype)
    toks = tokenize(
        subject.tokenizer,
        inputs,
        max_length=max_length or _context_length(subject),
        vocab_size=int(subject.model.get_input_embeddings().num_embeddings),
        limit=n_texts,
    )
    run_batch = None
    if backend != "hooks" or remote:
        run_batch = _backends.get(backend)(subject, resolved, remote=remote)
    layer_major = _layer_major(subject, order, run_batch is None, len(toks.sequences), batch_size)
    runner = _Runner(subject, resolved, positions, batch_size, side, store_dtype, run_batch)
    offsets, token_ids = _row_layout(toks, positions)
    need = int(offsets[-1]) * runner.row_bytes
    log.info(
        "capture on %s: %d rows x %d sites, about %s of activations, %s",
        subject.placement_summary(),
        int(offsets[-1]),
        len(resolved),
        format_bytes(need),
        "layer-major" if layer_major else "batch-major",
    )
    if out is None:
        _check_fits_in_memory(need)
        if layer_major:
            buffers = runner._buffers(int(offsets[-1]))
            data = runner.run_layers(toks, range(len(toks.sequences)), offsets, buffers, progress)
        else:
            bar = tqdm(total=len(toks.sequences), desc="capture", unit="text", disable=not progress)
            with bar:
                data = runner.run(toks, range(len(toks.sequences)), offsets, bar)
        meta = {**subject.provenance(), "dtype": str(store_dtype).removeprefix("torch.")}
        return Activations(
            data, torch.from_numpy(offsets), torch.from_numpy(token_ids), positions, meta
        )
    return _capture_to_store(
        Path(out), subject, runner, toks, offsets, token_ids, shard_bytes, progress, layer_major
    )


def _layer_major(subject: Subject, order: str, hooks: bool, n_texts: int, batch_size: int) -> bool:
    """Whether to capture layer-major (see :mod:`workbench.models.layerwise`)."""
    if order not in ORDERS:
        raise ConfigError(f"unknown order {order!r}; use one of {', '.join(ORDERS)}")
    if order == "batch":
        return False
    why = layerwise.unsupported_reason(subject.model, subject.family.name)
    if order == "layer":
        if not hooks:
            raise ConfigError("order='layer' runs on the hooks backend only; use order='batch'")
        if why is not None:
            raise ConfigError(why)
        return True
    offloaded = "disk" in subject.placement.values()
    if offloaded and why is not None:
        log.info("blocks are offloaded but %s", why.removesuffix("; use order='batch'"))
    return hooks and offloaded and why is None and n_texts > batch_size


def estimate_bytes(
    subject: Subject,
    n_rows: int,
    sites: str | Sequence[str],
    layers: str | int | Sequence[int] = "all",
    dtype: str | torch.dtype | None = None,
) -> int:
    """Bytes the activations of ``n_rows`` rows at these sites take (in memory or on disk)."""
    vocab = int(getattr(subject.model.config, "vocab_size", 0) or 0)
    widths = [
        vocab if s.kind == "unembed" else subject.d_model for s in subject.expand(sites, layers)
    ]
    return n_rows * sum(widths) * torch.empty((), dtype=resolve_dtype(dtype)).element_size()


def count_rows(
    subject: Subject,
    inputs: Any,
    *,
    positions: Positions = "all",
    max_length: int | None = None,
    n_texts: int | None = None,
) -> int:
    """Rows a capture of ``inputs`` will hold (real tokens, or one per text), before running it.

    Tokenizes the inputs as :func:`capture` does (same truncation); for :func:`estimate_bytes`.
    """
    toks = tokenize(
        subject.tokenizer,
        inputs,
        max_length=max_length or _context_length(subject),
        vocab_size=int(subject.model.get_input_embeddings().num_embeddings),
        limit=n_texts,
    )
    return int(_row_layout(toks, positions)[0][-1])


MEMORY_SHARE = 0.8
"""Share of the host's free memory an in-memory capture may take; past it, ``out=`` is needed."""
SPILL_SHARE = 0.25
"""Share of the host's free memory a layer-major capture's residuals may take; past it, they wait
on disk between blocks (next to the store, or in the system's temporary folder)."""


def _check_fits_in_memory(need: int) -> None:
    """Refuses an in-memory capture bigger than the host's free memory allows."""
    free = memory_report()[0].free
    if free is not None and need > MEMORY_SHARE * free:
        raise ConfigError(
            f"an in-memory capture needs about {format_bytes(need)} but the host has "
            f"{format_bytes(free)} free; stream it to disk with out='acts/' (an ActivationStore)"
        )


def _context_length(subject: Subject) -> int:
    config = subject.model.config
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    return int(min(limit or 512, 512))


def _row_layout(toks: TokenizedInputs, positions: str) -> tuple[np.ndarray, np.ndarray]:
    if positions == "all":
        return toks.offsets, toks.token_ids
    n = len(toks.sequences)
    last = np.array([int(s[-1]) for s in toks.sequences], dtype=np.int64)
    return np.arange(n + 1, dtype=np.int64), last if positions == "last" else np.full(
        n, -1, np.int64
    )


class _Runner:
    """Forward passes over a set of texts, filling one preallocated buffer per site."""

    def __init__(
        self,
        subject: Subject,
        sites: list[Site],
        positions: str,
        batch_size: int,
        side: str,
        dtype: torch.dtype,
        run_batch: _backends.RunBatch | None = None,
    ) -> None:
        self.subject, self.sites, self.positions = subject, sites, positions
        self.run_batch = run_batch
        self.batch_size, self.side, self.dtype = batch_size, side, dtype
        params = inspect.signature(subject.model.forward).parameters
        self.pass_positions = "position_ids" in params
        self.no_cache = "use_cache" in params
        pad = subject.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0
        vocab = int(getattr(subject.model.config, "vocab_size", 0) or 0)
        self.widths = {s.name: vocab if s.kind == "unembed" else subject.d_model for s in sites}
        self.row_bytes = sum(self.widths.values()) * torch.empty((), dtype=dtype).element_size()

    def _buffers(self, n_rows: int) -> dict[str, Tensor]:
        """One allocation holding every site's ``(n_rows, width)`` buffer as a view.

        A single large block (rather than one per site) is returned to the system when freed, so
        shard after shard reuses the same memory instead of fragmenting the heap: a streamed
        capture's peak stays at one shard above the forward pass's own.
        """
        flat = torch.empty(n_rows * sum(self.widths.values()), dtype=self.dtype)
        views, start = {}, 0
        for name, width in self.widths.items():
            views[name] = flat[start : start + n_rows * width].view(n_rows, width)
            start += n_rows * width
        return views

    def _batches(
        self, toks: TokenizedInputs, texts: Sequence[int], offsets: np.ndarray, base: int
    ) -> Iterator[tuple[list[int], dict[str, Any], Tensor]]:
        """The forward's keyword arguments per batch (length-sorted), with each batch's rows.

        Yields ``(texts, kwargs, dest)``: the batch's texts, the model's keyword arguments, and
        the buffer rows (relative to ``base``) its real tokens go to.
        """
        seqs = toks.sequences
        order = sorted(texts, key=lambda i: len(seqs[i]))
        device = self.subject.device
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            ids, mask = pad([seqs[i] for i in batch], self.pad_id, self.side)
            dest = (
                torch.cat([torch.arange(int(offsets[i]), int(offsets[i + 1])) for i in batch])
                - base
            )
            kwargs: dict[str, Any] = {
                "input_ids": ids.to(device),
                "attention_mask": mask.to(device),
            }
            if self.pass_positions:
                kwargs["position_ids"] = position_ids(mask).to(device)
            if self.no_cache:
                kwargs["use_cache"] = False
            yield batch, kwargs, dest

    def _store(
        self, buffers: dict[str, Tensor], site: Site, hidden: Tensor, mask: Tensor, dest: Tensor
    ) -> None:
        """Writes a site's real-token rows of one batch into its buffer at rows ``dest``."""
        # on a placed model each block's output is on that block's device
        if mask.device != hidden.device:
            mask = mask.to(hidden.device)
        rows = _select(hidden, mask, self.positions)
        buf = buffers[site.name]
        if rows.shape[-1] != buf.shape[-1]:  # a site wider than planned: its own buffer
            buf = buffers[site.name] = torch.empty(buf.shape[0], rows.shape[-1], dtype=self.dtype)
        buf.index_copy_(0, dest, rows.to(device="cpu", dtype=self.dtype))

    def run(
        self, toks: TokenizedInputs, texts: range, offsets: np.ndarray, bar: tqdm
    ) -> dict[str, Tensor]:
        """Captures texts ``texts`` (a contiguous range); returns rows relative to the range."""
        base = int(offsets[texts.start])
        buffers = self._buffers(int(offsets[texts.stop]) - base)
        state: dict[str, Any] = {}

        def sink(site: Site, hidden: Tensor) -> None:
            self._store(buffers, site, hidden, state["mask"], state["dest"])

        tap = read_hooks(self.sites, sink) if self.run_batch is None else contextlib.nullcontext()
        with tap, torch.inference_mode():
            for batch, kwargs, dest in self._batches(toks, texts, offsets, base):
                state["mask"], state["dest"] = kwargs["attention_mask"], dest
                if self.run_batch is None:
                    self.subject.model(**kwargs)
                else:
                    outputs = self.run_batch(**kwargs)
                    for site in self.sites:
                        sink(site, outputs[site.name])
                bar.update(len(batch))
        return {site.name: buffers[site.name] for site in self.sites}

    def run_layers(
        self,
        toks: TokenizedInputs,
        texts: Sequence[int],
        offsets: np.ndarray,
        buffers: dict[str, Tensor],
        progress: bool,
        spill_parent: Path | None = None,
    ) -> dict[str, Tensor]:
        """Captures ``texts`` layer-major into ``buffers`` (absolute rows); returns them.

        Same batches as :meth:`run`; the residuals between blocks wait in memory, or in a folder
        under ``spill_parent`` when they exceed :data:`SPILL_SHARE` of the host's free memory.
        """
        batches = list(self._batches(toks, texts, offsets, 0))
        inputs = [kwargs for _, kwargs, _ in batches]

        def sink(index: int, site: Site, hidden: Tensor) -> None:
            _, kwargs, dest = batches[index]
            self._store(buffers, site, hidden, kwargs["attention_mask"], dest)

        model = self.subject.model
        widths = [int(kw["input_ids"].numel()) for kw in inputs]
        residual = sum(widths) * self.subject.d_model * self.subject.dtype.itemsize
        free = memory_report()[0].free
        budget = None if free is None else int(SPILL_SHARE * free)
        tail = [s for s in self.sites if s.kind in layerwise.TAIL_KINDS]
        ends = [
            self.subject.site(k) for k in layerwise.TAIL_KINDS if k in self.subject.family.sites
        ]
        norm = next((s for s in ends if s.kind == "final_norm"), None)
        stages = 1 + self.subject.n_layers + (1 if tail else 0)
        bar = tqdm(
            total=stages * len(batches),
            desc="capture (layer-major)",
            unit="batch",
            disable=not progress,
        )
        with (
            bar,
            layerwise.spill_folder(spill_parent, residual, budget) as spill,
            torch.inference_mode(),
        ):
            layerwise.run(
                model,
                self.subject.family.layers,
                self.sites,
                inputs,
                sink,
                spill,
                on_step=lambda: bar.update(1),
                final_norm=norm,
                after=[s.module for s in ends],
            )
        return {site.name: buffers[site.name] for site in self.sites}


def _select(hidden: Float[Tensor, "b p d"], mask: Tensor, positions: str) -> Float[Tensor, "r d"]:
    """Keeps real tokens (``all``), each text's last real token, or the mean over real tokens."""
    keep = mask.bool()
    if positions == "all":
        return hidden[keep]
    if positions == "last":
        width = keep.shape[1]
        last = width - 1 - keep.flip(-1).to(torch.int8).argmax(-1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    weights = keep.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1)


def _overlap_writes(subject: Subject) -> bool:
    """Whether shard writes overlap the next forward passes (on accelerators, not on the CPU)."""
    return subject.device.type != "cpu"


def _capture_to_store(
    path: Path,
    subject: Subject,
    runner: _Runner,
    toks: TokenizedInputs,
    offsets: np.ndarray,
    token_ids: np.ndarray,
    shard_bytes: int,
    progress: bool,
    layer_major: bool = False,
) -> ActivationStore:
    config = subject.model.config
    widths = [
        int(config.vocab_size) if s.kind == "unembed" else subject.d_model for s in runner.sites
    ]
    row_bytes = sum(widths) * torch.empty((), dtype=runner.dtype).element_size()
    rows_per_shard = max(1, shard_bytes // row_bytes)
    plans = plan_shards(offsets, rows_per_shard)
    settings = {
        "sites": [s.name for s in runner.sites],
        "positions": runner.positions,
        "dtype": str(runner.dtype).removeprefix("torch."),
        "rows_per_shard": int(rows_per_shard),
        "model": subject.name,
        "revision": subject.revision,
    }
    manifest = {
        "format": FORMAT,
        "model": subject.name,
        "revision": subject.revision,
        "sites": settings["sites"],
        "positions": runner.positions,
        "dtype": settings["dtype"],
        "n_texts": len(toks.sequences),
        "n_rows": int(offsets[-1]),
        "input_hash": toks.digest(),
        "settings": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest(),
        "shards": [
            {
                "index": p.index,
                "file": p.file,
                "texts": list(p.texts),
                "rows": list(p.rows),
                "bytes": None,
            }
            for p in plans
        ],
        "provenance": {
            **subject.provenance(),
            **numerics(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    }
    writer = StoreWriter(path, manifest, token_ids, offsets)
    todo = writer.pending()
    if layer_major and todo:
        _layer_major_to_store(path, runner, toks, offsets, writer, todo, progress)
        return ActivationStore(path)
    total = sum(p.texts[1] - p.texts[0] for p in todo)
    # On an accelerator, shard k is written (serialised, fsynced, renamed) on a writer thread
    # while the forward passes of shard k + 1 run, so disk time hides behind device compute; at
    # most two shards are in memory. On the CPU the writer would compete with the forward for
    # the same cores (measured slower in bench/capture.py), so shards are written in turn.
    # Leaving the block, however it is left, waits for the write in flight, so every shard file
    # is either complete and recorded in the manifest or absent.
    overlap = _overlap_writes(subject)
    with (
        tqdm(total=total, desc="capture", unit="text", disable=not progress) as bar,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="wb-store") as pool,
    ):
        in_flight: Future[None] | None = None
        for plan in todo:
            tensors = runner.run(toks, range(*plan.texts), offsets, bar)
            if in_flight is not None:
                in_flight.result()
            in_flight = pool.submit(writer.write, plan, tensors)
            # drop this frame's reference: once written, the shard's buffers are freed before the
            # next shard's are allocated, so a CPU capture holds one shard at a time
            del tensors
            if not overlap:
                in_flight.result()
                in_flight = None
        if in_flight is not None:
            in_flight.result()
    return ActivationStore(path)


def _layer_major_to_store(
    path: Path,
    runner: _Runner,
    toks: TokenizedInputs,
    offsets: np.ndarray,
    writer: StoreWriter,
    todo: list[ShardPlan],
    progress: bool,
) -> None:
    """Captures the pending shards layer-major, then writes them one by one.

    Block ``i``'s sites are known for every text before block ``i + 1`` runs, so no shard is
    complete before the last block: the rows wait in one memory-mapped scratch file per site
    (under ``path``, removed on exit; pages go to disk as memory needs), and each shard is then
    written atomically and recorded in the manifest as in the batch-major path. An interrupted
    run leaves the shards finished before it, and none half-written.
    """
    texts = [i for plan in todo for i in range(*plan.texts)]
    n_rows = int(offsets[-1])
    with tempfile.TemporaryDirectory(prefix=".layerwise-", dir=path) as scratch:
        buffers = {}
        for index, (name, width) in enumerate(runner.widths.items()):
            file = Path(scratch) / f"site{index}.bin"
            size = n_rows * width
            with file.open("wb") as handle:
                handle.truncate(size * torch.empty((), dtype=runner.dtype).element_size())
            flat = torch.from_file(str(file), shared=True, size=size, dtype=runner.dtype)
            buffers[name] = flat.view(n_rows, width)
        buffers = runner.run_layers(toks, texts, offsets, buffers, progress, Path(scratch))
        for plan in todo:
            start, stop = plan.rows
            writer.write(plan, {name: buf[start:stop] for name, buf in buffers.items()})
        del buffers
