"""The scaling-law fit: ``L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0`` from a CSV of runs.

The paper (Liu et al., 2026, arXiv 2602.05970, Sec. 3 and App. B) separates width ``m``
(``d_model``), depth ``l`` and data ``D`` (training tokens) in a Chinchilla-style law and fits it
to the reconstructed Chinchilla runs. If layers make similar updates that average like an
ensemble, the depth term falls as ``1/l``: the paper finds ``a_l = 1.2 ± 0.3`` (its release
notebook prints ``1.07 ± 0.24``). Following the release, the 40 highest-loss runs are dropped,
depth is ``n_layers - 2`` and the fit minimises the squared error of ``log L``.

:func:`read_runs` reads and checks a CSV (columns ``d_model``, ``n_layers``, ``num_tokens``,
``loss``; every value positive, every depth ``n_layers - depth_offset`` at least 1) and says in
one line what is wrong. :func:`fit_scaling_law` fits it (see :mod:`.fitting`) and returns a
:class:`ScalingFit` with standard errors from the Jacobian and from a bootstrap over runs.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.analyses.depth_ensemble.config import BUILTIN_CSV
from workbench.analyses.depth_ensemble.fitting import fit_log_power_law
from workbench.arrays import finite_list, finite_or_none
from workbench.errors import InputError
from workbench.stats import bootstrap

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLUMNS = ("d_model", "n_layers", "num_tokens", "loss")
"""The columns a scaling CSV needs (others are ignored)."""
PARAMS = ("c_m", "a_m", "c_l", "a_l", "c_D", "a_D", "L0")
"""The scaling law's parameters, in the order of every array of :class:`ScalingFit`."""
DATA = Path(__file__).parent / "data"


def resolve_csv(spec: str) -> Path:
    """The file a ``scaling_csv`` names (``builtin:chinchilla`` is the shipped table).

    Raises:
        InputError: Another ``builtin:`` name, or no such file.
    """
    if spec == BUILTIN_CSV:
        return DATA / "chinchilla_fitting_data.csv"
    if spec.startswith("builtin:"):
        raise InputError(f"unknown scaling_csv {spec!r}; use {BUILTIN_CSV!r}, a CSV path or ''")
    path = Path(spec).expanduser()
    if not path.is_file():
        raise InputError(f"scaling_csv {spec!r} is not a file; give a CSV path or {BUILTIN_CSV!r}")
    return path


@dataclass(frozen=True)
class ScalingRuns:
    """Runs of a scaling CSV, checked.

    Attributes:
        source: Where they came from.
        sha256: Hash of the file (it keys the study's cache).
        width: ``d_model`` per run, ``(n,)``.
        n_layers: ``n_layers`` per run.
        tokens: ``num_tokens`` per run.
        loss: Final loss per run.
    """

    source: str
    sha256: str
    width: np.ndarray = field(repr=False)
    n_layers: np.ndarray = field(repr=False)
    tokens: np.ndarray = field(repr=False)
    loss: np.ndarray = field(repr=False)

    def kept(self, drop_highest: int) -> np.ndarray:
        """Mask of the runs kept when the ``drop_highest`` highest-loss runs are dropped.

        As the release does: keep a run when its loss is below the ``drop_highest``-th highest.
        """
        if drop_highest <= 0:
            return np.ones(len(self.loss), dtype=bool)
        threshold = np.sort(self.loss)[-drop_highest]
        return self.loss < threshold


