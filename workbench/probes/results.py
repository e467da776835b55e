"""``ProbeSweepResult``: the tidy table of a probe sweep, its summary, figure and dict form."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

COLUMNS = ("site", "layer", "seed", "fold", "task", "accuracy", "n_train", "n_test", "n_iter")
"""Columns of :attr:`ProbeSweepResult.scores`, one row per fitted probe."""
SUMMARY_COLUMNS = (
    "site",
    "layer",
    "accuracy",
    "accuracy_lo",
    "accuracy_hi",
    "control",
    "control_lo",
    "control_hi",
    "selectivity",
    "selectivity_lo",
    "selectivity_hi",
)
CONFIDENCE = 0.95
_DTYPES = {
    "site": str,
    "layer": "Int64",
    "seed": "int64",
    "fold": "int64",
    "task": str,
    "accuracy": "float64",
    "n_train": "int64",
    "n_test": "int64",
    "n_iter": "int64",
}


def site_layer(site: str) -> int | None:
    """The layer index of a per-layer site name (``"resid_post.3"`` -> 3), else ``None``."""
    head, _, tail = site.rpartition(".")
    return int(tail) if head and tail.isdigit() else None


def interval(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and a two-sided Student-t confidence interval (``CONFIDENCE``) of ``values``."""
    from scipy.stats import t

    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = float(t.ppf(0.5 + CONFIDENCE / 2, len(values) - 1) * values.std(ddof=1))
    half /= math.sqrt(len(values))
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class ProbeSweepResult:
    """Cross-validated probe accuracy per site, with a control task and selectivity.

    Attributes:
        scores: Tidy table, one row per fitted probe (:data:`COLUMNS`); ``task`` is ``"probe"``
            or ``"control"``.
        probe: Which probe (``"linear"``, ``"mass_mean"`` or an estimator's class name).
        cv: Folds per seed.
        seeds: Repetitions of the cross-validation with new folds (and new control labels).
        control: ``"shuffled"``, ``"control_task"`` or ``None``.
        chance: Frequency of the most common label (the majority-class accuracy).
        n_rows: Rows probed per site.
        n_classes: Classes in the labels.
        labels: ``"row"`` or ``"text"``: how the labels were given.
        params: The remaining settings (for provenance).
    """

    scores: pd.DataFrame
    probe: str
    cv: int
    seeds: int
    control: str | None
    chance: float
    n_rows: int
    n_classes: int
    labels: str
    params: dict[str, Any]

    def __post_init__(self) -> None:
        missing = [c for c in COLUMNS if c not in self.scores.columns]
        if missing:
            raise ValueError(f"scores lacks columns {missing}")
        canonical = self.scores[list(COLUMNS)].reset_index(drop=True).astype(_DTYPES)
        object.__setattr__(self, "scores", canonical)
        tasks = 2 if self.control is not None else 1
        expected = len(self.sites) * self.seeds * self.cv * tasks
        if len(self.scores) != expected:
            raise ValueError(
                f"scores has {len(self.scores)} rows, expected {expected} "
                f"({len(self.sites)} sites x {self.seeds} seeds x {self.cv} folds x {tasks} tasks)"
            )

    @property
    def sites(self) -> list[str]:
        """Probed sites, in sweep order."""
        return list(dict.fromkeys(self.scores["site"]))

    def per_seed(self) -> pd.DataFrame:
        """Mean accuracy over folds for each (site, seed, task)."""
        return (
            self.scores.groupby(["site", "seed", "task"], sort=False)["accuracy"]
            .mean()
            .reset_index()
        )

    def summary(self) -> pd.DataFrame:
        """One row per site: accuracy, control accuracy and selectivity with intervals.

        Each value is the mean over seeds of the cross-validated accuracy (the mean over folds);
        intervals are Student-t 95% intervals over the seeds (over the folds when ``seeds == 1``).
        Selectivity is computed per seed (accuracy minus control accuracy on the same folds), then
        summarized the same way. Without a control, its columns are NaN.
        """
        rows = []
        for site in self.sites:
            here = self.scores[self.scores["site"] == site]
            unit = "fold" if self.seeds == 1 else "seed"
            task = here[here["task"] == "probe"].groupby(unit)["accuracy"].mean()
            row: dict[str, Any] = {"site": site, "layer": site_layer(site)}
            row["accuracy"], row["accuracy_lo"], row["accuracy_hi"] = interval(task.to_numpy())
            if self.control is None:
                for key in SUMMARY_COLUMNS[5:]:
                    row[key] = math.nan
            else:
                ctrl = here[here["task"] == "control"].groupby(unit)["accuracy"].mean()
                ctrl = ctrl.reindex(task.index)
                row["control"], row["control_lo"], row["control_hi"] = interval(ctrl.to_numpy())
                sel = task.to_numpy() - ctrl.to_numpy()
                row["selectivity"], row["selectivity_lo"], row["selectivity_hi"] = interval(sel)
            rows.append(row)
        return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))

    def __repr__(self) -> str:
        from workbench.display.results import probe_repr

        return probe_repr(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """HTML card, short text and JSON for notebooks (see :mod:`workbench.display`)."""
        from workbench.display.results import probe_bundle

        return probe_bundle(self, include, exclude)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the settings, ``summary`` (:meth:`summary` as lists) and ``scores``."""
        summary = self.summary()
        out: dict[str, Any] = {
            "probe": self.probe,
            "cv": self.cv,
            "seeds": self.seeds,
            "control": self.control,
            "chance": self.chance,
            "n_rows": self.n_rows,
            "n_classes": self.n_classes,
            "labels": self.labels,
            "params": dict(self.params),
        }
        out["summary"] = {c: [_jsonable(v) for v in summary[c]] for c in SUMMARY_COLUMNS}
        out["scores"] = {c: [_jsonable(v) for v in self.scores[c]] for c in COLUMNS}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeSweepResult:
        """Rebuilds a result from :meth:`to_dict`."""
        scores = pd.DataFrame({c: data["scores"][c] for c in COLUMNS})
        return cls(
            scores=scores,
            **{
                k: data[k]
                for k in (
                    "probe",
                    "cv",
                    "seeds",
                    "control",
                    "chance",
                    "n_rows",
                    "n_classes",
                    "labels",
                    "params",
                )
            },
        )

    def figure_kinds(self) -> list[str]:
        """The kinds :meth:`figure` draws: accuracy, control and selectivity by layer."""
        return ["layers"]

    def figure(self, kind: str = "layers") -> Any:
        """Accuracy, control accuracy and selectivity by layer (or site), with 95% intervals.

        Args:
            kind: ``"layers"`` (the only kind).
        """
        import plotly.graph_objects as go

        from workbench.errors import check_figure_kind
        from workbench.figures import OKABE_ITO, TWO_COLUMN, style

        check_figure_kind(kind, self.figure_kinds())
        summary = self.summary()
        layers = summary["layer"]
        by_layer = layers.notna().all() and summary["site"].str.rpartition(".")[0].nunique() == 1
        x = layers.astype(int).tolist() if by_layer else summary["site"].tolist()
        fig = go.Figure()
        series = [("accuracy", "probe accuracy", OKABE_ITO[0], "solid")]
        if self.control is not None:
            series += [
                ("control", f"control ({self.control})", OKABE_ITO[1], "dash"),
                ("selectivity", "selectivity", OKABE_ITO[2], "solid"),
            ]
        for key, name, color, dash in series:
            mean = summary[key].to_numpy()
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=mean,
                    name=name,
                    mode="lines+markers",
                    line={"color": color, "dash": dash},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": np.nan_to_num(summary[f"{key}_hi"].to_numpy() - mean),
                        "arrayminus": np.nan_to_num(mean - summary[f"{key}_lo"].to_numpy()),
                        "thickness": 1,
                    },
                )
            )
        fig.add_hline(
            y=self.chance,
            line={"color": "#888", "dash": "dot", "width": 1},
            annotation_text="majority class",
            annotation_position="top left",
        )
        unit = "seeds" if self.seeds > 1 else "folds"
        fig.update_layout(
            xaxis={"title": "layer" if by_layer else "site", "zeroline": False},
            yaxis_title="accuracy / selectivity",
            legend={"orientation": "h", "y": -0.25},
        )
        return style(
            fig,
            title=f"{self.probe} probe, {self.cv}-fold CV (95% CI over {unit})",
            width=TWO_COLUMN // 2 + 120,
        )


def _jsonable(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.integer | int):
        return int(value)
    if isinstance(value, np.floating | float):
        return None if math.isnan(value) else float(value)
    return value
