"""Hook sites as data: canonical site names resolved to modules through ``hooks/*.toml``.

A site is a named place in the forward pass whose tensor the workbench can read: ``embed``,
``resid_pre.L``, ``resid_mid.L``, ``resid_post.L``, ``attn_out.L``, ``mlp_out.L``, ``final_norm``
and ``unembed``. Each architecture family has one TOML file that maps these names to module paths
(as pyvene keeps per-architecture tables, but as data files and a frozen dataclass). Adding an
architecture is adding a file; no code changes.

A file looks like::

    family = "gpt2"
    model_types = ["gpt2"]            # matched against config.model_type
    layers = "h"                      # the ModuleList of blocks, relative to the base model

    [sites.resid_post]
    module = "h.{layer}"              # relative to model.base_model unless scope = "model"
    io = "output"                     # or "input": the first positional argument / `arg` keyword
    index = 0                         # the element to take when the module returns a tuple

Extra folders of TOML files can be added with the ``WORKBENCH_HOOKS_PATH`` environment variable
(``os.pathsep``-separated); a file there overrides a bundled family of the same name.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from torch import nn

from workbench.errors import ConfigError, SiteError, UnknownArchitectureError

SITE_KINDS: tuple[str, ...] = (
    "embed",
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "final_norm",
    "unembed",
)
"""Every canonical site kind, in forward order."""

_LAYER = "{layer}"
_SITE_NAME = re.compile(r"^(?P<kind>[a-z_]+)(?:\.(?P<layer>-?\d+))?$")


@dataclass(frozen=True)
class SiteSpec:
    """Where one kind of site lives in a family's modules.

    Attributes:
        module: Dotted module path; per-layer sites contain ``{layer}``.
        io: Read the module's ``"output"`` or its ``"input"``.
        index: Element to take when the output (or positional input) is a tuple.
        arg: Keyword name of the input tensor when the module receives it by keyword.
        scope: ``"base"`` resolves ``module`` under ``model.base_model``, ``"model"`` under the
            top-level model (for heads such as ``lm_head``).
    """

    module: str
    io: Literal["input", "output"] = "output"
    index: int = 0
    arg: str = "hidden_states"
    scope: Literal["base", "model"] = "base"

    def __post_init__(self) -> None:
        if self.io not in ("input", "output"):
            raise ConfigError(f"site io must be 'input' or 'output', got {self.io!r}")
        if self.scope not in ("base", "model"):
            raise ConfigError(f"site scope must be 'base' or 'model', got {self.scope!r}")

    @property
    def per_layer(self) -> bool:
        """Whether this site exists once per layer."""
        return _LAYER in self.module


@dataclass(frozen=True)
class HookFamily:
    """One architecture family's site table, read from ``hooks/<family>.toml``."""

    name: str
    model_types: tuple[str, ...]
    layers: str
    sites: dict[str, SiteSpec] = field(hash=False)
    description: str = ""
    source: Path | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.sites) - set(SITE_KINDS))
        if unknown:
            raise ConfigError(
                f"{self.source}: unknown site kind(s) {unknown}; known: {', '.join(SITE_KINDS)}"
            )


@dataclass(frozen=True)
class Site:
    """A site resolved on a concrete model.

    Attributes:
        name: Canonical name, e.g. ``"resid_post.3"`` or ``"final_norm"``.
        kind: The site kind, e.g. ``"resid_post"``.
        layer: The layer index, or ``None`` for sites that are not per layer.
        module: The module whose input or output is read.
        spec: How to read it.
    """

    name: str
    kind: str
    layer: int | None
    module: nn.Module = field(repr=False, compare=False)
    spec: SiteSpec


