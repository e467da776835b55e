"""What every study's config shares: built from notebook parameters, validated, hashed for caches.

A study config is a frozen dataclass that also inherits :class:`StudyConfig`. The notebook's
parameters cell is the only place its parameters are listed: ``Config.from_params(globals())``
picks the config's fields from the notebook's namespace, so nothing is written twice. Validation
is declarative: ``Literal[...]`` fields are checked against their choices and the names in
``POSITIVE`` must be integers of at least 1; a study's own ``__post_init__`` calls
:meth:`StudyConfig.validate` and adds its specific checks. Every failure is a one-line
:class:`~workbench.errors.ConfigError` naming the field, the bad value and what is accepted.

Example::

    @dataclass(frozen=True)
    class MyConfig(StudyConfig):
        POSITIVE: ClassVar[tuple[str, ...]] = ("n_texts",)
        CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device",)

        model: str = "tiny-lm"
        site: Literal["resid_pre", "resid_post"] = "resid_post"
        n_texts: int = 200
        device: str = "auto"

        def __post_init__(self) -> None:
            self.validate()
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from workbench.cache import recipe_key
from workbench.claims import Claim, evaluate
from workbench.errors import ConfigError, check_figure_kind
from workbench.records import save_results


class StudyConfig:
    """Mixin for frozen study configs (see the module docstring)."""

    POSITIVE: ClassVar[tuple[str, ...]] = ()
    """Integer fields that must be at least 1."""
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device",)
    """Fields that do not change any cached number (device, batch size, ...)."""
    CACHE_VERSION: ClassVar[int] = 1
    """Bump when the cached records' format or meaning changes."""

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """Builds the config from a mapping that holds (at least) its fields, e.g. ``globals()``.

        Names that are not fields (``out_dir``, imports, ...) are ignored; missing fields keep
        their defaults.
        """
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in params.items() if k in names})

    @classmethod
    def parameter_names(cls) -> list[str]:
        """The config's fields, in order (a notebook's parameters cell lists exactly these)."""
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    def to_params(self) -> dict[str, Any]:
        """The fields as a plain dict (for ``results.json``)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def key(self, *extra_ignored: str) -> str:
        """A short hash of every field that changes the numbers (for keyed caches).

        Args:
            extra_ignored: More fields to leave out, e.g. the checkpoint list for a cache whose
                units are checkpoints.
        """
        ignored = set(self.CACHE_IGNORES) | set(extra_ignored)
        fields = {k: v for k, v in self.to_params().items() if k not in ignored}
        fields["cache_version"] = self.CACHE_VERSION
        return recipe_key(fields)

    def validate(self) -> None:
        """Checks ``Literal`` fields and :attr:`POSITIVE` integers.

        Raises:
            ConfigError: One line naming the field, its value and what is accepted.
        """
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            choices = _literal_choices(hints.get(f.name))
            if choices is not None and value not in choices:
                raise ConfigError(
                    f"{f.name}={value!r} is not accepted; use one of "
                    + ", ".join(repr(c) for c in choices)
                )
        for name in self.POSITIVE:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer of at least 1, got {value!r}")


def save_study(
    analysis: str,
    config: StudyConfig,
    metrics: Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    figures: Sequence[str | os.PathLike[str]] = (),
    *,
    model: str | None = None,
    revision: str | None = None,
    notes: Sequence[str] = (),
    claims: Sequence[Claim] = (),
) -> Path:
    """Writes a study's ``out_dir/results.json``: its config as the parameters, its metrics.

    The model (unless given) and seed are read from the config's ``model`` and ``seed`` fields
    when it has them.
    Each study's ``save(result, config, out_dir, figures)`` calls this with its own metrics and
    its ``CLAIMS``, which are checked on the metrics and written as the ``claims`` list.
    """
    from workbench.models import weights_record

    model = model or getattr(config, "model", None)
    return save_results(
        out_dir,
        analysis=analysis,
        params=config.to_params(),
        metrics=metrics,
        figures=list(figures),
        model=model,
        revision=revision,
        seed=getattr(config, "seed", None),
        notes=list(notes),
        claims=evaluate(claims, metrics).to_list(),
        weights=None if model is None else weights_record(model),
    )


def _literal_choices(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return None


def draw_figure(
    result: Any, kind: str, kinds: Sequence[str], builders: Mapping[str, Callable[[Any], Any]]
) -> Any:
    """Draws one figure of a study result: the body of every ``Result.figure(kind)``.

    Args:
        result: The result; its ``figure_kinds()`` says which kinds it can draw.
        kind: The kind asked for.
        kinds: Every kind the study knows (its ``FIGURES``).
        builders: Kind to builder (``figures.BUILDERS``).

    Raises:
        FigureKindError: An unknown kind, or one this result cannot draw.
    """
    return builders[check_figure_kind(kind, result.figure_kinds(), kinds)](result)
