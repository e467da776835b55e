"""Layer-major forward passes: every batch through block ``i``, then every batch through ``i + 1``.

A model offloaded to disk (``load_model(..., offload_folder=...)``) reads each offloaded block's
weights back from disk every time that block runs. A capture that runs the whole model batch
after batch (*batch-major*) therefore reads the weights once per batch: ``N`` batches, ``N``
reads of the model. Running it *layer-major* reads them once: the embeddings for every batch
first, then block 0 over every batch's residual, then block 1, and so on, keeping the residuals
between blocks in memory or, past a memory budget, in a spill folder on disk.

How a block is called. A block needs more than its residual input: the attention mask in the form
the family's attention wants (4-D causal and padding mask, or ``None`` for SDPA's own causal
mask), the rotary position embeddings (``(cos, sin)``, computed once by the base model), position
ids, cache switches. Rebuilding those by hand would copy each family's forward and break with
each transformers release. Instead, for each batch, the model's own ``forward`` runs up to the
first block: a forward pre-hook on block 0 records the positional and keyword arguments the model
built for it, and stops the pass there (no block's weights are read). Each later block is called
as a module with the same arguments and its predecessor's output in place of the residual, which
is what the model's own loop does in the families listed in :data:`FAMILIES`, where every block
receives the same arguments. Calling the block *as a module* keeps accelerate's hooks in charge
of devices (inputs moved to the block's execution device). Accelerate's offload hook would also
read an offloaded block's weights back on every call and drop them after, once per batch again;
so while block ``i`` runs over the batches, :func:`weights_held` loads its offloaded weights once
(the hook's own ``pre_forward``), switches the hook's offloading off, and on leaving switches it
back on and releases them (its ``post_forward``), also on an exception. The modules before the
first block (embeddings) are held the same way during the first pass; the tail, when asked for
(``final_norm`` and ``unembed`` sites), calls the final norm and the head as modules, held too.

Hooks are installed per stage, so each site's hook runs exactly once per batch and sees exactly
the tensor the batch-major forward shows it: the embedding sites during the first pass, block
``i``'s sites (``resid_pre.i``, ``attn_out.i``, ...) while block ``i`` runs, the tail's after.

Supported: the families whose base model hands every block the same arguments (Llama, Mistral,
Qwen2/3 without sliding-window layers, GPT-2, GPT-NeoX/Pythia). Others (BERT's encoder, models
mixing sliding and full attention layers, whose blocks get different masks) raise a one-line
:class:`~workbench.errors.ConfigError`, and so does a model with hooks on its whole forward, such as
an :func:`~workbench.interventions.intervene` block, whose edits follow each whole pass (its token
positions) and would not see blocks called one by one; ``order="auto"`` then runs batch-major.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from workbench.errors import ConfigError
from workbench.hooking import pick, read_hooks
from workbench.sites import Site

FAMILIES: tuple[str, ...] = ("llama", "gpt2", "gpt_neox")
"""Hook families whose blocks all take the same arguments (see the module docstring)."""
TAIL_KINDS: tuple[str, ...] = ("final_norm", "unembed")
"""Sites after the last block, computed by calling the final norm and then the head."""

Sink = Callable[[int, Site, Tensor], None]
"""``sink(batch_index, site, tensor)``: receives a site's ``(batch, pos, d)`` tensor."""


class _Stop(Exception):  # control flow, never seen by a user
    """Raised by the pre-hook on block 0 once its arguments are recorded."""


def unsupported_reason(model: nn.Module, family_name: str) -> str | None:
    """Why layer-major passes cannot run on ``model``, or ``None`` when they can."""
    if family_name not in FAMILIES:
        return (
            f"layer-major capture supports the {', '.join(FAMILIES)} families, not "
            f"{family_name!r}; use order='batch'"
        )
    roots = {id(m): m for m in (model, model.base_model)}.values()
    if any(m._forward_pre_hooks or m._forward_hooks for m in roots):
        return (
            "the model has hooks on its whole forward (an intervene() block follows whole "
            "passes), which layer-major calls of single blocks would bypass; use order='batch'"
        )
    kinds = set(getattr(model.config, "layer_types", None) or ())
    if len(kinds) > 1:
        return (
            f"layer-major capture needs every block to take the same mask, but this model mixes "
            f"{', '.join(sorted(kinds))} layers; use order='batch'"
        )
    return None


