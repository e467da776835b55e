"""The concept-oscillation study's ``results.json`` metrics and its claims.

:data:`METRIC_KEYS`, :data:`CLAIMS` and :func:`metrics`, a pure function of a
:class:`~workbench.analyses.concept_oscillation.results.ConceptOscillationResult` (its
``compute_metrics``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.analyses.concept_oscillation.config import TOY
from workbench.analyses.concept_oscillation.toy import ToySpec, tier_of
from workbench.arrays import finite_or_none
from workbench.claims import Claim
from workbench.errors import InputError

if TYPE_CHECKING:
    from workbench.analyses.concept_oscillation.readout import Readout
    from workbench.analyses.concept_oscillation.results import ConceptOscillationResult

METRIC_KEYS = (
    "follow_slope",
    "balance_point",
    "balance_point_ci",
    "oscillations_ambiguous",
    "oscillations_clear",
    "oscillations_control",
    "n_ambiguous",
    "n_clear",
    "probe_best_layer",
    "probe_best_accuracy",
    "follow_monotone",
    "follow_binned",
    "oscillation_ratio",
    "n_conflicts",
    "n_controls",
    "n_follow_a",
    "n_follow_b",
    "n_other",
    "probe_by_layer",
    "oscillation_ratio_ci",
    "oscillation_lens",
    "n_layers",
    "decision_layer_mean",
    "decided_at_first_layer",
    "training_steps",
    "training_seconds",
    "toy_excess_kl",
    "toy_bayes_agreement",
    "controls_answer_b",
    "controls_answer_b_by_tier",
)


CLAIMS = (
    Claim(
        "P(follow A) falls with relative uncertainty",
        "follow_slope",
        "<",
        0.0,
        paper="Fig. 2: decreasing for six models",
    ),
    Claim("the follow curve is monotone", "follow_monotone", ">=", 1.0),
    Claim(
        "ambiguous conflicts oscillate at least 1.5x as often as clear ones",
        "oscillations_ambiguous",
        ">=",
        "oscillations_clear",
        factor=1.5,
        paper="1.43 vs 0.71 (LLaVA-1.6-7B)",
    ),
    Claim(
        "controls oscillate least",
        "oscillations_control",
        "<",
        "oscillations_clear",
        paper="0.35 for controls",
    ),
)
"""The paper effects the default must show (see :mod:`workbench.claims`)."""


def _r4(value: float | None) -> float | None:
    return finite_or_none(value, 4)


def metrics(result: ConceptOscillationResult) -> dict[str, Any]:
    """The ``results.json`` metrics block; its keys are :data:`METRIC_KEYS`."""
    follow, osc, probe = result.follow, result.oscillations, result.probe
    conflicts, controls = result.run.conflicts, result.run.controls
    decided = decision_layers(conflicts.lens_top1, conflicts.top1)
    training = result.training
    return {
        "follow_slope": _r4(follow.slope),
        "balance_point": _r4(follow.balance_point),
        "balance_point_ci": None
        if follow.balance_ci is None
        else [_r4(v) for v in follow.balance_ci],
        "oscillations_ambiguous": _r4(osc.mean("ambiguous")),
        "oscillations_clear": _r4(osc.mean("clear")),
        "oscillations_control": _r4(osc.mean("control")),
        "n_ambiguous": len(osc.ambiguous),
        "n_clear": len(osc.clear),
        "probe_best_layer": None if probe is None else probe.best_layer,
        "probe_best_accuracy": None if probe is None else _r4(probe.best_accuracy),
        "follow_monotone": follow.monotone,
        "follow_binned": {
            "dh": [_r4(v) for v in follow.bin_centers],
            "p_follow_a": [_r4(v) for v in follow.bin_rates],
            "n": follow.bin_counts.tolist(),
        },
        "oscillation_ratio": _r4(osc.ratio),
        "n_conflicts": conflicts.n,
        "n_controls": result.run.controls.n,
        "n_follow_a": int(conflicts.follow_a.sum()),
        "n_follow_b": int(conflicts.follow_b.sum()),
        "n_other": int(conflicts.n - (conflicts.follow_a | conflicts.follow_b).sum()),
        "probe_by_layer": None if probe is None else [_r4(v) for v in probe.accuracy],
        "oscillation_ratio_ci": None
        if result.ratio_ci is None
        else [_r4(v) for v in result.ratio_ci],
        "oscillation_lens": result.lens,
        "n_layers": len(conflicts.layers),
        "decision_layer_mean": _r4(decided.mean()) if len(decided) else None,
        "decided_at_first_layer": _r4((decided == 0).mean()) if len(decided) else None,
        "training_steps": None if training is None else training.get("steps"),
        "training_seconds": None if training is None else training.get("seconds"),
        "toy_excess_kl": _r4(training.get("excess_kl")) if training else None,
        "toy_bayes_agreement": _r4(training.get("bayes_agreement")) if training else None,
        "controls_answer_b": _r4((controls.top1 == controls.y_b).mean()) if controls.n else None,
        "controls_answer_b_by_tier": _controls_by_tier(controls)
        if result.run.model == TOY
        else None,
    }


def _controls_by_tier(controls: Readout) -> list[float] | None:
    """Share of the toy's controls answered ``Y_b``, per tier of channel B (its hops minus one)."""
    tiers = [tier_of(case_id) for case_id in controls.ids]
    if not controls.n or any(t is None for t in tiers):
        return None
    rates = answer_rate_by_group(
        controls.top1, controls.y_b, [t[1] for t in tiers if t is not None]
    )
    return [_r4(rates.get(tier, float("nan"))) for tier in range(len(ToySpec().eps_b))]


def decision_layers(lens_top1: Any, final: Any) -> np.ndarray:
    """Per case, the first layer from which the lens's top-1 is the final answer to the end.

    ``0`` means the lens shows the decision from the first layer on; ``n_layers`` would mean
    never (the last layer's lens is the model's output, so at most ``n_layers - 1``).

    Args:
        lens_top1: ``(n_layers, n)`` top-1 token id per layer.
        final: ``(n,)`` the model's answer.
    """
    lens_top1 = np.asarray(lens_top1, dtype=np.int64)
    same = lens_top1 == np.asarray(final, dtype=np.int64)[None]
    # layers after the last disagreement: count trailing agreements from the top
    trailing = np.cumprod(same[::-1], axis=0).sum(0)
    return (len(lens_top1) - trailing).astype(np.int64)


def answer_rate_by_group(answer: Any, expected: Any, groups: Any) -> dict[int, float]:
    """Share of cases whose ``answer`` is ``expected``, per value of ``groups`` (sorted).

    Args:
        answer: ``(n,)`` the model's answer (token ids).
        expected: ``(n,)`` the answer looked for (e.g. ``Y_b`` of each control).
        groups: ``(n,)`` integer group of each case (e.g. the toy's tier of channel B).

    Returns:
        ``{group: share}`` over the groups present.
    """
    answer = np.asarray(answer, dtype=np.int64)
    expected = np.asarray(expected, dtype=np.int64)
    groups = np.asarray(groups, dtype=np.int64)
    if not answer.shape == expected.shape == groups.shape or answer.ndim != 1:
        raise InputError(
            f"answer {answer.shape}, expected {expected.shape} and groups {groups.shape} must be "
            "(n,) alike"
        )
    hit = answer == expected
    return {int(g): float(hit[groups == g].mean()) for g in np.unique(groups)}
