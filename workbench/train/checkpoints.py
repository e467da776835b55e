"""Checkpoint files: the default safetensors format, and the staging folder that makes a run atomic.

A run with an output folder writes everything (``step-N`` folders, ``training.json``) into a hidden
temporary sibling ``.<name>.XXXX`` and renames it into place only when the run has finished, so an
exception, a ``KeyboardInterrupt`` or a killed process never leaves a half-written ``<name>``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

WEIGHTS = "model.safetensors"
RECORD = "checkpoint.json"


def cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the state dict (tied tensors become separate copies)."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}


def save_state_dict(model: torch.nn.Module, folder: Path, record: dict[str, Any]) -> None:
    """The default checkpoint: ``model.safetensors`` (the state dict) and ``checkpoint.json``.

    Args:
        model: The model being trained.
        folder: The checkpoint's folder (exists, inside the run's staging folder).
        record: ``{"step": ..., "revision": ..., **evaluation}``, written as JSON.
    """
    from safetensors.torch import save_file

    save_file(cpu_state(model), str(folder / WEIGHTS), metadata={"step": str(record["step"])})
    (folder / RECORD).write_text(json.dumps(record, indent=2))


def load_checkpoint(model: torch.nn.Module, folder: str | Path) -> torch.nn.Module:
    """Loads a default-format checkpoint folder into ``model`` (strict) and returns the model."""
    from safetensors.torch import load_file

    state = load_file(str(Path(folder) / WEIGHTS))
    model.load_state_dict(state, strict=True)
    return model


class Staging:
    """A hidden temporary folder next to ``out`` that becomes ``out`` on :meth:`commit`.

    Call :meth:`discard` in a ``finally``: after a commit it does nothing, otherwise (an
    exception, an interrupt) it deletes the temporary folder.
    """

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", dir=self.out.parent))

    def discard(self) -> None:
        """Deletes the temporary folder if it was not committed."""
        shutil.rmtree(self.tmp, ignore_errors=True)

    def commit(self) -> Path:
        """Moves the finished folder into place, replacing an older ``out``; returns ``out``."""
        old = None
        if self.out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.old.", dir=self.out.parent))
            self.out.rename(old / "previous")
        self.tmp.rename(self.out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.out