def blocks_of(model: nn.Module, layers_path: str) -> list[nn.Module]:
    """The blocks under ``model.base_model`` at the family's ``layers`` path, in order."""
    n = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    blocks = list(model.base_model.get_submodule(layers_path))
    return blocks[:n] if n else blocks


class Spill:
    """Per-batch residuals between blocks: held in host memory, or in files under ``folder``.

    Args:
        folder: ``None`` keeps every residual in memory; a folder writes each batch's residual
            to ``folder/<batch>.safetensors`` and reads it back when the next block needs it, so
            memory holds one batch's residual at a time.
    """

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._held: dict[int, Tensor] = {}
        self._device: dict[int, torch.device] = {}

    def put(self, index: int, hidden: Tensor) -> None:
        """Keeps batch ``index``'s residual (on its device in memory, on the host on disk)."""
        hidden = hidden.detach()
        if self.folder is None:
            self._held[index] = hidden
            return
        self._device[index] = hidden.device
        tensors = {"h": hidden.to("cpu").contiguous()}
        save_file(tensors, str(self.folder / f"{index}.safetensors"))

    def get(self, index: int) -> Tensor:
        """Batch ``index``'s residual as last put, on the device it was put from."""
        if self.folder is None:
            return self._held[index]
        hidden = load_file(str(self.folder / f"{index}.safetensors"))["h"]
        return hidden.to(self._device[index])


