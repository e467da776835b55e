"""The :class:`Subject`: a loaded model, its tokenizer and its hook sites, ready to be captured."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workbench import sites as _sites
from workbench.devices import execution_device
from workbench.models.placement import placement_of


@dataclass(frozen=True, eq=False)
class Subject:
    """A model under study.

    Attributes:
        model: The Hugging Face model, in eval mode.
        tokenizer: Its tokenizer.
        family: The hook family that maps canonical site names to its modules.
        name: What the user asked for (``"minilm"``, an HF id or a folder).
        revision: The checkpoint or revision, or ``None`` for the default one.
        source: Where the weights were read from (a folder or an HF id).
    """

    model: nn.Module = field(repr=False)
    tokenizer: Any = field(repr=False)
    family: _sites.HookFamily = field(repr=False)
    name: str
    revision: str | None = None
    source: str = ""

    @classmethod
    def wrap(cls, model: nn.Module, tokenizer: Any, name: str | None = None) -> Subject:
        """Wraps a model already in memory (its family is found from ``config.model_type``)."""
        model.eval()
        family = _sites.family_for(model)
        return cls(model, tokenizer, family, name or type(model).__name__)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the device the input embeddings compute on.

        For a model on one device, that device. For a placed model (``device_map``), the
        embeddings' execution device, also when they are offloaded to disk (their weights are
        then on ``meta`` between forward passes). Each block's own device is in
        :attr:`placement`; code acting on one module asks
        :func:`workbench.devices.execution_device` for it.
        """
        try:
            first: nn.Module = self.model.get_input_embeddings()
        except (AttributeError, NotImplementedError):
            first = self.model
        return execution_device(first, execution_device(self.model))

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the model's parameters."""
        for param in self.model.parameters():
            if param.is_floating_point():
                return param.dtype
        return torch.float32

    @property
    def placement(self) -> dict[str, str]:
        """Module path -> device (``"cpu"``, ``"cuda:N"``, or ``"disk"`` when offloaded).

        A model on one device is ``{"": device}``; a placed one lists what accelerate planned,
        block by block (e.g. ``{"model.embed_tokens": "cuda:0", "model.layers.0": "cuda:0",
        ..., "model.layers.31": "disk", "lm_head": "cpu"}``).
        """
        return placement_of(self.model, self.device)

    @property
    def is_placed(self) -> bool:
        """Whether the model is split over more than one device (or partly on disk)."""
        return len(set(self.placement.values())) > 1 or "disk" in self.placement.values()

    def placement_summary(self) -> str:
        """One line: ``cpu`` for a whole model, or ``12 on cuda:0, 8 on cpu, 4 on disk``."""
        counts: dict[str, int] = {}
        for where in self.placement.values():
            counts[where] = counts.get(where, 0) + 1
        if len(counts) == 1 and "disk" not in counts:
            return next(iter(counts))
        return ", ".join(f"{n} on {where}" for where, n in counts.items())

    @property
    def n_layers(self) -> int:
        """Number of blocks."""
        return _sites.n_layers(self.model, self.family)

    @property
    def d_model(self) -> int:
        """Width of the residual stream."""
        return int(self.model.config.hidden_size)

    @property
    def is_causal(self) -> bool:
        """Whether the model is a decoder (causal attention)."""
        return (
            not getattr(self.model.config, "is_encoder_decoder", False)
            and self.family.name != "bert"
        )

    def site_names(self) -> list[str]:
        """Every site name this model has, in forward order."""
        return _sites.available_sites(self.model, self.family)

    def site(self, name: str) -> _sites.Site:
        """Resolves one site name, e.g. ``"resid_post.3"``."""
        return _sites.resolve(self.model, self.family, name)

    def expand(
        self, sites: str | Sequence[str], layers: str | int | Iterable[int] = "all"
    ) -> list[_sites.Site]:
        """Expands site kinds over layers (see :func:`workbench.sites.expand_sites`)."""
        return _sites.expand_sites(self.model, self.family, sites, layers)

    def __repr__(self) -> str:
        from workbench.display.objects import subject_repr

        return subject_repr(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """HTML card, short text and JSON for notebooks (see :mod:`workbench.display`)."""
        from workbench.display.objects import subject_bundle

        return subject_bundle(self, include, exclude)

    @property
    def weights(self) -> dict[str, Any] | None:
        """Where the weights came from, when their folder records it (``weights.json``).

        The embedded ``smollm2`` has one: the GGUF file, its sha256 and quantisation (its weights
        are 4-bit-rounded, then dequantised); other models return ``None``.
        """
        from workbench.models.smollm2 import read_weights_record

        return read_weights_record(self.source) if self.source else None

    def provenance(self) -> dict[str, Any]:
        """What identifies this model in a results record (with ``weights`` where recorded)."""
        record = {
            "model": self.name,
            "revision": self.revision,
            "source": self.source,
            "architecture": type(self.model).__name__,
            "family": self.family.name,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "dtype": str(self.dtype).removeprefix("torch."),
        }
        weights = self.weights
        if weights is not None:
            record["weights"] = weights
        return record
