"""Placing a model over devices: the checks and the plan behind ``load_model(device_map=...)``.

A model bigger than one device is split by blocks: accelerate's planner
(``infer_auto_device_map``, the one transformers itself calls) fills each device of
``max_memory`` in turn (``"sequential"``) or evenly (``"auto"``, ``"balanced"``), and what fits
nowhere goes to the disk under ``offload_folder``. An offloaded block's weights are read back from
disk each time it runs, on its *execution device* (see :mod:`workbench.devices`).

Everything a user can get wrong is checked here before any weight is read: the plan is computed
on an empty (``meta``) copy of the model built from its config, so a map that names a device this
machine lacks, a module the model lacks, or a ``max_memory`` that leaves blocks with no place
fails in one line, at once.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.devices import format_bytes, parse_bytes, placement_device
from workbench.errors import ConfigError

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
"""The planned placements (accelerate's names); an explicit map is a ``{module: device}`` dict."""

DeviceMap = str | Mapping[str, Any]
MaxMemory = Mapping[Any, int | str]


@dataclass(frozen=True)
class Plan:
    """What ``from_pretrained`` is given to place the weights, and what is left to do after.

    Attributes:
        kwargs: ``device_map`` (always an explicit ``{module: device}`` map when planned),
            ``offload_folder``, for ``from_pretrained``.
        move_to: A device to move the loaded model to (only when accelerate is missing and the
            load is a plain single-device one).
    """

    kwargs: dict[str, Any] = field(default_factory=dict)
    move_to: torch.device | None = None


def has_accelerate() -> bool:
    """Whether accelerate (which transformers needs for any ``device_map``) is installed."""
    return importlib.util.find_spec("accelerate") is not None


def single_device(device: torch.device) -> Plan:
    """A whole model on one device, its weights read straight there (no full host copy first)."""
    if has_accelerate():
        return Plan({"device_map": {"": str(device)}})
    return Plan(move_to=device)


def check_arguments(
    device: str | torch.device,
    device_map: DeviceMap | None,
    max_memory: MaxMemory | None,
    offload_folder: str | os.PathLike[str] | None,
) -> tuple[DeviceMap | None, dict[Any, int] | None, Path | None]:
    """Checks the placement arguments on their own (no model needed).

    Returns:
        ``(device_map, max_memory, offload_folder)``: ``device_map`` is ``"auto"`` when only
        ``max_memory`` or ``offload_folder`` was given; ``max_memory`` has accelerate's keys
        (``"cpu"``, ``"mps"``, GPU indices) and byte counts.

    Raises:
        ConfigError: Any bad value, named with what would be accepted.
    """
    if device_map is None and (max_memory is not None or offload_folder is not None):
        device_map = "auto"
    if device_map is None:
        return None, None, None
    if str(device) != "auto":
        raise ConfigError(
            f"give device= ({device!r}) or device_map= ({device_map!r}), not both; "
            'device_map={"": "cuda:0"} puts the whole model on one device'
        )
    if not has_accelerate():
        raise ConfigError("device_map= needs accelerate; pip install accelerate")
    if isinstance(device_map, str):
        if device_map not in STRATEGIES:
            raise ConfigError(
                f"unknown device_map {device_map!r}; use one of {', '.join(STRATEGIES)} "
                "or a {module: device} dict"
            )
    elif isinstance(device_map, Mapping):
        if not device_map:
            raise ConfigError(
                'device_map is an empty dict; map modules to devices, e.g. {"": "cpu"}'
            )
        device_map = {str(k): placement_device(v) for k, v in device_map.items()}
        if max_memory is not None:
            raise ConfigError(
                "max_memory= sizes a planned placement; with an explicit device_map dict drop it "
                "(or use device_map='auto')"
            )
    else:
        raise ConfigError(
            f"device_map must be one of {', '.join(STRATEGIES)} or a {{module: device}} dict, "
            f"got {type(device_map).__name__}"
        )
    memory = None
    if max_memory is not None:
        if not isinstance(max_memory, Mapping) or not max_memory:
            raise ConfigError("max_memory must be a dict such as {'cpu': '60GiB', 0: '70GiB'}")
        memory = {}
        for key, size in max_memory.items():
            where = placement_device(key, allow_disk=False)
            accel_key = int(where.split(":")[1]) if where.startswith("cuda:") else where
            memory[accel_key] = parse_bytes(size)
    folder = None if offload_folder is None else _writable_folder(Path(offload_folder))
    return device_map, memory, folder


def _writable_folder(folder: Path) -> Path:
    """The offload folder, once a file could be written in it (folders made to try are removed)."""
    folder = folder.expanduser().absolute()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"offload_folder {str(folder)!r} is a file; give a folder")
    made = folder
    while not made.parent.exists():
        made = made.parent
    made = None if folder.exists() else made
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".workbench-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"offload_folder {str(folder)!r} is not writable ({exc.strerror or exc}); "
            "give a folder you can write to"
        ) from None
    finally:
        _remove_empty(folder, made)
    return folder


def _remove_empty(folder: Path, made: Path | None) -> None:
    """Removes the empty folders from ``folder`` up to ``made`` (what a check created)."""
    if made is None:
        return
    current = folder
    while True:
        try:
            current.rmdir()
        except OSError:
            return
        if current == made:
            return
        current = current.parent