def read_runs(spec: str, *, depth_offset: int = 2) -> ScalingRuns:
    """Reads and checks a scaling CSV.

    Args:
        spec: ``builtin:chinchilla`` or a CSV path.
        depth_offset: Depth is ``n_layers - depth_offset`` (the paper's 2: the first and last
            layers are not counted); it must be at least 1 for every run.

    Raises:
        InputError: Unreadable file, missing columns (named), or values that are not positive
            finite numbers (column and rows named).
    """
    path = resolve_csv(spec)
    try:
        raw = path.read_bytes()
        rows = list(csv.DictReader(raw.decode("utf-8").splitlines()))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read scaling_csv {spec!r}: {exc}") from exc
    header = set(rows[0]) if rows else set()
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"scaling_csv {spec!r} lacks column(s) {', '.join(missing)}; it needs "
            f"{', '.join(COLUMNS)}"
        )
    values = {}
    for column in COLUMNS:
        numbers, bad = [], []
        for i, row in enumerate(rows, start=2):  # line 1 is the header
            try:
                number = float(row[column])
            except (TypeError, ValueError):
                number = float("nan")
            if not np.isfinite(number) or number <= 0:
                bad.append(i)
            numbers.append(number)
        if bad:
            shown = ", ".join(str(b) for b in bad[:5]) + (" ..." if len(bad) > 5 else "")
            raise InputError(
                f"scaling_csv {spec!r}: column {column} must hold positive numbers; "
                f"lines {shown} do not"
            )
        values[column] = np.array(numbers, dtype=np.float64)
    shallow = np.flatnonzero(values["n_layers"] - depth_offset < 1) + 2
    if len(shallow):
        raise InputError(
            f"scaling_csv {spec!r}: depth = n_layers - {depth_offset} must be at least 1; "
            f"lines {', '.join(str(b) for b in shallow[:5])} are too shallow"
        )
    return ScalingRuns(
        str(spec),
        hashlib.sha256(raw).hexdigest(),
        values["d_model"],
        values["n_layers"],
        values["num_tokens"],
        values["loss"],
    )


