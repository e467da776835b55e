"""``ActivationStore``: activations on disk as safetensors shards plus a JSON manifest.

Layout of a store folder::

    manifest.json            what was captured (model, sites, dtype, inputs' hash, shard plan)
    index.safetensors        token_ids (n_rows,) and offsets (n_texts + 1,)
    shard-00000.safetensors  one tensor per site: rows for a contiguous range of texts
    ...

Every file is written to a temporary name, flushed and renamed into place, so a reader never sees
a partial file. The shard plan is fixed before the first forward pass; a rerun of the same capture
skips every shard already on disk and valid, so a killed capture resumes where it stopped. A
capture of different inputs or settings into the same folder is refused.

Reads are memory-mapped: the safetensors header gives each tensor's byte range, which is mapped
with ``numpy.memmap`` without reading it. A shard whose size disagrees with its header or with the
manifest (a truncated file) raises :class:`~workbench.errors.CorruptShardError`.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.errors import CorruptShardError, StoreError, StoreMismatchError
from workbench.files import atomic_save_tensors, atomic_write_bytes

FORMAT = "workbench.activations/1"
MANIFEST = "manifest.json"
INDEX = "index.safetensors"

_NP_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,
    "I64": np.int64,
    "F64": np.float64,
}
_TORCH_VIEW = {"BF16": torch.bfloat16}


@dataclass(frozen=True)
class ShardPlan:
    """One shard: a contiguous range of texts and the rows they occupy."""

    index: int
    texts: tuple[int, int]
    rows: tuple[int, int]

    @property
    def file(self) -> str:
        """The shard's file name."""
        return f"shard-{self.index:05d}.safetensors"


def plan_shards(offsets: np.ndarray, rows_per_shard: int) -> list[ShardPlan]:
    """Splits texts into consecutive shards of about ``rows_per_shard`` rows (whole texts each)."""
    plans: list[ShardPlan] = []
    start = 0
    n_texts = len(offsets) - 1
    while start < n_texts:
        end = int(np.searchsorted(offsets, offsets[start] + rows_per_shard, side="right")) - 1
        end = min(max(end, start + 1), n_texts)
        plans.append(ShardPlan(len(plans), (start, end), (int(offsets[start]), int(offsets[end]))))
        start = end
    return plans


