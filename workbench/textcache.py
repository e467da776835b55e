"""A per-text activation cache: a model's activations on a text are computed once per machine.

A replication reruns a study over seeds, and on a fixed model the seeds only resample *which*
texts are read: the activations of a given text do not depend on the seed. :class:`TextCache`
keeps them, one safetensors file per text, under ``$WORKBENCH_HOME/activations/<key>/``, where
the key hashes what the numbers depend on: the model (name, revision, source folder, dtype, the
origin of its weights and the size and time of its weight files), the sites and layers, the
truncation length, and the numerics (torch's version and CPU kernel level, the CPU, the MKL and
oneDNN builds and the environment variables that pin their code paths), so that a replication
under other CPU kernels (``workbench replicate --cpu-kernels``) computes its own. A text's file is
named by the SHA-256 of its token ids.

Each missing text is captured *alone* (``batch_size=1``, no padding) on *one* thread, so its
numbers depend neither on which other texts happened to share its batch nor on the process's
thread count: a run that finds a text in the cache reads exactly what it would have computed.
Files are written atomically; a killed run leaves complete files only, and the next run computes
just the rest. Only the unedited model is cached: a model inside an
:func:`~workbench.interventions.intervene` block is refused.

Example::

    cache = TextCache(subject, sites="resid_post", layers="all", max_length=32)
    acts = cache.capture(texts)          # Activations, texts in input order
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from workbench.cache import recipe_key
from workbench.capturing import Activations, capture
from workbench.devices import torch_threads
from workbench.errors import ConfigError
from workbench.files import atomic_save_tensors
from workbench.inputs import tokenize
from workbench.models.subject import Subject

EDITING = "_workbench_interventions"
"""The attribute :func:`~workbench.interventions.intervene` sets on a model it edits (the
interventions sit above this layer, so the name is repeated here; a test checks they agree)."""

log = logging.getLogger(__name__)

VERSION = 1
"""Bumped when the stored format or the capture's meaning changes."""
TOKENS = "__token_ids__"


def default_root() -> Path:
    """``$WORKBENCH_HOME/activations`` (``WORKBENCH_HOME`` defaults to ``~/.cache/workbench``)."""
    from workbench.models.tiny_lm import home

    return home() / "activations"


def model_identity(subject: Subject) -> dict[str, Any]:
    """What identifies the weights behind ``subject``'s numbers (for a cache key)."""
    prov = subject.provenance()
    record: dict[str, Any] = {
        k: prov.get(k) for k in ("model", "revision", "source", "architecture", "dtype")
    }
    record["weights"] = prov.get("weights")
    source = Path(subject.source) if subject.source else None
    if source is not None and source.is_dir():
        record["files"] = sorted(
            (p.name, p.stat().st_size, p.stat().st_mtime_ns)
            for p in source.iterdir()
            if p.suffix in (".safetensors", ".bin")
        )
    return record


def _numerics() -> dict[str, Any]:
    """What decides the floats of a capture on this machine, thread counts aside (fixed at 1)."""
    from workbench.provenance import numerics

    found = numerics()
    kept = ("cpu_capability", "cpu_model", "mkl", "onednn")
    env = {k: v for k, v in (found.get("numerics_env") or {}).items() if k != "OMP_NUM_THREADS"}
    return {"torch": torch.__version__, "env": env, **{k: found.get(k) for k in kept}}


class TextCache:
    """Activations of single texts, cached on disk (see the module docstring).

    Args:
        subject: The model.
        sites: Site kinds or names (as :func:`~workbench.capturing.capture`).
        layers: Layers of per-layer kinds.
        max_length: Truncation length of every text.
        root: The cache folder; default :func:`default_root`.
    """

    def __init__(
        self,
        subject: Subject,
        *,
        sites: str | Sequence[str],
        layers: str | int | Sequence[int] = "all",
        max_length: int,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.subject = subject
        self.sites = [s.name for s in subject.expand(sites, layers)]
        self.max_length = int(max_length)
        key = recipe_key(
            {
                "model": model_identity(subject),
                "sites": self.sites,
                "max_length": self.max_length,
                "numerics": _numerics(),
                "version": VERSION,
            }
        )
        self.folder = Path(root if root is not None else default_root()) / key
        self.hits = 0
        self.misses = 0

    def _path(self, ids: torch.Tensor) -> Path:
        digest = hashlib.sha256(ids.numpy().astype(np.int64).tobytes()).hexdigest()
        return self.folder / f"{digest[:32]}.safetensors"

    def capture(self, texts: Any, *, progress: bool = False) -> Activations:
        """The activations of ``texts`` (every token of each), computing only the missing ones.

        Args:
            texts: Texts, conversations or token-id sequences (as ``capture``'s inputs).
            progress: Show a progress bar over the texts that are computed.

        Returns:
            In-memory :class:`~workbench.capturing.Activations`, texts in input order.

        Raises:
            ConfigError: The model has live forward hooks (an edit is installed).
        """
        from safetensors.torch import load_file

        if getattr(self.subject.model, EDITING, 0):
            raise ConfigError(
                "the activation cache stores the unedited model: call it outside intervene()"
            )
        toks = tokenize(
            self.subject.tokenizer,
            texts,
            max_length=self.max_length,
            vocab_size=int(self.subject.model.get_input_embeddings().num_embeddings),
        )
        paths = [self._path(seq) for seq in toks.sequences]
        todo = [i for i, p in enumerate(paths) if not p.is_file()]
        self.hits += len(paths) - len(todo)
        self.misses += len(todo)
        if todo:
            self.folder.mkdir(parents=True, exist_ok=True)
            log.info("activation cache: computing %d of %d texts", len(todo), len(paths))
        with torch_threads(1):
            for i in tqdm(todo, desc="cache activations", unit="text", disable=not progress):
                acts = capture(
                    self.subject,
                    [toks.sequences[i]],
                    sites=self.sites,
                    batch_size=1,
                    max_length=self.max_length,
                    progress=False,
                )
                tensors = {site: acts[site].contiguous() for site in self.sites}
                tensors[TOKENS] = acts.token_ids.to(torch.int64)
                atomic_save_tensors(paths[i], tensors, {"version": str(VERSION)})
        parts = [load_file(p) for p in paths]
        for i, part in enumerate(parts):
            if not torch.equal(part[TOKENS], toks.sequences[i]):  # pragma: no cover - corrupt
                raise ConfigError(f"activation cache file {paths[i]} holds other tokens")
        data = {site: torch.cat([part[site] for part in parts]) for site in self.sites}
        meta = {**self.subject.provenance(), "dtype": str(data[self.sites[0]].dtype)}
        meta["dtype"] = meta["dtype"].removeprefix("torch.")
        return Activations(
            data,
            torch.from_numpy(toks.offsets),
            torch.from_numpy(toks.token_ids),
            "all",
            meta,
        )
