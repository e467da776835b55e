"""Claims: the paper effects a study's default must show, written as data and checked on every run.

A finding is worth reporting when it holds over seeds and CPUs, not in one lucky training. So
each study declares its paper effects beside its metric keys, as :class:`Claim` records: a name,
the metric (a key of the study's ``metrics()``, or a dotted path into it), a comparison and a
threshold, which is a number or another metric times a factor. Every ``results.json`` then carries
a ``claims`` list (name, value, threshold, holds), and ``workbench replicate`` reads those lists
over seeds and CPU kernel levels to say whether each claim is *robust* or *fragile*
(:func:`verdict`).

Example::

    CLAIMS = (
        Claim("detects compromised agents", "f1_sync", ">=", 0.9, paper="Table 2: F1 0.94"),
        Claim("beats the text monitor", "f1_sync", ">", "baseline_f1_text_sync"),
        Claim("ambiguous oscillate more", "osc_ambiguous", ">=", "osc_clear", factor=1.5),
    )
    evaluate(CLAIMS, metrics)   # -> ClaimTable, shown as a table in a notebook

A claim whose metric was not measured in a run (``None``, or a path that is absent) has ``holds``
``None`` there: it is neither a pass nor a fail of that run, but it can never make a claim robust.

The *margin* of a claim is how far the value lies on the right side of its threshold (``value -
threshold`` for ``>=`` and ``>``, ``threshold - value`` for ``<=`` and ``<``); ``holds`` is
``margin >= 0`` (or ``> 0`` for the strict comparisons). Margins make claims with a metric-valued
threshold (``a >= 1.5 * b``) comparable across runs, which is what the replication's interval is
computed on.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from workbench.arrays import finite_or_none

Op = Literal[">=", ">", "<=", "<"]
OPS: tuple[str, ...] = (">=", ">", "<=", "<")
ROBUST_SHARE = 0.9
"""A claim is robust when it holds in at least this share of runs (and its interval agrees)."""


def lookup(metrics: Mapping[str, Any], path: str) -> float | None:
    """The number at ``path`` in ``metrics``; ``None`` when absent, not a number or not finite.

    Args:
        metrics: A study's ``metrics()`` block.
        path: A key, or a dotted path through nested dicts and lists (``"f1_by_layer.3"``,
            ``"per_layer.-1.mean_cosine"``; list indices may be negative).
    """
    value: Any = metrics
    for part in path.split("."):
        if isinstance(value, Mapping):
            if part not in value:
                return None
            value = value[part]
        elif isinstance(value, list | tuple):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                return None
        else:
            return None
    if not isinstance(value, int | float):  # bools count as 1 and 0 ("follow curve is monotone")
        return None
    return finite_or_none(value)


@dataclass(frozen=True)
class Claim:
    """One paper effect, as data.

    Attributes:
        name: Short and readable, e.g. ``"frequent tokens sit nearer the centroid"``.
        metric: The metric key (or dotted path) the claim is about.
        op: ``">="``, ``">"``, ``"<="`` or ``"<"``.
        threshold: A number, or the key (path) of another metric.
        factor: Multiplies a metric-valued threshold (``a >= 1.5 * b``); must be 1 for numbers.
        minus: Optional metric subtracted from :attr:`metric` first (a difference of two).
        paper: The paper's figure or number for reference.
    """

    name: str
    metric: str
    op: Op
    threshold: float | str
    factor: float = 1.0
    minus: str | None = None
    paper: str = ""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"claim {self.name!r}: op {self.op!r} is not one of {OPS}")
        if not isinstance(self.threshold, str) and self.factor != 1.0:
            raise ValueError(f"claim {self.name!r}: factor applies only to a metric threshold")

    def to_dict(self) -> dict[str, Any]:
        """The claim's definition as data (kept in ``results.json`` so any run can be re-judged)."""
        return {
            "metric": self.metric,
            "op": self.op,
            "threshold": self.threshold,
            "factor": self.factor,
            "minus": self.minus,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Claim:
        """The claim of a ``results.json`` ``claims`` entry (see :meth:`ClaimResult.to_dict`).

        Raises:
            ValueError: The entry has no usable ``definition``.
        """
        try:
            d = record["definition"]
            return cls(
                str(record["name"]),
                str(d["metric"]),
                d["op"],
                d["threshold"],
                float(d.get("factor", 1.0)),
                d.get("minus"),
                str(record.get("paper", "")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a claim record: {record!r}") from exc

    def metrics_used(self) -> tuple[str, ...]:
        """The metric paths this claim reads."""
        used = [self.metric]
        if self.minus:
            used.append(self.minus)
        if isinstance(self.threshold, str):
            used.append(self.threshold)
        return tuple(used)

    def describe(self) -> str:
        """The claim as a formula, e.g. ``f1_sync >= 0.9`` or ``a >= 1.5 * b``."""
        left = f"{self.metric} - {self.minus}" if self.minus else self.metric
        if isinstance(self.threshold, str):
            right = self.threshold if self.factor == 1.0 else f"{self.factor:g} * {self.threshold}"
        else:
            right = f"{self.threshold:g}"
        return f"{left} {self.op} {right}"

    def check(self, metrics: Mapping[str, Any]) -> ClaimResult:
        """Evaluates the claim on one run's metrics."""
        value = lookup(metrics, self.metric)
        if value is not None and self.minus:
            other = lookup(metrics, self.minus)
            value = None if other is None else value - other
        if isinstance(self.threshold, str):
            base = lookup(metrics, self.threshold)
            threshold = None if base is None else self.factor * base
        else:
            threshold = float(self.threshold)
        margin = holds = None
        if value is not None and threshold is not None:
            margin = value - threshold if self.op in (">=", ">") else threshold - value
            holds = margin > 0 if self.op in (">", "<") else margin >= 0
        return ClaimResult(self, value, threshold, margin, holds)


@dataclass(frozen=True)
class ClaimResult:
    """A claim checked on one run.

    Attributes:
        claim: The claim.
        value: The metric's value (``None``: not measured).
        threshold: The threshold's value in this run.
        margin: How far ``value`` lies on the right side of ``threshold`` (negative: wrong side).
        holds: Whether the claim holds (``None``: not measured, or not evaluable).
        not_evaluable: Why the claim cannot be judged on this run although its metrics were
            measured (a training it depends on missed its criterion), else ``None``.
    """

    claim: Claim
    value: float | None
    threshold: float | None
    margin: float | None
    holds: bool | None
    not_evaluable: str | None = None

    @property
    def status(self) -> str:
        """``holds``, ``fails``, ``not measured`` or ``not evaluable``."""
        if self.not_evaluable:
            return "not evaluable"
        return {True: "holds", False: "fails", None: "not measured"}[self.holds]

    def to_dict(self) -> dict[str, Any]:
        """The ``results.json`` entry: the claim's outcome and its definition (to re-judge it)."""
        extra = {"not_evaluable": self.not_evaluable} if self.not_evaluable else {}
        return {
            "name": self.claim.name,
            "claim": self.claim.describe(),
            "value": _r6(self.value),
            "threshold": _r6(self.threshold),
            "margin": _r6(self.margin),
            "holds": self.holds,
            "paper": self.claim.paper,
            "definition": self.claim.to_dict(),
            **extra,
        }


@dataclass(frozen=True)
class ClaimTable:
    """The claims of one run; shows itself as a table in a notebook and as lines in a terminal."""

    results: tuple[ClaimResult, ...]

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def all_hold(self) -> bool:
        """Whether every claim was measured and holds."""
        return all(r.holds is True for r in self.results)

    def failed(self) -> list[str]:
        """Names of the claims that do not hold or were not measured."""
        return [r.claim.name for r in self.results if r.holds is not True]

    def to_list(self) -> list[dict[str, Any]]:
        """The ``claims`` list of ``results.json``."""
        return [r.to_dict() for r in self.results]

    def not_evaluable(self, reasons: Mapping[str, str]) -> ClaimTable:
        """The table with the named claims marked not evaluable (``holds`` and margin ``None``).

        Args:
            reasons: Claim name to why it cannot be judged on this run.
        """
        return ClaimTable(
            tuple(
                replace(r, margin=None, holds=None, not_evaluable=reasons[r.claim.name])
                if r.claim.name in reasons
                else r
                for r in self.results
            )
        )

    def __repr__(self) -> str:
        held = sum(r.holds is True for r in self.results)
        lines = [f"{held}/{len(self.results)} claims hold"]
        for r in self.results:
            mark = "FAILS" if r.holds is False else r.status
            lines.append(
                f"  {mark:<12} {r.claim.name}: {_fmt(r.value)} {r.claim.op} {_fmt(r.threshold)}"
            )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = "".join(
            "<tr>"
            f"<td>{html.escape(r.claim.name)}</td>"
            f"<td><code>{html.escape(r.claim.describe())}</code></td>"
            f"<td>{_fmt(r.value)}</td><td>{_fmt(r.threshold)}</td>"
            f"<td style='color:{_COLOURS[r.holds]};font-weight:600'>"
            f"{r.status}</td>"
            f"<td>{html.escape(r.claim.paper)}</td>"
            "</tr>"
            for r in self.results
        )
        head = "".join(
            f"<th>{h}</th>" for h in ("claim", "formula", "value", "threshold", "", "paper")
        )
        return (
            "<table style='border-collapse:collapse'>"
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )


_COLOURS = {True: "#1a7f37", False: "#cf222e", None: "#6e7781"}


def evaluate(claims: Iterable[Claim], metrics: Mapping[str, Any]) -> ClaimTable:
    """Checks every claim on one run's metrics (a study's ``metrics(result)``)."""
    return ClaimTable(tuple(c.check(metrics) for c in claims))


def check_claims(claims: Sequence[Claim], metric_keys: Sequence[str]) -> None:
    """Raises ``ValueError`` when a claim reads a metric the study does not report.

    Args:
        claims: A study's ``CLAIMS``.
        metric_keys: Its ``METRIC_KEYS`` (the first part of each path must be one of them).
    """
    for claim in claims:
        for path in claim.metrics_used():
            if path.split(".")[0] not in metric_keys:
                raise ValueError(f"claim {claim.name!r} reads {path!r}, not a metric of the study")


@dataclass(frozen=True)
class Summary:
    """Mean, standard deviation, 95% interval of the mean, min and max of some numbers.

    Attributes:
        n: How many numbers (``None`` values are left out and counted in ``missing``).
        mean: Their mean.
        sd: Their sample standard deviation (0 for one number).
        ci95: Student-t 95% interval of the mean (``(mean, mean)`` for one number).
        min: The smallest.
        max: The largest.
        missing: How many were ``None``.
    """

    n: int
    mean: float | None
    sd: float | None
    ci95: tuple[float, float] | None
    min: float | None
    max: float | None
    missing: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        ci = None if self.ci95 is None else [_r6(self.ci95[0]), _r6(self.ci95[1])]
        return {
            "n": self.n,
            "mean": _r6(self.mean),
            "sd": _r6(self.sd),
            "ci95": ci,
            "min": _r6(self.min),
            "max": _r6(self.max),
            "missing": self.missing,
        }


def summarize(values: Iterable[float | None]) -> Summary:
    """The :class:`Summary` of ``values`` (``None`` values counted as missing)."""
    values = list(values)
    nums = [float(v) for v in values if v is not None]
    missing = len(values) - len(nums)
    if not nums:
        return Summary(0, None, None, None, None, None, missing)
    mean = statistics.fmean(nums)
    if len(nums) == 1:
        return Summary(1, mean, 0.0, (mean, mean), mean, mean, missing)
    sd = statistics.stdev(nums)
    half = _t975(len(nums) - 1) * sd / math.sqrt(len(nums))
    return Summary(len(nums), mean, sd, (mean - half, mean + half), min(nums), max(nums), missing)


def _t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim over many runs.

    Attributes:
        claim: The claim.
        n: Runs where it was measured.
        held: Runs where it holds.
        missing: Runs where it was not measured.
        margin: Summary of the margins over the measured runs.
        value: Summary of the values.
        verdict: ``robust`` (holds in at least :data:`ROBUST_SHARE` of all runs, measured in
            every one, and the mean margin's 95% interval lies on the right side of zero) or
            ``fragile``.
    """

    claim: Claim
    n: int
    held: int
    missing: int
    margin: Summary
    value: Summary
    verdict: Literal["robust", "fragile"]

    @property
    def share(self) -> float:
        """Share of all runs (measured or not) in which the claim holds."""
        total = self.n + self.missing
        return self.held / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``replication.json``)."""
        return {
            "name": self.claim.name,
            "claim": self.claim.describe(),
            "paper": self.claim.paper,
            "runs": self.n + self.missing,
            "held": self.held,
            "missing": self.missing,
            "share": _r6(self.share),
            "value": self.value.to_dict(),
            "margin": self.margin.to_dict(),
            "verdict": self.verdict,
        }


def verdict(
    claim: Claim, runs: Sequence[Mapping[str, Any]], not_evaluable: Sequence[bool] = ()
) -> ClaimVerdict:
    """Whether ``claim`` replicates over ``runs`` (each a run's ``metrics`` block).

    Args:
        claim: The claim.
        runs: Each run's metrics.
        not_evaluable: Per run, whether the run recorded the claim as not evaluable (a training
            it depends on missed its criterion): such a run counts as not measured, so the claim
            cannot be robust.
    """
    checked = [claim.check(m) for m in runs]
    checked = [
        replace(r, margin=None, holds=None, not_evaluable="not evaluable")
        if i < len(not_evaluable) and not_evaluable[i]
        else r
        for i, r in enumerate(checked)
    ]
    measured = [r for r in checked if r.holds is not None]
    held = sum(r.holds is True for r in measured)
    margin = summarize(r.margin for r in measured)
    value = summarize(r.value for r in measured)
    missing = len(checked) - len(measured)
    strict = claim.op in (">", "<")
    interval_ok = margin.ci95 is not None and (
        margin.ci95[0] > 0 if strict else margin.ci95[0] >= 0
    )
    robust = (
        bool(checked)
        and missing == 0
        and held >= ROBUST_SHARE * len(checked)
        and interval_ok
        and len(measured) >= 2
    )
    return ClaimVerdict(
        claim, len(measured), held, missing, margin, value, "robust" if robust else "fragile"
    )


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def _r6(x: float | None) -> float | None:
    return finite_or_none(x, 6)