@dataclass(frozen=True)
class ScalingFit:
    """The fitted scaling law and the runs behind it.

    Arrays of parameters follow :data:`PARAMS`; arrays of runs hold the runs used.

    Attributes:
        source: The CSV.
        values: Fitted parameters ``(7,)``.
        se: Standard errors from the Jacobian ``(7,)``.
        bootstrap_se: Standard deviations over the bootstrap refits ``(7,)``.
        bootstrap_low: 2.5th percentiles ``(7,)``.
        bootstrap_high: 97.5th percentiles ``(7,)``.
        n_bootstrap: Refits that converged.
        n_total: Runs in the file.
        drop_highest: Highest-loss runs dropped.
        depth_offset: Depth is ``n_layers - depth_offset``.
        width: ``m`` of each run used.
        depth: ``l`` of each run used.
        tokens: ``D`` of each run used.
        loss: Loss of each run used.
        residuals: ``log L - log fit`` of each run used.
    """

    source: str
    values: np.ndarray
    se: np.ndarray
    bootstrap_se: np.ndarray
    bootstrap_low: np.ndarray
    bootstrap_high: np.ndarray
    n_bootstrap: int
    n_total: int
    drop_highest: int
    depth_offset: int
    width: np.ndarray = field(repr=False)
    depth: np.ndarray = field(repr=False)
    tokens: np.ndarray = field(repr=False)
    loss: np.ndarray = field(repr=False)
    residuals: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        p, n = len(PARAMS), len(self.loss)
        for name in ("values", "se", "bootstrap_se", "bootstrap_low", "bootstrap_high"):
            array = np.array(getattr(self, name), dtype=np.float64)
            if array.shape != (p,):
                raise InputError(f"ScalingFit.{name} has shape {array.shape}, expected ({p},)")
            object.__setattr__(self, name, array)
        for name in ("width", "depth", "tokens", "loss", "residuals"):
            array = np.array(getattr(self, name), dtype=np.float64)
            if array.shape != (n,):
                raise InputError(f"ScalingFit.{name} has shape {array.shape}, expected ({n},)")
            object.__setattr__(self, name, array)

    def value(self, name: str) -> float:
        """One fitted parameter (``"a_l"``, ``"L0"``...)."""
        return float(self.values[PARAMS.index(name)])

    def error(self, name: str) -> float:
        """Its standard error from the Jacobian."""
        return float(self.se[PARAMS.index(name)])

    @property
    def n_runs(self) -> int:
        """Runs fitted."""
        return len(self.loss)

    def term(self, name: str) -> np.ndarray:
        """One term of the fit at each run used: ``"m"``, ``"l"`` or ``"D"``."""
        x = {"m": self.width, "l": self.depth, "D": self.tokens}[name]
        return self.value(f"c_{name}") * x ** -self.value(f"a_{name}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (also the cache format)."""
        out: dict[str, Any] = {
            "source": self.source,
            "n_bootstrap": self.n_bootstrap,
            "n_total": self.n_total,
            "drop_highest": self.drop_highest,
            "depth_offset": self.depth_offset,
        }
        for name in ("values", "se", "bootstrap_se", "bootstrap_low", "bootstrap_high"):
            out[name] = dict(zip(PARAMS, finite_list(getattr(self, name)), strict=True))
        for name in ("width", "depth", "tokens", "loss", "residuals"):
            out[name] = finite_list(getattr(self, name))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScalingFit:
        """Inverse of :meth:`to_dict`."""
        per_param = {
            k: np.array([data[k][p] for p in PARAMS], dtype=np.float64)
            for k in ("values", "se", "bootstrap_se", "bootstrap_low", "bootstrap_high")
        }
        per_run = {
            k: np.array(data[k], dtype=np.float64)
            for k in ("width", "depth", "tokens", "loss", "residuals")
        }
        return cls(
            source=data["source"],
            n_bootstrap=int(data["n_bootstrap"]),
            n_total=int(data["n_total"]),
            drop_highest=int(data["drop_highest"]),
            depth_offset=int(data["depth_offset"]),
            **per_param,
            **per_run,
        )

    def summary(self) -> dict[str, dict[str, float | None]]:
        """``{param: {value, se, bootstrap_se}}`` for ``results.json``."""
        return {
            name: {
                "value": finite_or_none(self.values[i]),
                "se": finite_or_none(self.se[i]),
                "bootstrap_se": finite_or_none(self.bootstrap_se[i]),
            }
            for i, name in enumerate(PARAMS)
        }

    def figure(self) -> go.Figure:
        """The depth part of the loss against depth (log-log, with the fit) and the residuals."""
        from workbench.analyses.depth_ensemble import figures

        return figures.scaling_fit(self)


def fit_scaling_law(
    runs: ScalingRuns,
    *,
    drop_highest: int = 40,
    depth_offset: int = 2,
    n_bootstrap: int = 200,
    seed: int = 0,
) -> ScalingFit:
    """Fits ``L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0`` on ``log L``.

    Args:
        runs: From :func:`read_runs`.
        drop_highest: Highest-loss runs left out (the paper's 40).
        depth_offset: Depth is ``n_layers - depth_offset`` (the paper's 2).
        n_bootstrap: Bootstrap refits over resampled runs (0: none).
        seed: Seed of the bootstrap.

    Raises:
        InputError: Too few runs left to fit 7 parameters.
    """
    keep = runs.kept(drop_highest)
    x = np.stack([runs.width, runs.n_layers - depth_offset, runs.tokens], axis=1)[keep]
    y = runs.loss[keep]
    if len(y) < 2 * len(PARAMS):
        raise InputError(
            f"{len(y)} runs are left after dropping the {drop_highest} highest-loss ones; "
            f"the scaling law needs at least {2 * len(PARAMS)}"
        )
    fit = fit_log_power_law(x, y)

    def refit(idx: np.ndarray) -> np.ndarray:
        return fit_log_power_law(x[idx], y[idx], start=fit.theta).theta

    boot = bootstrap(refit, len(y), n_samples=n_bootstrap, seed=seed, size=len(PARAMS))
    transform = _to_values
    return ScalingFit(
        source=runs.source,
        values=transform(fit.theta),
        se=_value_se(fit.theta, fit.se),
        bootstrap_se=_spread(boot.samples, transform),
        bootstrap_low=_quantile(boot.samples, transform, 2.5),
        bootstrap_high=_quantile(boot.samples, transform, 97.5),
        n_bootstrap=len(boot.samples),
        n_total=len(runs.loss),
        drop_highest=drop_highest,
        depth_offset=depth_offset,
        width=x[:, 0],
        depth=x[:, 1],
        tokens=x[:, 2],
        loss=y,
        residuals=fit.residuals,
    )


def _to_values(theta: np.ndarray) -> np.ndarray:
    """``(log c, a, ...) -> (c, a, ...)``."""
    out = np.array(theta, dtype=np.float64)
    out[0:6:2] = np.exp(out[0:6:2])
    return out


def _value_se(theta: np.ndarray, se: np.ndarray) -> np.ndarray:
    """Standard errors of ``(c, a, ..., L0)``: ``se(c) = c se(log c)`` (delta method)."""
    out = np.array(se, dtype=np.float64)
    out[0:6:2] = np.exp(theta[0:6:2]) * se[0:6:2]
    return out


def _spread(samples: np.ndarray, transform: Any) -> np.ndarray:
    if len(samples) < 2:
        return np.full(len(PARAMS), np.nan)
    return np.apply_along_axis(transform, 1, samples).std(axis=0, ddof=1)


def _quantile(samples: np.ndarray, transform: Any, q: float) -> np.ndarray:
    if not len(samples):
        return np.full(len(PARAMS), np.nan)
    return np.percentile(np.apply_along_axis(transform, 1, samples), q, axis=0)
