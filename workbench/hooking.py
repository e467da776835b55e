"""Forward hooks on resolved sites, always inside a context manager.

The workbench reads and edits a model's tensors with plain PyTorch hooks on the modules that
``hooks/*.toml`` names. A site reads either a module's *output* (a forward hook) or its *input*
(a forward pre-hook, with the tensor taken from the keyword ``spec.arg`` when the module receives
it by keyword, else from the positional arguments). When the value is a tuple, ``spec.index``
picks the tensor.

Two context managers cover every use, and both remove every handle when the block exits, also on
an exception, so no hook outlives the call:

* :func:`read_hooks` calls ``fn(site, tensor)`` and leaves the forward pass unchanged (capture,
  gradients taken on the exact tensor a site names);
* :func:`edit_hooks` calls ``fn(site, tensor)`` and puts the tensor it returns back in place
  (interventions: steering, ablation, patching, skipping a layer).

:func:`call_hooks` watches whole calls of a module (its arguments as it starts, its end even on
an exception), for bookkeeping such as which token positions a forward pass holds.

On a model placed by accelerate (``load_model(..., device_map=...)``) the hooks need nothing
special: accelerate wraps each block's ``forward``, so a pre-hook sees the block's input still on
the device it comes from, an output hook sees the output on the block's own device, and an
offloaded block's weights are back on ``meta`` by the time its output hook runs (a hook never
reads a module's weights). An edit returns its tensor on the device it was given; accelerate moves
it on from there.

This module is a leaf: it imports only torch and :mod:`workbench.sites`, so
:mod:`workbench.capturing`, :mod:`workbench.backends` and :mod:`workbench.interventions` can all
build on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from workbench.sites import Site

ReadFn = Callable[[Site, Tensor], None]
"""``fn(site, tensor)`` called with a site's ``(batch, pos, d)`` tensor on every forward pass."""
EditFn = Callable[[Site, Tensor], Tensor | None]
"""``fn(site, tensor) -> tensor`` whose result replaces the site's tensor (``None``: unchanged)."""


def pick(value: Any, index: int) -> Tensor:
    """The tensor inside a (possibly nested) tuple: ``value[index]`` until it is not a tuple."""
    while isinstance(value, tuple | list):
        value = value[index]
    return value


def replace(value: Any, index: int, new: Tensor) -> Any:
    """``value`` with the tensor :func:`pick` would return swapped for ``new`` (same nesting)."""
    if not isinstance(value, tuple | list):
        return new
    items = list(value)
    items[index] = replace(items[index], index, new)
    return type(value)(items) if isinstance(value, tuple) else items


@contextlib.contextmanager
def read_hooks(sites: Sequence[Site], fn: ReadFn) -> Iterator[None]:
    """Calls ``fn(site, tensor)`` with each site's tensor on every forward pass inside the block.

    Args:
        sites: Resolved sites (see :meth:`workbench.Subject.expand`).
        fn: Receives the site and its tensor; its return value is ignored.
    """

    def ignore(site: Site, tensor: Tensor) -> None:
        fn(site, tensor)

    with _install(sites, ignore, edit=False):
        yield


@contextlib.contextmanager
def edit_hooks(sites: Sequence[Site], fn: EditFn) -> Iterator[None]:
    """Replaces each site's tensor by ``fn(site, tensor)`` on every forward pass inside the block.

    Args:
        sites: Resolved sites.
        fn: Returns the new tensor (same shape) or ``None`` to leave it unchanged.
    """
    with _install(sites, fn, edit=True):
        yield


@contextlib.contextmanager
def _install(sites: Sequence[Site], fn: EditFn, *, edit: bool) -> Iterator[None]:
    handles = []
    try:
        for site in sites:
            if site.spec.io == "output":
                handles.append(site.module.register_forward_hook(_output_hook(site, fn, edit)))
            else:
                handles.append(
                    site.module.register_forward_pre_hook(
                        _input_hook(site, fn, edit), with_kwargs=True
                    )
                )
        yield
    finally:
        for handle in handles:
            handle.remove()


def _output_hook(site: Site, fn: EditFn, edit: bool) -> Callable[..., Any]:
    index = site.spec.index

    def hook(_module: torch.nn.Module, _args: Any, output: Any) -> Any:
        new = fn(site, pick(output, index))
        if edit and new is not None:
            return replace(output, index, new)
        return None

    return hook


def _input_hook(site: Site, fn: EditFn, edit: bool) -> Callable[..., Any]:
    index, arg = site.spec.index, site.spec.arg

    def hook(_module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        by_keyword = arg in kwargs
        value = kwargs[arg] if by_keyword else args
        new = fn(site, pick(value, index))
        if not edit or new is None:
            return None
        if by_keyword:
            return args, {**kwargs, arg: replace(kwargs[arg], index, new)}
        return replace(args, index, new), kwargs

    return hook


@contextlib.contextmanager
def call_hooks(
    modules: Sequence[torch.nn.Module],
    before: Callable[[torch.nn.Module, tuple, dict], None],
    after: Callable[[torch.nn.Module], None],
) -> Iterator[None]:
    """Calls ``before`` as each module's forward starts and ``after`` as it ends, also on errors.

    ``before(module, args, kwargs)`` and ``after(module)`` both leave the forward pass unchanged.

    For bookkeeping around whole calls (which tokens a pass holds, nesting depth), not for sites.

    Args:
        modules: The modules to watch (each once).
        before: Receives the module and its positional and keyword arguments.
        after: Receives the module; runs even when the forward raises.
    """

    def pre(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        before(module, args, kwargs)

    def post(module: torch.nn.Module, _args: Any, _output: Any) -> None:
        after(module)

    handles = []
    try:
        for module in modules:
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post, always_call=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def pad(
    seqs: Sequence[Tensor], pad_id: int, side: str = "right"
) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Pads token-id sequences into a batch.

    Args:
        seqs: 1-D token-id tensors.
        pad_id: Id written at padded positions.
        side: ``"right"`` or ``"left"``.

    Returns:
        ``(input_ids, attention_mask)``, both ``(batch, pos)`` long tensors.
    """
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        cols = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
        ids[row, cols] = seq
        mask[row, cols] = 1
    return ids, mask


def position_ids(mask: Tensor) -> Tensor:
    """Position ids that ignore left padding: each row counts its real tokens from 0."""
    return (mask.cumsum(-1) - 1).clamp(min=0)