def empty_model(
    auto_class: Any, config: Any, dtype: torch.dtype, trust_remote_code: bool = False
) -> nn.Module:
    """The model's skeleton on the ``meta`` device: its modules and shapes, no memory."""
    from accelerate import init_empty_weights

    with init_empty_weights():
        try:
            model = auto_class.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
        except TypeError:  # transformers before 4.56 names it torch_dtype
            model = auto_class.from_config(
                config, torch_dtype=dtype, trust_remote_code=trust_remote_code
            )
    model.tie_weights()
    return model


def plan(
    skeleton: nn.Module,
    device_map: DeviceMap,
    max_memory: dict[Any, int] | None,
    offload_folder: Path | None,
    dtype: torch.dtype,
) -> Plan:
    """The explicit ``{module: device}`` map the weights will be loaded into.

    Args:
        skeleton: The model on ``meta`` (:func:`empty_model`).
        device_map: A strategy from :data:`STRATEGIES` or an explicit map (already checked).
        max_memory: Accelerate's ``max_memory`` (checked), or ``None`` for what is free now.
        offload_folder: Where disk-offloaded weights go, or ``None``.
        dtype: The dtype the weights are loaded in (sizes the blocks).

    Raises:
        ConfigError: A module the model lacks, or a plan that needs the disk but no
            ``offload_folder`` was given.
    """
    if isinstance(device_map, str):
        mapping = _planned(skeleton, device_map, max_memory, dtype)
    else:
        names = {name for name, _ in skeleton.named_modules()}
        unknown = [k for k in device_map if k not in names]
        if unknown:
            example = next((n for n, _ in skeleton.named_modules() if n.count(".") == 2), "model")
            raise ConfigError(
                f"device_map names module {unknown[0]!r}, which {type(skeleton).__name__} lacks; "
                f"use module paths such as {example!r} ('' is the whole model)"
            )
        mapping = dict(device_map)
        _check_covers(skeleton, mapping)
    if "disk" in mapping.values() and offload_folder is None:
        if isinstance(device_map, str):
            raise ConfigError(
                f"max_memory {_memory_text(max_memory)} has no room for "
                f"{sum(v == 'disk' for v in mapping.values())} module(s) (the largest block needs "
                f"{format_bytes(_largest_block(skeleton, dtype))}); give offload_folder= to put "
                "them on disk, or more max_memory"
            )
        raise ConfigError("device_map puts modules on 'disk'; give offload_folder= (a folder)")
    kwargs: dict[str, Any] = {"device_map": mapping}
    if offload_folder is not None:
        kwargs["offload_folder"] = str(offload_folder)
    return Plan(kwargs)


def _check_covers(skeleton: nn.Module, mapping: Mapping[str, Any]) -> None:
    """Every weight of the model falls under some module of an explicit map."""
    if "" in mapping:
        return
    prefixes = tuple(f"{k}." for k in mapping)
    missing = [n for n in skeleton.state_dict() if not n.startswith(prefixes)]
    if missing:
        module = missing[0].rpartition(".")[0]
        raise ConfigError(
            f"device_map leaves {len(missing)} weight(s) without a device, e.g. under "
            f"{module!r}; map that module too, or '' for everything not named"
        )


def _planned(
    skeleton: nn.Module, strategy: str, max_memory: dict[Any, int] | None, dtype: torch.dtype
) -> dict[str, Any]:
    """Accelerate's plan for a strategy, computed the way ``from_pretrained`` computes it."""
    from accelerate.utils import get_balanced_memory, get_max_memory, infer_auto_device_map

    no_split = getattr(skeleton, "_no_split_modules", None) or []
    memory = dict(max_memory) if max_memory is not None else None
    if strategy == "sequential":
        budget = get_max_memory(memory)
    else:
        budget = get_balanced_memory(
            skeleton,
            max_memory=memory,
            no_split_module_classes=no_split,
            dtype=dtype,
            low_zero=strategy == "balanced_low_0",
        )
    mapping = infer_auto_device_map(
        skeleton, max_memory=budget, no_split_module_classes=no_split, dtype=dtype
    )
    return {k: (f"cuda:{v}" if isinstance(v, int) else v) for k, v in mapping.items()}


def _largest_block(skeleton: nn.Module, dtype: torch.dtype) -> int:
    no_split = set(getattr(skeleton, "_no_split_modules", None) or [])
    size = torch.empty((), dtype=dtype).element_size()
    blocks = [m for m in skeleton.modules() if type(m).__name__ in no_split] or [skeleton]
    return max(sum(p.numel() for p in m.parameters()) * size for m in blocks)


def _memory_text(max_memory: dict[Any, int] | None) -> str:
    if max_memory is None:
        return "(what is free now)"
    items = (
        f"{k if isinstance(k, str) else f'cuda:{k}'}: {format_bytes(v)}"
        for k, v in max_memory.items()
    )
    return "{" + ", ".join(items) + "}"


def placement_of(model: nn.Module, default: torch.device) -> dict[str, str]:
    """``{module: device}`` of a loaded model: its ``hf_device_map``, or ``{"": default}``."""
    mapping = getattr(model, "hf_device_map", None)
    if not isinstance(mapping, Mapping) or not mapping:
        return {"": str(default)}
    return {str(k): (f"cuda:{v}" if isinstance(v, int) else str(v)) for k, v in mapping.items()}
