"""The :class:`Subject`: a loaded model, its tokenizer and its hook sites, ready to be captured."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workbench import sites as _sites


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
        """Device of the model's parameters."""
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the model's parameters."""
        return next(self.model.parameters()).dtype

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

    def provenance(self) -> dict[str, Any]:
        """What identifies this model in a results record."""
        return {
            "model": self.name,
            "revision": self.revision,
            "source": self.source,
            "architecture": type(self.model).__name__,
            "family": self.family.name,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "dtype": str(self.dtype).removeprefix("torch."),
        }
