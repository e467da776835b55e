"""Atomic writes: a file (or folder) is either complete at its final path or absent.

Everything the workbench writes that a later step trusts (store shards and manifests, cached study
units, ``results.json``, checkpoints, exported figures) goes through a temporary sibling that is
fsynced and then renamed into place. An interrupted process leaves at most a ``.*.tmp`` sibling,
never a truncated file under the real name.

:func:`atomic_save_tensors` writes the safetensors format itself, streaming each tensor's memory
straight to the file, so saving a shard costs no second in-memory copy of it (safetensors'
``save_file`` first serializes every tensor to ``bytes``). The files are ordinary safetensors files.

This module is a leaf: it imports only the standard library (torch when tensors are saved).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_SAFETENSORS_DTYPES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}
"""torch dtype name (``str(dtype)`` without ``torch.``) to safetensors dtype."""


def _tmp_sibling(path: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file, an fsync and a rename."""
    target = Path(path)
    tmp = _tmp_sibling(target)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike[str], record: Any, *, indent: int | None = 1) -> None:
    """Writes ``record`` as JSON (NaN refused: it is not JSON) to ``path`` atomically."""
    text = json.dumps(record, indent=indent, allow_nan=False)
    atomic_write_bytes(path, text.encode())


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return memoryview(flat.view(torch.uint8).numpy())


def atomic_save_tensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Saves tensors as a safetensors file atomically, without a second copy in memory.

    Args:
        path: Target file.
        tensors: Name to tensor (any device; copied to the CPU one at a time if needed).
        metadata: String-to-string entries for the file's ``__metadata__``.

    Returns:
        The size of the written file in bytes.
    """
    target = Path(path)
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, tensor in tensors.items():
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in _SAFETENSORS_DTYPES:
            raise TypeError(f"tensor {name!r}: dtype {tensor.dtype} cannot be saved")
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = _tmp_sibling(target)
    try:
        with open(tmp, "wb") as fh:
            fh.write(len(head).to_bytes(8, "little"))
            fh.write(head)
            for tensor in tensors.values():
                fh.write(_raw_bytes(tensor))
            fh.flush()
            os.fsync(fh.fileno())
        size = os.path.getsize(tmp)
        os.replace(tmp, target)
        return size
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary sibling folder that replaces ``path`` when the block completes.

    On an exception the temporary folder is removed and ``path`` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
