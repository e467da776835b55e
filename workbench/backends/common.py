"""What the optional backends share: the batch function's type, optional imports, the shadow copy.

Kept apart from :mod:`workbench.backends` (which imports a backend's module on first use) so that
the backends import these without importing their own registry.
"""

from __future__ import annotations

import copy
import importlib
import itertools
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from torch import Tensor, nn

from workbench.errors import ConfigError

RunBatch = Callable[..., Mapping[str, Tensor]]
"""``run_batch(**model_kwargs) -> {site name: (batch, pos, d) tensor}``."""


def require(package: str, extra: str, backend: str) -> ModuleType:
    """Imports an optional package, or raises a one-line ``ConfigError`` naming what to install."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise ConfigError(
            f"capture backend {backend!r} needs the {package} package, which is not installed: "
            f"pip install 'workbench[{extra}]'"
        ) from exc


def shadow_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model``'s module tree sharing all of its parameters and buffers.

    Wrappers that rewrite the module tree they are given (TransformerLens swaps in bridge
    components, nnsight patches ``forward``) can act on the copy while the original stays as it
    was. Weights are not copied, so the copy costs no memory and sees later in-place edits.
    """
    memo: dict[int, Any] = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, memo)
