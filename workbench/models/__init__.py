"""Models: :func:`load_model`, the :class:`Subject` it returns, and the embedded models."""

from workbench.models.lazy import LazySubject
from workbench.models.loading import (
    EMBEDDED,
    load_model,
    local_checkpoints,
    quiet_transformers,
    weights_record,
)
from workbench.models.subject import Subject

__all__ = [
    "EMBEDDED",
    "LazySubject",
    "Subject",
    "load_model",
    "local_checkpoints",
    "quiet_transformers",
    "weights_record",
]