def read_header(path: Path) -> tuple[int, dict[str, Any]]:
    """Parses a safetensors header; returns (data start offset, header dict).

    Raises:
        CorruptShardError: The file is shorter than its header says, or the header is not valid.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > size - 8:
                raise ValueError("header longer than file")
            header = json.loads(fh.read(n))
    except (OSError, struct.error, ValueError) as exc:
        raise CorruptShardError(f"{path}: not a readable safetensors file ({exc})") from exc
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if size != 8 + n + end:
        raise CorruptShardError(
            f"{path}: truncated or corrupt ({size} bytes, the header needs {8 + n + end}); "
            "rerun the capture to rewrite it"
        )
    return 8 + n, header


def mmap_tensor(path: Path, name: str) -> torch.Tensor:
    """Memory-maps one tensor of a safetensors file without reading it."""
    start, header = read_header(path)
    if name not in header:
        raise StoreError(f"{path} has no tensor {name!r}")
    info = header[name]
    shape = tuple(info["shape"])
    if 0 in shape:
        return torch.empty(shape, dtype=_TORCH_VIEW.get(info["dtype"], torch.float32))
    array = np.memmap(
        path,
        dtype=_NP_DTYPES[info["dtype"]],
        mode="c",
        offset=start + info["data_offsets"][0],
        shape=shape,
    )
    tensor = torch.from_numpy(array)
    view = _TORCH_VIEW.get(info["dtype"])
    return tensor.view(view) if view is not None else tensor


class ActivationStore:
    """A finished or resumable capture on disk.

    Open one with ``ActivationStore(path)``; ``capture(..., out=path)`` creates them.

    Attributes:
        path: The store folder.
        manifest: The parsed ``manifest.json``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not manifest_path.is_file():
            raise StoreError(f"{self.path} is not an activation store (no {MANIFEST})")
        try:
            self.manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise StoreError(f"{manifest_path}: unreadable manifest ({exc})") from exc
        if self.manifest.get("format") != FORMAT:
            raise StoreError(f"{manifest_path}: unknown format {self.manifest.get('format')!r}")

    def __repr__(self) -> str:
        from workbench.display.objects import store_repr

        return store_repr(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """HTML card, short text and JSON for notebooks (see :mod:`workbench.display`)."""
        from workbench.display.objects import store_bundle

        return store_bundle(self, include, exclude)

    @property
    def sites(self) -> list[str]:
        """Site names in the store, in forward order."""
        return list(self.manifest["sites"])

    def site_widths(self) -> dict[str, int]:
        """Each site's row width, from the first written shard's header (no data is read).

        Empty when no shard is written yet or that header is unreadable (a corrupt shard is
        :meth:`verify`'s to report; here it only leaves the widths unknown).
        """
        for shard in self.manifest["shards"]:
            if shard.get("bytes") is not None:
                try:
                    _, header = read_header(self.path / shard["file"])
                    return {k: v["shape"][1] for k, v in header.items() if k != "__metadata__"}
                except (OSError, CorruptShardError, KeyError, TypeError, IndexError):
                    return {}
        return {}

    @property
    def complete(self) -> bool:
        """Whether every planned shard has been written."""
        return all(s.get("bytes") is not None for s in self.manifest["shards"])

    @property
    def n_rows(self) -> int:
        """Rows per site (tokens, or texts for pooled positions)."""
        return int(self.manifest["n_rows"])

    @property
    def offsets(self) -> torch.Tensor:
        """Text ``i`` is rows ``offsets[i]:offsets[i + 1]``."""
        return mmap_tensor(self.path / INDEX, "offsets")

    @property
    def token_ids(self) -> torch.Tensor:
        """Token id of each row (the last token's for ``positions='last'``, -1 for ``'mean'``)."""
        return mmap_tensor(self.path / INDEX, "token_ids")

    def _check(self, site: str) -> None:
        if site not in self.manifest["sites"]:
            raise StoreError(f"no site {site!r} in {self.path}; it holds: {', '.join(self.sites)}")
        if not self.complete:
            done = sum(s.get("bytes") is not None for s in self.manifest["shards"])
            raise StoreError(
                f"{self.path} is incomplete ({done}/{len(self.manifest['shards'])} shards); "
                "rerun the same capture to resume it"
            )

    def _shard_tensor(self, shard: dict[str, Any], site: str) -> torch.Tensor:
        path = self.path / shard["file"]
        if not path.is_file() or path.stat().st_size != shard["bytes"]:
            raise CorruptShardError(
                f"{path}: missing or truncated (expected {shard['bytes']} bytes); "
                "rerun the capture to rewrite it"
            )
        return mmap_tensor(path, site)

    def read(self, site: str) -> torch.Tensor:
        """All rows of one site as an (n_rows, d) tensor.

        With a single shard this is a memory map of the file (nothing is read until used); with
        several, the shards are memory-mapped and concatenated. For data larger than memory use
        :meth:`iter_batches`.
        """
        self._check(site)
        parts = [self._shard_tensor(s, site) for s in self.manifest["shards"]]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def iter_batches(self, site: str, batch_size: int | None = None) -> Iterator[torch.Tensor]:
        """Streams one site's rows in input order, shard by shard.

        Args:
            site: The site name.
            batch_size: Rows per batch; ``None`` yields one memory-mapped tensor per shard.
        """
        self._check(site)
        for shard in self.manifest["shards"]:
            tensor = self._shard_tensor(shard, site)
            if batch_size is None:
                yield tensor
            else:
                yield from tensor.split(batch_size)

    def verify(self) -> None:
        """Checks every shard's size and header; raises :class:`CorruptShardError` if one is bad."""
        for shard in self.manifest["shards"]:
            if shard.get("bytes") is not None:
                for site in self.sites[:1]:
                    self._shard_tensor(shard, site)


class StoreWriter:
    """Creates or resumes a store folder for one capture (used by :func:`workbench.capturing`)."""

    def __init__(
        self, path: Path, manifest: dict[str, Any], token_ids: np.ndarray, offsets: np.ndarray
    ) -> None:
        self.path = path
        existing = path / MANIFEST
        if existing.is_file():
            old = ActivationStore(path).manifest
            for key, what in (("input_hash", "inputs"), ("settings", "settings")):
                if old[key] != manifest[key]:
                    raise StoreMismatchError(
                        f"{path} already holds a capture of other {what}; "
                        "use another output folder or delete it"
                    )
            self.manifest = old
        elif path.exists() and any(path.iterdir()):
            raise StoreMismatchError(
                f"{path} exists and is not an activation store; use an empty or new folder"
            )
        else:
            path.mkdir(parents=True, exist_ok=True)
            atomic_save_tensors(
                path / INDEX,
                {"token_ids": torch.from_numpy(token_ids), "offsets": torch.from_numpy(offsets)},
            )
            self.manifest = manifest
            self._write_manifest()
        for tmp in path.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)

    def _write_manifest(self) -> None:
        atomic_write_bytes(self.path / MANIFEST, json.dumps(self.manifest, indent=1).encode())

    def pending(self) -> list[ShardPlan]:
        """Shards still to write; a valid shard file left by a killed run is adopted."""
        todo = []
        for entry in self.manifest["shards"]:
            plan = ShardPlan(entry["index"], tuple(entry["texts"]), tuple(entry["rows"]))
            path = self.path / plan.file
            if (
                entry.get("bytes") is not None
                and path.is_file()
                and path.stat().st_size == entry["bytes"]
            ):
                continue
            if path.is_file() and self._adopt(entry, path):
                continue
            path.unlink(missing_ok=True)
            entry["bytes"] = None
            todo.append(plan)
        self._write_manifest()
        return todo

    def _adopt(self, entry: dict[str, Any], path: Path) -> bool:
        try:
            _, header = read_header(path)
        except CorruptShardError:
            return False
        rows = entry["rows"][1] - entry["rows"][0]
        if all(
            site in header and header[site]["shape"][0] == rows for site in self.manifest["sites"]
        ):
            entry["bytes"] = path.stat().st_size
            return True
        return False

    def write(self, plan: ShardPlan, tensors: dict[str, torch.Tensor]) -> None:
        """Writes one shard atomically and records it in the manifest."""
        size = atomic_save_tensors(self.path / plan.file, tensors)
        self.manifest["shards"][plan.index]["bytes"] = size
        self._write_manifest()
