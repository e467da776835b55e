"""``intervene``: install edits as hooks for the duration of a ``with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from workbench.errors import InterventionError, SiteError
from workbench.hooking import call_hooks, edit_hooks, read_hooks
from workbench.interventions.edits import Edit, EditContext, Skip, as_edit
from workbench.interventions.positions import TokenPass
from workbench.models.subject import Subject
from workbench.sites import Site

EditLike = Edit | Callable[[Tensor, EditContext], Tensor]
"""An edit object, or a plain callable ``fn(hidden, ctx) -> Tensor``."""


@dataclass(frozen=True, eq=False)
class Intervention:
    """What an :func:`intervene` block installed.

    Attributes:
        edits: Site name to its edits, in the order they apply, sites in forward order.
    """

    edits: dict[str, tuple[Edit, ...]]

    @property
    def sites(self) -> list[str]:
        """Edited site names in forward order."""
        return list(self.edits)


@contextlib.contextmanager
def intervene(
    subject: Subject, edits: Mapping[str, EditLike | Sequence[EditLike]]
) -> Iterator[Intervention]:
    """Edits activations in every forward pass inside the ``with`` block.

    Plain forward passes, ``model.generate`` (cached: see
    :mod:`workbench.interventions.positions` for what a position means there),
    :func:`~workbench.capturing` and backpropagation inside the block all see the edited model.
    Every hook is removed on exit, also when the block raises.

    Args:
        subject: The model.
        edits: Site to edit, or to a list of edits composed in order (the first one sees the
            model's tensor, the next one the first one's result). A key is a site name
            (``"resid_post.3"``, ``"final_norm"``) or a kind (``"resid_post"``: every layer);
            several keys naming one site compose in the mapping's order. Plain callables
            ``fn(hidden, ctx)`` are taken as :func:`~workbench.interventions.apply`.

    Yields:
        An :class:`Intervention` listing what is installed.

    Raises:
        SiteError: An unknown site or a layer out of range (as :meth:`Subject.expand`).
        InterventionError: An edit that cannot apply at its site (wrong width, a patch source
            from another model, ``skip()`` elsewhere than ``resid_post.L``...).
    """
    sites, chains = _resolve(subject, edits)
    stash_sites = [_block_input_site(subject, sites[n]) for n, c in chains.items() if _skips(c)]
    passes: list[TokenPass | None] = []
    stash: dict[int, Tensor] = {}

    def before(_module: Any, args: tuple, kwargs: dict) -> None:
        passes.append(TokenPass.from_call(args, kwargs))

    def after(_module: Any) -> None:
        if passes:
            passes.pop()

    def keep(site: Site, tensor: Tensor) -> None:
        stash[site.layer] = tensor  # type: ignore[index]

    def run(site: Site, hidden: Tensor) -> Tensor:
        tokens = passes[-1] if passes else None
        batch, width = int(hidden.shape[0]), int(hidden.shape[1])
        if tokens is None or tokens.shape != (batch, width):
            tokens = TokenPass.plain(batch, width, hidden.device)
        chain = chains[site.name]
        ctx = EditContext(
            site, tokens.to(hidden.device), stash.get(site.layer) if _skips(chain) else None
        )
        for edit in chain:
            new = edit(hidden, ctx)
            if not isinstance(new, Tensor) or new.shape != hidden.shape:
                shape = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
                raise InterventionError(
                    f"edit {edit!r} at {site.name} returned {shape}; expected the site's shape "
                    f"{tuple(hidden.shape)}"
                )
            hidden = new
        return hidden

    model = subject.model
    roots = [model] if model.base_model is model else [model, model.base_model]
    depth = getattr(model, EDITING, 0)
    setattr(model, EDITING, depth + 1)
    try:
        with (
            call_hooks(roots, before, after),
            edit_hooks(list(sites.values()), run),
            read_hooks(stash_sites, keep),
        ):
            yield Intervention({name: tuple(chain) for name, chain in chains.items()})
    finally:
        stash.clear()
        passes.clear()
        if depth:
            setattr(model, EDITING, depth)
        else:
            delattr(model, EDITING)


EDITING = "_workbench_interventions"
"""Attribute a model carries, counting the :func:`intervene` blocks open on it (absent at 0), so
that code caching the unedited model's activations can refuse an edited one."""


def is_edited(model: Any) -> bool:
    """Whether an :func:`intervene` block is open on ``model``."""
    return bool(getattr(model, EDITING, 0))


def _skips(chain: Sequence[Edit]) -> bool:
    return any(isinstance(edit, Skip) for edit in chain)


def _resolve(
    subject: Subject, edits: Mapping[str, EditLike | Sequence[EditLike]]
) -> tuple[dict[str, Site], dict[str, list[Edit]]]:
    if not isinstance(edits, Mapping):
        raise InterventionError(
            f"intervene() takes a mapping site -> edit(s), got {type(edits).__name__}"
        )
    sites: dict[str, Site] = {}
    chains: dict[str, list[Edit]] = {}
    for key, value in edits.items():
        items = list(value) if isinstance(value, list | tuple) else [value]
        if not items:
            raise InterventionError(f"no edit given for {key!r}")
        for site in subject.expand(key):
            sites[site.name] = site
            chain = chains.setdefault(site.name, [])
            for item in items:
                edit = as_edit(item, key)
                edit.check(site, subject)
                chain.append(edit)
    order = {name: i for i, name in enumerate(subject.site_names())}
    names = sorted(sites, key=order.__getitem__)
    return {n: sites[n] for n in names}, {n: chains[n] for n in names}


def _block_input_site(subject: Subject, site: Site) -> Site:
    """``resid_pre.L`` for a skipped ``resid_post.L``, checked to be the same block's input."""
    try:
        pre = subject.site(f"resid_pre.{site.layer}")
    except SiteError:
        pre = None
    if pre is None or pre.module is not site.module or pre.spec.io != "input":
        raise InterventionError(
            f"skip() at {site.name} needs resid_pre.{site.layer} to be the input of the same "
            f"module; the {subject.family.name} hook file does not say so"
        )
    return pre