@contextlib.contextmanager
def spill_folder(parent: Path | None, needed: int, budget: int | None) -> Iterator[Spill]:
    """A :class:`Spill` in memory when ``needed`` bytes fit in ``budget``, else on disk.

    The folder (under ``parent``, or the system's temporary folder) is removed on exit, also on
    an exception.
    """
    if budget is None or needed <= budget:
        yield Spill(None)
        return
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".layerwise-", dir=parent))
    try:
        yield Spill(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _offload_hooks(module: nn.Module) -> list[Any]:
    """Accelerate's offloading hooks attached to ``module`` itself (not its children)."""
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        return []
    hooks = list(getattr(hook, "hooks", None) or [hook])  # a SequentialHook holds several
    return [h for h in hooks if getattr(h, "offload", False)]


@contextlib.contextmanager
def weights_held(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Keeps the offloaded weights of ``modules`` (and their children) loaded inside the block.

    Each offloading hook loads its module's weights to the execution device once
    (``pre_forward``) and stops offloading, so calls inside the block read nothing from disk; on
    exit, however it is left, offloading is switched back on and the weights are released
    (``post_forward``), leaving the model as accelerate placed it. Modules not offloaded are left
    alone.
    """
    held: list[tuple[nn.Module, Any]] = []
    try:
        for top in modules:
            for module in top.modules():
                for hook in _offload_hooks(module):
                    hook.pre_forward(module)
                    hook.offload = False
                    held.append((module, hook))
        yield
    finally:
        for module, hook in reversed(held):
            hook.offload = True
            hook.post_forward(module, None)


def _outside(model: nn.Module, excluded: Sequence[nn.Module]) -> list[nn.Module]:
    """The offloaded modules of ``model`` that are not inside any of ``excluded``."""
    skip = {id(m) for top in excluded for m in top.modules()}
    return [m for m in model.modules() if id(m) not in skip and _offload_hooks(m)]


def run(
    model: nn.Module,
    layers_path: str,
    sites: Sequence[Site],
    batches: Sequence[dict[str, Any]],
    sink: Sink,
    spill: Spill,
    on_step: Callable[[], None] | None = None,
    final_norm: Site | None = None,
    after: Sequence[nn.Module] = (),
) -> None:
    """Runs ``model`` layer-major over ``batches`` and hands each site's tensor to ``sink``.

    Args:
        model: The model (placed or not).
        layers_path: The family's ``layers`` path under ``model.base_model``.
        sites: Resolved sites to record (per-layer sites, embedding sites, the tail's).
        batches: Keyword arguments of the model's ``forward`` for each batch (``input_ids``,
            ``attention_mask``, ...).
        sink: Called as ``sink(batch_index, site, tensor)`` once per site and batch.
        spill: Where the residuals wait between blocks.
        on_step: Called after each stage (embeddings, each block, the tail) of each batch.
        final_norm: The final norm's site, needed to compute ``unembed`` when ``final_norm``
            itself is not among ``sites``.
        after: Modules that run after the last block (final norm, head): not loaded during the
            first pass, which holds every other offloaded module outside the blocks.
    """
    blocks = blocks_of(model, layers_path)
    per_layer: dict[int, list[Site]] = {}
    head, tail = [], []
    for site in sites:
        if site.layer is not None:
            per_layer.setdefault(site.layer, []).append(site)
        elif site.kind in TAIL_KINDS:
            tail.append(site)
        else:
            head.append(site)
    current = {"batch": 0}

    def record(site: Site, tensor: Tensor) -> None:
        sink(current["batch"], site, tensor)

    # the arguments each block gets, less the residual (recorded once per batch)
    contexts: list[tuple[tuple, dict[str, Any]]] = []
    tail_modules = [s.module for s in tail] + ([final_norm.module] if final_norm else [])
    tail_modules += list(after)
    with read_hooks(head, record), weights_held(_outside(model, [*blocks, *tail_modules])):
        for index, kwargs in enumerate(batches):
            current["batch"] = index
            args, block_kwargs = _first_block_inputs(model, blocks[0], kwargs)
            hidden, args, block_kwargs = _split_residual(args, block_kwargs)
            contexts.append((args, block_kwargs))
            spill.put(index, hidden)
            _step(on_step)
    for layer, block in enumerate(blocks):
        with read_hooks(per_layer.get(layer, []), record), weights_held([block]):
            for index, (args, block_kwargs) in enumerate(contexts):
                current["batch"] = index
                out = block(spill.get(index), *args, **block_kwargs)
                spill.put(index, pick(out, 0))
                _step(on_step)
    if tail:
        _run_tail(tail, final_norm, len(batches), spill, record, current, on_step)


def _run_tail(
    tail: list[Site],
    final_norm: Site | None,
    n_batches: int,
    spill: Spill,
    record: Callable[[Site, Tensor], None],
    current: dict[str, int],
    on_step: Callable[[], None] | None,
) -> None:
    by_kind = {s.kind: s for s in tail}
    norm = by_kind.get("final_norm") or final_norm
    if norm is None or any(s.spec.io != "output" for s in (norm, *tail)):
        raise ConfigError(
            "layer-major capture computes the tail as the final norm's then the head's output; "
            "this family's tail sites do not read those, use order='batch'"
        )
    unembed = by_kind.get("unembed")
    modules = [norm.module] + ([unembed.module] if unembed is not None else [])
    with read_hooks(tail, record), weights_held(modules):
        for index in range(n_batches):
            current["batch"] = index
            normed = pick(norm.module(spill.get(index)), 0)
            if unembed is not None:
                unembed.module(normed)
            _step(on_step)


def _step(on_step: Callable[[], None] | None) -> None:
    if on_step is not None:
        on_step()


def _first_block_inputs(
    model: nn.Module, first: nn.Module, kwargs: dict[str, Any]
) -> tuple[tuple, dict[str, Any]]:
    """Runs ``model`` up to its first block and returns the arguments the block was called with.

    The pre-hook runs before accelerate's wrapper of the block's ``forward``, so no weight of the
    block is loaded.
    """
    seen: dict[str, Any] = {}

    def stop(_module: nn.Module, args: tuple, block_kwargs: dict[str, Any]) -> None:
        seen["args"], seen["kwargs"] = args, dict(block_kwargs)
        raise _Stop

    handle = first.register_forward_pre_hook(stop, with_kwargs=True, prepend=True)
    try:
        model(**kwargs)
    except _Stop:
        pass
    finally:
        handle.remove()
    if "args" not in seen:
        raise ConfigError(
            f"{type(model).__name__}'s forward never reached its first block; use order='batch'"
        )
    return seen["args"], seen["kwargs"]


def _split_residual(args: tuple, kwargs: dict[str, Any]) -> tuple[Tensor, tuple, dict[str, Any]]:
    """Takes the residual (first positional argument, or ``hidden_states``) out of the call."""
    if args:
        return args[0], tuple(args[1:]), kwargs
    if "hidden_states" in kwargs:
        rest = dict(kwargs)
        return rest.pop("hidden_states"), (), rest
    raise ConfigError("the first block got no residual argument; use order='batch'")
