"""Capture through TransformerLens 4's ``TransformerBridge`` and ``run_with_cache``.

The bridge is built around a shadow of the subject's Hugging Face model (same weights, own module
tree; see :func:`workbench.backends.shadow_copy`) with
``transformer_lens.model_bridge.sources.build_bridge_from_module``, so nothing is downloaded and
the subject stays as it was. It keeps the model's own attention implementation and raw HF weights
(no LayerNorm folding), so its activations equal the core's.

Canonical sites map to TransformerLens hook names:

- ``embed``: ``blocks.0.hook_resid_pre``, the residual stream entering the first block;
- ``resid_pre.L``, ``resid_mid.L``, ``resid_post.L``: ``blocks.L.hook_resid_pre``,
  ``blocks.L.hook_resid_mid``, ``blocks.L.hook_resid_post``;
- ``attn_out.L``, ``mlp_out.L``: ``blocks.L.hook_attn_out``, ``blocks.L.hook_mlp_out``;
- ``final_norm``: ``ln_final.hook_out``, after the norm's weight and bias (``hook_normalized``
  is before them);
- ``unembed``: ``unembed.hook_out``, the logits.

Architectures the bridge has no adapter for (e.g. a bare ``BertModel`` such as the embedded
MiniLM: the bridge expects ``BertForMaskedLM``) raise a one-line ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from workbench.backends.common import RunBatch, require, shadow_copy
from workbench.errors import ConfigError

if TYPE_CHECKING:
    from workbench.models.subject import Subject
    from workbench.sites import Site

NAME = "transformer_lens"
PER_LAYER_HOOKS: dict[str, str] = {
    "resid_pre": "hook_resid_pre",
    "resid_mid": "hook_resid_mid",
    "resid_post": "hook_resid_post",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
}
GLOBAL_HOOKS: dict[str, str] = {
    "embed": "blocks.0.hook_resid_pre",
    "final_norm": "ln_final.hook_out",
    "unembed": "unembed.hook_out",
}


def hook_name(site: Site) -> str:
    """The TransformerLens hook name of a resolved site."""
    if site.layer is None:
        return GLOBAL_HOOKS[site.kind]
    return f"blocks.{site.layer}.{PER_LAYER_HOOKS[site.kind]}"


def build_bridge(subject: Subject) -> Any:
    """A ``TransformerBridge`` over a shadow of the subject's model (no download, no tokenizer).

    Raises:
        ConfigError: transformer-lens is missing, or it cannot wrap this architecture.
    """
    require("transformer_lens", "tl", NAME)
    from transformer_lens.model_bridge.sources import build_bridge_from_module

    model = shadow_copy(subject.model)
    architecture = type(model).__name__
    try:
        bridge = build_bridge_from_module(model, architecture, hf_config=model.config)
    except Exception as exc:  # the bridge raises ValueError, AttributeError, KeyError, ...
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(
            f"TransformerLens cannot wrap {architecture} ({reason}); "
            "use backend='hooks' or backend='nnsight'"
        ) from exc
    return bridge.eval()


def prepare(subject: Subject, sites: Sequence[Site], *, remote: bool | str = False) -> RunBatch:
    """Binds the sites to a bridge; returns ``run_batch(**model_kwargs) -> {site: tensor}``.

    Raises:
        ConfigError: ``remote`` is set (only nnsight runs remotely), transformer-lens is missing,
            the architecture is not supported, or a site has no hook on this model.
    """
    if remote:
        raise ConfigError("remote=True needs backend='nnsight' (it runs the trace on NDIF)")
    bridge = build_bridge(subject)
    names = {site.name: hook_name(site) for site in sites}
    known = bridge.hook_dict
    for site, hook in names.items():
        if hook not in known:
            raise ConfigError(
                f"site {site!r} has no TransformerLens hook {hook!r} on "
                f"{type(subject.model).__name__}; use backend='hooks'"
            )
    wanted = sorted(set(names.values()))

    def run_batch(**model_kwargs: Any) -> dict[str, Tensor]:
        input_ids = model_kwargs.pop("input_ids")
        _, cache = bridge.run_with_cache(
            input_ids, names_filter=wanted, return_cache_object=False, **model_kwargs
        )
        return {site: cache[hook] for site, hook in names.items()}

    return run_batch