def hook_dirs() -> list[Path]:
    """Folders searched for ``*.toml`` families, later ones overriding earlier ones."""
    here = Path(__file__).resolve().parent
    dirs = [d for d in (here.parent / "hooks", here / "_hooks") if d.is_dir()]
    extra = os.environ.get("WORKBENCH_HOOKS_PATH", "")
    dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def parse_family(path: Path) -> HookFamily:
    """Reads one family file.

    Args:
        path: A ``*.toml`` file in the format described in this module's docstring.

    Returns:
        The family.

    Raises:
        ConfigError: The file is not valid TOML or lacks required keys.
    """
    try:
        data = tomllib.loads(path.read_text())
        sites = {kind: SiteSpec(**spec) for kind, spec in data.get("sites", {}).items()}
        return HookFamily(
            name=data["family"],
            model_types=tuple(data["model_types"]),
            layers=data["layers"],
            sites=sites,
            description=data.get("description", ""),
            source=path,
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a valid hook family file ({exc})") from exc


@cache
def _families_in(dirs: tuple[Path, ...]) -> dict[str, HookFamily]:
    families: dict[str, HookFamily] = {}
    for d in dirs:
        for path in sorted(d.glob("*.toml")):
            fam = parse_family(path)
            families[fam.name] = fam
    return families


def families() -> dict[str, HookFamily]:
    """All known architecture families by name."""
    return dict(_families_in(tuple(hook_dirs())))


def family_for(model: nn.Module) -> HookFamily:
    """Finds the family describing ``model`` by its ``config.model_type``.

    Raises:
        UnknownArchitectureError: No family file lists the model's type.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for fam in families().values():
        if model_type in fam.model_types:
            return fam
    folder = hook_dirs()[0] if hook_dirs() else Path("hooks")
    raise UnknownArchitectureError(
        f"no hook sites known for {type(model).__name__} (model_type={model_type!r}); "
        f"add a TOML file for it to {folder}/ (see hooks/gpt2.toml)"
    )


def _get_module(root: nn.Module, path: str) -> nn.Module:
    try:
        return root.get_submodule(path) if path else root
    except AttributeError as exc:
        raise UnknownArchitectureError(
            f"{type(root).__name__} has no module {path!r}; its hook file does not fit this model"
        ) from exc


def n_layers(model: nn.Module, family: HookFamily) -> int:
    """Number of blocks in ``model`` according to ``family``'s ``layers`` path."""
    blocks = _get_module(model.base_model, family.layers)
    return len(blocks)  # type: ignore[arg-type]


def available_sites(model: nn.Module, family: HookFamily) -> list[str]:
    """Every concrete site name on ``model``, in forward order."""
    layer_count = n_layers(model, family)
    names: list[str] = []
    head = [k for k in SITE_KINDS if k in family.sites and not family.sites[k].per_layer]
    if "embed" in head:
        names.append("embed")
    for layer in range(layer_count):
        names += [
            f"{k}.{layer}" for k in SITE_KINDS if k in family.sites and family.sites[k].per_layer
        ]
    names += [k for k in head if k != "embed"]
    return names


def resolve(model: nn.Module, family: HookFamily, name: str) -> Site:
    """Resolves a canonical site name such as ``"resid_post.3"`` on ``model``.

    Negative layers count from the end (``resid_post.-1`` is the last block).

    Raises:
        SiteError: Unknown kind, missing or superfluous layer index, or a layer out of range.
    """
    match = _SITE_NAME.match(name)
    kind = match["kind"] if match else name
    if not match or kind not in family.sites:
        known = ", ".join(k for k in SITE_KINDS if k in family.sites)
        raise SiteError(f"unknown site {name!r} for family {family.name}; known kinds: {known}")
    spec = family.sites[kind]
    layer_count = n_layers(model, family)
    if spec.per_layer:
        if match["layer"] is None:
            raise SiteError(f"site {kind!r} needs a layer, e.g. '{kind}.0' (0..{layer_count - 1})")
        layer = int(match["layer"])
        if not -layer_count <= layer < layer_count:
            raise SiteError(
                f"layer {layer} out of range for {name!r}: the model has {layer_count} layers "
                f"(0..{layer_count - 1})"
            )
        layer %= layer_count
        path = spec.module.replace(_LAYER, str(layer))
    else:
        if match["layer"] is not None:
            raise SiteError(f"site {kind!r} has no layer index; use {kind!r}")
        layer, path = None, spec.module
    root = model if spec.scope == "model" else model.base_model
    canonical = f"{kind}.{layer}" if layer is not None else kind
    return Site(canonical, kind, layer, _get_module(root, path), spec)


def parse_layers(layers: str | int | Iterable[int], layer_count: int) -> list[int]:
    """Turns a layer selection into sorted, unique, non-negative layer indices.

    Args:
        layers: ``"all"``, an int, a comma list such as ``"0,3,-1"``, a range such as ``"2:6"``,
            or an iterable of ints. Negative indices count from the end.
        layer_count: Number of layers in the model.

    Raises:
        SiteError: An index out of range or an unparseable selection.
    """
    if isinstance(layers, str):
        text = layers.strip()
        if text == "all":
            return list(range(layer_count))
        try:
            if ":" in text:
                start, _, stop = text.partition(":")
                items = list(range(layer_count))[slice(int(start or 0), int(stop or layer_count))]
            else:
                items = [int(t) for t in text.split(",") if t.strip()]
        except ValueError as exc:
            raise SiteError(f"cannot read layers {layers!r}; use 'all', '0,3,-1' or '2:6'") from exc
    elif isinstance(layers, int):
        items = [layers]
    else:
        items = [int(x) for x in layers]
    if not items:
        raise SiteError(f"layer selection {layers!r} selects no layer")
    out = []
    for layer in items:
        if not -layer_count <= layer < layer_count:
            raise SiteError(
                f"layer {layer} out of range: the model has {layer_count} layers "
                f"(0..{layer_count - 1})"
            )
        out.append(layer % layer_count)
    return sorted(set(out))


def expand_sites(
    model: nn.Module,
    family: HookFamily,
    sites: str | Sequence[str],
    layers: str | int | Iterable[int] = "all",
) -> list[Site]:
    """Expands site kinds and explicit names into resolved sites.

    ``"resid_post"`` expands to one site per selected layer; ``"resid_post.3"`` and ``"final_norm"``
    are taken as they are. Duplicates are dropped; order follows the forward pass.

    Args:
        model: The model.
        family: Its hook family.
        sites: Site kinds or names, as a list or a comma-separated string.
        layers: Layer selection applied to bare per-layer kinds (see :func:`parse_layers`).

    Raises:
        SiteError: Unknown site, bad layer, or an empty selection.
    """
    names = [s.strip() for s in sites.split(",")] if isinstance(sites, str) else list(sites)
    names = [n for n in names if n]
    if not names:
        raise SiteError("no site given; pick from " + ", ".join(family.sites))
    layer_count = n_layers(model, family)
    selected = None
    resolved: dict[str, Site] = {}
    for name in names:
        spec = family.sites.get(name)
        if spec is not None and spec.per_layer:
            if selected is None:
                selected = parse_layers(layers, layer_count)
            for layer in selected:
                site = resolve(model, family, f"{name}.{layer}")
                resolved[site.name] = site
        else:
            site = resolve(model, family, name)
            resolved[site.name] = site
    order = {n: i for i, n in enumerate(available_sites(model, family))}
    return sorted(resolved.values(), key=lambda s: order[s.name])
