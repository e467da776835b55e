"""Devices: naming one, where a placed module runs, free memory, torch's CPU threads.

A model bigger than one device is *placed*: accelerate's planner assigns each block to a GPU, the
CPU or the disk (``load_model(..., device_map="auto")``), and hooks move inputs and, for offloaded
blocks, weights to the block's *execution device* when it runs. Outside its own forward an
offloaded block's weights sit on the ``meta`` device, so code that needs "the device of this
module" must ask :func:`execution_device`, never ``next(module.parameters()).device``.

A leaf module: it imports only torch and :mod:`workbench.errors`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench.errors import ConfigError

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
"""Dtype names :func:`resolve_dtype` accepts."""

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


_THREADS_LOCK = threading.RLock()


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside the block, the previous count restored after it.

    Torch's thread count belongs to the process, so two threads that each pinned and restored it
    could interleave and leave the process at the wrong count (A pins 1 over 2, B pins 1 over 1,
    A restores 2, B restores 1). One lock serializes the pinned blocks of a process; it is
    re-entrant, so a pinned block may call code that pins again. ``None`` changes nothing.

    Example::

        with torch_threads(1):   # the same float sums on any machine's core count
            train(...)
    """
    if n is None:
        yield
        return
    with _THREADS_LOCK:
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """The device a name means: ``"auto"`` (or ``None``) picks CUDA, then MPS, then the CPU.

    Anything else is ``torch.device(device)``.

    Raises:
        ConfigError: A name torch does not know (one line, naming what is accepted).
    """
    if device is not None and str(device) != "auto":
        try:
            return torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ConfigError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from exc
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """Maps a dtype name (see :data:`DTYPES`) to a torch dtype; ``None`` means float32."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


def placement_device(where: Any, *, allow_disk: bool = True) -> str:
    """Checks one device of a device map or ``max_memory`` and returns its canonical name.

    Accepts ``"cpu"``, ``"disk"`` (when ``allow_disk``), ``"mps"``, ``"cuda"``/``"cuda:N"`` and a
    bare GPU index ``N``; a GPU must exist on this machine.

    Raises:
        ConfigError: An unknown device, or a GPU this machine does not have.
    """
    accepted = "cpu, disk, cuda:N or a GPU index N" if allow_disk else "cpu, cuda:N or N"
    if allow_disk and where == "disk":
        return "disk"
    if isinstance(where, bool):
        raise ConfigError(f"unknown device {where!r} in the placement; use {accepted}")
    try:
        dev = torch.device("cuda", where) if isinstance(where, int) else torch.device(where)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"unknown device {where!r} in the placement; use {accepted}") from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError(f"device {where!r} in the placement: this machine has no MPS")
        return "mps"
    if dev.type != "cuda":
        raise ConfigError(f"unknown device {where!r} in the placement; use {accepted}")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = 0 if dev.index is None else dev.index
    if index >= count:
        raise ConfigError(
            f"device {where!r} in the placement: this machine has {count} CUDA device(s); "
            "use cpu, disk or an existing cuda:N"
        )
    return f"cuda:{index}"


def parse_bytes(value: int | str) -> int:
    """A memory size as bytes: an int, or a string such as ``"60GiB"``, ``"500MB"``, ``"2e9"``.

    Raises:
        ConfigError: Not a size, or not positive.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", value)
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise ConfigError(f"unknown memory size {value!r}; use bytes or e.g. '60GiB', '500MB'")
        try:
            n = int(float(match.group(1)) * _UNITS[unit])
        except ValueError:
            raise ConfigError(
                f"unknown memory size {value!r}; use bytes or e.g. '60GiB', '500MB'"
            ) from None
    else:
        raise ConfigError(f"unknown memory size {value!r}; use bytes or e.g. '60GiB', '500MB'")
    if n <= 0:
        raise ConfigError(f"memory size {value!r} must be positive")
    return n


def format_bytes(n: float) -> str:
    """``1.5 GiB``-style text for a byte count."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _hooks(module: nn.Module) -> Iterator[Any]:
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        return
    yield hook
    yield from getattr(hook, "hooks", ())  # accelerate's SequentialHook holds several


def execution_device(module: nn.Module, default: torch.device | None = None) -> torch.device:
    """The device a module computes on, also when accelerate placed or offloaded it.

    The execution device of an accelerate hook wins (an offloaded module's weights are on
    ``meta`` until it runs); else the first parameter or buffer not on ``meta``; else the first
    such hook or tensor of a submodule; else ``default`` (the CPU when not given).
    """
    for candidate in module.modules():
        for hook in _hooks(candidate):
            where = getattr(hook, "execution_device", None)
            if where is not None:
                return (
                    torch.device("cuda", where) if isinstance(where, int) else torch.device(where)
                )
        for tensor in [*candidate.parameters(recurse=False), *candidate.buffers(recurse=False)]:
            if tensor.device.type != "meta":
                return tensor.device
    return default if default is not None else torch.device("cpu")


@dataclass(frozen=True)
class DeviceMemory:
    """Free and total memory of one device.

    Attributes:
        device: ``"cpu"`` or ``"cuda:N"``.
        name: What it is (the GPU's name, or ``"host memory"``).
        free: Bytes free now (``None`` when unknown).
        total: Bytes in all (``None`` when unknown).
    """

    device: str
    name: str
    free: int | None
    total: int | None

    def detail(self) -> str:
        """``NVIDIA H200: 139.0 GiB free of 139.8 GiB`` (without the device name)."""
        if self.free is None or self.total is None:
            return f"{self.name}: free memory unknown"
        return f"{self.name}: {format_bytes(self.free)} free of {format_bytes(self.total)}"

    def __str__(self) -> str:
        return f"{self.device} ({self.detail()})"


def _host_memory() -> tuple[int | None, int | None]:
    try:
        info = {}
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
        return info.get("MemAvailable"), info.get("MemTotal")
    except (OSError, ValueError, IndexError):
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
        except (AttributeError, ValueError, OSError):
            return None, None


def memory_report() -> list[DeviceMemory]:
    """Every device torch can use, with its free and total memory (host first)."""
    free, total = _host_memory()
    out = [DeviceMemory("cpu", "host memory", free, total)]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            try:
                gpu_free, gpu_total = torch.cuda.mem_get_info(i)
            except RuntimeError:
                gpu_free = gpu_total = None
            out.append(
                DeviceMemory(f"cuda:{i}", torch.cuda.get_device_name(i), gpu_free, gpu_total)
            )
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append(DeviceMemory("mps", "Apple GPU (shares host memory)", None, None))
    return out
