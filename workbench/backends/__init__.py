"""Optional capture backends: the same activations through TransformerLens or nnsight.

:func:`workbench.capturing` reads activations with plain PyTorch hooks (backend ``"hooks"``). People
who already live in TransformerLens (v4's ``TransformerBridge``) or nnsight can ask for
``backend="transformer_lens"`` or ``backend="nnsight"`` instead: the core still tokenizes, pads,
builds position ids, selects rows and lays out the output, and the backend only runs each padded
batch and returns every site's ``(batch, pos, d)`` tensor. The output is therefore identical in
layout and, up to floating-point noise, in value.

A backend is a function ``prepare(subject, sites, *, remote=False) -> run_batch``; ``run_batch``
takes the keyword arguments the core would pass to the model (``input_ids``, ``attention_mask``
and, when the model accepts them, ``position_ids`` and ``use_cache``) and returns a mapping from
site name to tensor. Neither library is imported until a backend is used; a missing one is a
one-line :class:`~workbench.errors.ConfigError` naming the extra to install.

Both wrappers act on a *shadow* of the subject's model (:func:`shadow_copy`): a copy of its module
tree that shares every parameter and buffer. TransformerLens replaces submodules of the model it
wraps and nnsight patches their ``forward``; the shadow keeps the subject's own model untouched at
no memory cost.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from torch import Tensor

from workbench.backends.common import RunBatch, require, shadow_copy
from workbench.errors import ConfigError
from workbench.hooking import read_hooks

if TYPE_CHECKING:
    from workbench.models.subject import Subject
    from workbench.sites import Site

BACKENDS: tuple[str, ...] = ("hooks", "transformer_lens", "nnsight")
"""Accepted values of ``capture(..., backend=...)``."""

_MODULES = {
    "transformer_lens": "workbench.backends.transformer_lens",
    "nnsight": "workbench.backends.nnsight",
}


class Prepare(Protocol):
    """A backend: binds a subject and its sites, returns the per-batch function."""

    def __call__(
        self, subject: Subject, sites: Sequence[Site], *, remote: bool | str = False
    ) -> RunBatch:
        """Returns the function that runs one padded batch and reads every site."""
        ...


def get(name: str) -> Prepare:
    """Returns the ``prepare`` function of backend ``name``.

    Raises:
        ConfigError: Unknown backend name.
    """
    if name not in BACKENDS:
        raise ConfigError(f"unknown capture backend {name!r}; use one of {', '.join(BACKENDS)}")
    if name == "hooks":
        return prepare_hooks
    return importlib.import_module(_MODULES[name]).prepare


def prepare_hooks(
    subject: Subject, sites: Sequence[Site], *, remote: bool | str = False
) -> RunBatch:
    """The core's plain hooks as a backend (for comparisons; ``capture`` has a faster path)."""
    if remote:
        raise ConfigError("remote=True needs backend='nnsight' (it runs the trace on NDIF)")

    def run_batch(**model_kwargs: Any) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        with read_hooks(list(sites), lambda site, tensor: out.__setitem__(site.name, tensor)):
            subject.model(**model_kwargs)
        return out

    return run_batch


__all__ = ["BACKENDS", "Prepare", "RunBatch", "get", "prepare_hooks", "require", "shadow_copy"]
