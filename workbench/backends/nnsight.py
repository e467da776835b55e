"""Capture through nnsight: one ``trace`` per batch, saving each site's tensor.

Module paths come from the same ``hooks/*.toml`` table the core uses (``Site.spec``: the module
path with ``{layer}`` filled in, under the base model unless ``scope = "model"``), read from the
envoy tree as ``.output`` or, for input sites, from ``.inputs``. nnsight serves values in the
order the forward pass produces them, so the sites are read in that order, found once by a
one-token forward with plain hooks.

Locally the wrapper is ``nnsight.NNsight`` over a shadow of the subject's model (same weights, own
module tree: nnsight patches the ``forward`` of the modules it wraps). With ``remote=True`` the
wrapper is ``nnsight.TransformersModel`` and every batch's trace runs on NDIF
(``trace(..., remote=True)``); the model is then identified by its Hugging Face id, so the
subject must have been loaded by hub id, and an NDIF API key must be configured in nnsight.
``remote="local"`` runs nnsight's serialize-and-run-in-process rehearsal of that path, and a URL
string names another NDIF host. Only the local modes can be exercised offline.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from workbench.backends.common import RunBatch, require, shadow_copy
from workbench.hooking import read_hooks

if TYPE_CHECKING:
    from workbench.models.subject import Subject
    from workbench.sites import Site

NAME = "nnsight"


def envoy_path(subject: Subject, site: Site) -> str:
    """Dotted path of the site's module from the top-level model, e.g. ``transformer.h.3``."""
    path = site.spec.module.replace("{layer}", str(site.layer))
    if site.spec.scope == "model":
        return path
    model = subject.model
    prefix = next(name for name, module in model.named_modules() if module is model.base_model)
    return f"{prefix}.{path}" if prefix and path else prefix or path


def forward_order(subject: Subject, sites: Sequence[Site]) -> list[Site]:
    """The sites sorted by when the forward pass produces them (one one-token forward)."""
    seen: list[str] = []
    ids = torch.zeros((1, 1), dtype=torch.long, device=subject.device)
    kwargs: dict[str, Any] = {"input_ids": ids}
    if "use_cache" in inspect.signature(subject.model.forward).parameters:
        kwargs["use_cache"] = False
    with read_hooks(list(sites), lambda site, _: seen.append(site.name)), torch.inference_mode():
        subject.model(**kwargs)
    first = {name: i for i, name in reversed(list(enumerate(seen)))}
    return sorted(sites, key=lambda s: first.get(s.name, len(seen)))


def wrap(subject: Subject, remote: bool | str = False) -> Any:
    """The nnsight wrapper over a shadow of the subject's model."""
    nnsight = require("nnsight", "nnsight", NAME)
    model = shadow_copy(subject.model)
    with warnings.catch_warnings():
        # BERT has submodules named "output"; nnsight serves them as "E_output" and says so.
        warnings.filterwarnings("ignore", message=".*nnsight already serves on every module")
        if not remote:
            return nnsight.NNsight(model)
        # TransformersModel sets padding_side on the tokenizer it is given: give it a copy.
        return nnsight.TransformersModel(model, tokenizer=copy.deepcopy(subject.tokenizer))


def prepare(subject: Subject, sites: Sequence[Site], *, remote: bool | str = False) -> RunBatch:
    """Binds the sites to an nnsight wrapper; returns ``run_batch(**model_kwargs)``.

    Args:
        subject: The model.
        sites: Resolved sites.
        remote: ``True`` runs each trace on NDIF; ``"local"`` rehearses that path in-process.

    Raises:
        ConfigError: nnsight is not installed.
    """
    nnsight = require("nnsight", "nnsight", NAME)
    model = wrap(subject, remote)
    # Envoys by module path (real module names: nnsight renames attributes such as BERT's
    # "output" submodules, which would clash with ``.output``).
    envoys = dict(model.modules(names=True))
    envoys[model.path] = model
    reads = [
        (
            s.name,
            envoys[".".join(filter(None, (model.path, envoy_path(subject, s))))],
            s.spec.io,
            s.spec.index,
            s.spec.arg,
        )
        for s in forward_order(subject, sites)
    ]
    options: dict[str, Any] = {"remote": remote} if remote else {}
    save = nnsight.save

    def run_batch(**model_kwargs: Any) -> dict[str, Tensor]:
        saved: dict[str, Any] = {}
        with model.trace(**model_kwargs, **options):
            for name, envoy, io, index, arg in reads:
                if io == "output":
                    value = envoy.output
                else:
                    args, kwargs = envoy.inputs
                    value = kwargs.get(arg, args)
                while isinstance(value, tuple | list):
                    value = value[index]
                saved[name] = save(value)
        return {name: saved[name] for name, *_ in reads}

    return run_batch
