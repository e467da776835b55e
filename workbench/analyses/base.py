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
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Self

from workbench.cache import recipe_key
from workbench.claims import Claim, ClaimTable, evaluate
from workbench.criteria import Shortfall, dependent_claims
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
        """Checks ``Literal`` fields, :attr:`POSITIVE` integers and a ``seed`` field (``>= 0``).

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
        seed = getattr(self, "seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")


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
    claims: Sequence[Claim] | ClaimTable = (),
    shortfalls: Sequence[Shortfall] = (),
) -> Path:
    """Writes a study's ``out_dir/results.json``: its config as the parameters, its metrics.

    The model (unless given) and seed are read from the config's ``model`` and ``seed`` fields
    when it has them.
    :meth:`StudyResult.save` calls this with the study's metrics and its checked claims (a
    ``ClaimTable``; bare ``Claim`` records are checked on ``metrics`` here), written as the
    ``claims`` list, and the trainings that missed their criterion (``provenance.shortfalls``).
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
        claims=(claims if isinstance(claims, ClaimTable) else evaluate(claims, metrics)).to_list(),
        weights=None if model is None else weights_record(model),
        shortfalls=[s.to_dict() for s in shortfalls],
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


_METRICS_MEMO = "_study_metrics"


class StudyResult:
    """What every study's result is: the one protocol the runner, display and replication use.

    A study's result class is a frozen dataclass (declared with ``repr=False``: the card's text
    is its repr) that inherits this and declares, once:

    - ``STUDY``, its name; ``CLAIMS`` and ``METRIC_KEYS`` (from the study's ``summary`` module);
      ``FIGURES``, every figure kind, and ``MAIN_FIGURE``, the one a card's snapshot draws;
    - :meth:`compute_metrics` (the ``results.json`` metrics, a pure function of the result),
      :meth:`figure_builders` (kind to plotly builder) and :meth:`provenance` (model, revision,
      sites).

    Everything else is shared: :meth:`metrics` computes the metrics once per result object and
    checks their keys against ``METRIC_KEYS``; :meth:`claims` checks ``CLAIMS`` on them;
    :meth:`figure` draws a kind after checking it against :meth:`figure_kinds`; :meth:`save`
    writes ``results.json``; and the result shows itself as a card in a notebook.

    Example::

        result = study.run(config, cache_dir="runs/cache")
        result.metrics()["kl_tuned_minus_logit_max"]
        result.claims()                       # a table in a notebook
        result.figure("lens_kl")
        result.save(config, "runs/x", figures.written)
    """

    STUDY: ClassVar[str] = ""
    notes: Sequence[str]
    """What the run skipped or could not show (every result has the field)."""
    CLAIMS: ClassVar[tuple[Claim, ...]] = ()
    METRIC_KEYS: ClassVar[tuple[str, ...]] = ()
    FIGURES: ClassVar[tuple[str, ...]] = ()
    MAIN_FIGURE: ClassVar[str] = ""

    def compute_metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics, computed from the result (see :meth:`metrics`)."""
        raise NotImplementedError

    def figure_builders(self) -> Mapping[str, Callable[[Any], Any]]:
        """Figure kind to the function that draws it from this result."""
        raise NotImplementedError

    def provenance(self) -> dict[str, Any]:
        """``model``, ``revision`` and, where one site kind was measured, ``sites``."""
        raise NotImplementedError

    def shortfalls(self) -> tuple[Shortfall, ...]:
        """The trainings of this run that reached their step cap before their criterion held.

        Read from the result itself (a cached result reports what the fresh one did); each names
        the claims it makes not evaluable. Default: none (a study without trainings to a
        criterion).
        """
        return ()

    def record_model(self, config: StudyConfig) -> str | None:
        """The model ``results.json`` names; ``None``: the config's ``model`` field."""
        return None

    def metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics, computed once per result object (the result is frozen).

        Raises:
            ValueError: The study's metrics do not have exactly its ``METRIC_KEYS``, in order.
        """
        memo = self.__dict__.get(_METRICS_MEMO)
        if memo is None:
            memo = self.compute_metrics()
            if tuple(memo) != tuple(self.METRIC_KEYS):
                raise ValueError(
                    f"{type(self).__name__}.compute_metrics() gave keys {list(memo)}; "
                    f"METRIC_KEYS are {list(self.METRIC_KEYS)}"
                )
            object.__setattr__(self, _METRICS_MEMO, memo)
        return memo

    def claims(self) -> ClaimTable:
        """The study's ``CLAIMS`` checked on :meth:`metrics` (a ``ClaimTable``).

        A claim that depends on a training that missed its criterion (:meth:`shortfalls`) is
        marked not evaluable: ``holds`` is ``None`` and the reason is recorded.
        """
        table = evaluate(self.CLAIMS, self.metrics())
        names = [c.name for c in self.CLAIMS]
        return table.not_evaluable(dependent_claims(names, self.shortfalls()))

    def figure_kinds(self) -> list[str]:
        """The figure kinds this result can draw (default: every kind of the study)."""
        return list(self.FIGURES)

    def figure(self, kind: str | None = None) -> Any:
        """One of the study's figures (default: ``MAIN_FIGURE``, or the first this result has).

        Raises:
            FigureKindError: An unknown kind, or one this result cannot draw.
        """
        if kind is None:
            kinds = self.figure_kinds()
            kind = self.MAIN_FIGURE if self.MAIN_FIGURE in kinds or not kinds else kinds[0]
        return draw_figure(self, kind, self.FIGURES, self.figure_builders())

    def save(
        self,
        config: StudyConfig,
        out_dir: str | os.PathLike[str],
        figures: Sequence[str | os.PathLike[str]] = (),
    ) -> Path:
        """Writes ``out_dir/results.json``: parameters, metrics, claims, figures, provenance.

        The trainings that missed their criterion are recorded as ``provenance.shortfalls``.
        """
        return save_study(
            self.STUDY,
            config,
            self.metrics(),
            out_dir,
            figures,
            model=self.record_model(config),
            revision=self.provenance().get("revision"),
            notes=tuple(self.notes),
            claims=self.claims(),
            shortfalls=self.shortfalls(),
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """The notebook card: metrics, claims, figure kinds, notes and provenance."""
        from workbench.display.studies import study_bundle

        return study_bundle(self, include, exclude)

    def __repr__(self) -> str:
        from workbench.display.studies import study_text

        return study_text(self)


@dataclass(frozen=True)
class Study:
    """What a study is, declared once.

    Attributes:
        name: The study's name (``workbench run <name>``, ``notebooks/<name>.ipynb``).
        config: Its frozen config class (a :class:`~workbench.analyses.base.StudyConfig`).
        result: Its result class (a :class:`~workbench.analyses.base.StudyResult`).
        run: ``run(config, *, cache_dir=None, progress=True) -> result``.
        presets: Named parameter sets over the config's defaults (``"test"``: the size the test
            suite runs it at).
        check: ``params -> config`` when building the config takes more than the config's own
            validation (reading a file the parameters name); default ``config.from_params``.
        paper: The paper it reproduces, in a few words.
        notebook: Its notebook, for a study registered from outside the package (the bundled
            ones are ``notebooks/<name>.ipynb``, found by :mod:`workbench.runner.notebooks`).
    """

    name: str
    config: type[StudyConfig]
    result: type[StudyResult]
    run: Callable[..., StudyResult]
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    check: Callable[[Mapping[str, Any]], StudyConfig] | None = None
    paper: str = ""
    notebook: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "presets", MappingProxyType({k: dict(v) for k, v in self.presets.items()})
        )
        if self.name != self.result.STUDY:
            raise ConfigError(
                f"study {self.name!r}: its result class {self.result.__name__} says STUDY="
                f"{self.result.STUDY!r}"
            )

    @property
    def claims(self) -> tuple[Any, ...]:
        """The paper effects the study checks (its result class's ``CLAIMS``)."""
        return self.result.CLAIMS

    @property
    def metric_keys(self) -> tuple[str, ...]:
        """The keys of its ``results.json`` metrics."""
        return self.result.METRIC_KEYS

    @property
    def main_figure(self) -> str:
        """The figure a card's snapshot draws."""
        return self.result.MAIN_FIGURE

    def configure(self, params: Mapping[str, Any] = (), preset: str | None = None) -> StudyConfig:
        """The config of ``params`` over a preset (or the defaults), validated.

        Raises:
            ConfigError: An unknown preset, or values the config refuses (one line).
        """
        values: dict[str, Any] = {}
        if preset is not None:
            if preset not in self.presets:
                raise ConfigError(
                    f"study {self.name!r} has no preset {preset!r}; presets: "
                    + (", ".join(self.presets) or "none")
                )
            values.update(self.presets[preset])
        values.update(dict(params))
        build = self.check if self.check is not None else self.config.from_params
        return build(values)
