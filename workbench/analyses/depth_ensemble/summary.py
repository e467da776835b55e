"""The depth-ensemble study's ``results.json`` metrics and its claims.

:data:`METRIC_KEYS`, :data:`CLAIMS` and :func:`metrics`. The first ten keys come first (per-layer
step and increment angles and single-layer skip deltas of the model, its early-exit share, the
toys' depth exponents and their teachers' increment angles, the Chinchilla refit's depth exponent
and its standard error), then extras. A part that did not run (``model="none"``, an encoder without
a head, an empty ``scaling_csv``) reports ``None``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.arrays import finite_list, finite_or_none
from workbench.claims import Claim

if TYPE_CHECKING:
    from workbench.analyses.depth_ensemble.results import DepthEnsembleResult

METRIC_KEYS = (
    "step_angle_deg",
    "increment_angle_deg",
    "layer_skip_delta_loss",
    "early_exit_fraction",
    "alpha_independent",
    "alpha_tied",
    "increment_angle_independent_deg",
    "increment_angle_tied_deg",
    "chinchilla_alpha_depth",
    "chinchilla_alpha_depth_se",
    # extras
    "angle_to_final_deg",
    "update_norm",
    "logit_lens_loss",
    "tuned_lens_loss",
    "model_loss",
    "early_exit_fraction_tuned",
    "block_skip_delta_loss",
    "reverse_middle_delta_loss",
    "shuffle_middle_delta_loss",
    "alpha_independent_se",
    "alpha_tied_se",
    "toy_loss",
    "toy_loglog_slope",
    "student_increment_angle_deg",
    "teacher_entropy",
    "chinchilla_fit",
)
"""The keys of :func:`metrics` (the ``metrics`` block of ``results.json``): the issue's ten first,
then extras."""


CLAIMS = (
    Claim(
        "loss falls with depth as a power near 1/depth (Chinchilla refit)",
        "chinchilla_alpha_depth",
        ">=",
        0.5,
        paper="a_l = 1.2 ± 0.3",
    ),
    Claim(
        "the depth exponent is nearer 1 (ensemble averaging) than 2 (a discretized ODE)",
        "chinchilla_alpha_depth",
        "<=",
        1.5,
        paper="a_l = 1.2 ± 0.3; smooth dynamics would fall as 1/depth^2",
    ),
    Claim(
        "independent layers make near-orthogonal updates",
        "increment_angle_independent_deg",
        ">=",
        80.0,
        paper="~90 degrees",
    ),
    Claim(
        "tied layers' updates are nearly parallel (smooth dynamics)",
        "increment_angle_tied_deg",
        "<=",
        10.0,
        paper="tied teacher: a discretized ODE",
    ),
)
"""The paper effects the default must show (see :mod:`workbench.claims`)."""


def metrics(result: DepthEnsembleResult) -> dict[str, Any]:
    """The ``results.json`` metrics block; its keys are :data:`METRIC_KEYS`."""
    model, toy, scaling = result.model, result.toys, result.scaling
    geometry = model.geometry if model else None
    lens = model.lens if model else None
    skip = model.skip if model else None

    def alpha(kind: str, attr: str = "a") -> float | None:
        fit = toy.fit(kind)
        return None if fit is None else finite_or_none(getattr(fit, attr))

    def teacher_angle(kind: str) -> float | None:
        teacher = toy.teacher(kind)
        return None if teacher is None else finite_or_none(teacher.geometry.mean_increment_angle())

    blocks = {}
    if skip is not None:
        for size, start, delta in zip(
            skip.block_sizes, skip.block_starts, skip.block_deltas, strict=True
        ):
            blocks[f"{start}-{start + size - 1}"] = finite_or_none(delta)
    return {
        "step_angle_deg": finite_list(geometry.step_angle) if geometry else None,
        "increment_angle_deg": finite_list(geometry.increment_angle) if geometry else None,
        "layer_skip_delta_loss": finite_list(skip.single) if skip else None,
        "early_exit_fraction": finite_or_none(lens.early_exit_fraction) if lens else None,
        "alpha_independent": alpha("independent"),
        "alpha_tied": alpha("tied"),
        "increment_angle_independent_deg": teacher_angle("independent"),
        "increment_angle_tied_deg": teacher_angle("tied"),
        "chinchilla_alpha_depth": scaling.value("a_l") if scaling else None,
        "chinchilla_alpha_depth_se": scaling.error("a_l") if scaling else None,
        "angle_to_final_deg": finite_list(geometry.angle_to_final) if geometry else None,
        "update_norm": finite_list(geometry.update_norm) if geometry else None,
        "logit_lens_loss": finite_list(lens.logit) if lens else None,
        "tuned_lens_loss": finite_list(lens.tuned) if lens and lens.tuned is not None else None,
        "model_loss": finite_or_none(skip.baseline) if skip else None,
        "early_exit_fraction_tuned": lens.early_exit_fraction_tuned if lens else None,
        "block_skip_delta_loss": blocks or None,
        "reverse_middle_delta_loss": finite_or_none(skip.reverse) if skip else None,
        "shuffle_middle_delta_loss": finite_or_none(skip.shuffle_mean()) if skip else None,
        "alpha_independent_se": alpha("independent", "a_bootstrap_se"),
        "alpha_tied_se": alpha("tied", "a_bootstrap_se"),
        "toy_loss": {
            f.teacher: {str(d): finite_or_none(v) for d, v in zip(f.depths, f.losses, strict=True)}
            for f in toy.fits
        },
        "toy_loglog_slope": {f.teacher: finite_or_none(f.loglog_slope) for f in toy.fits},
        "student_increment_angle_deg": {
            t.kind: {
                str(s.depth): finite_or_none(s.geometry.mean_increment_angle())
                for s in toy.students_of(t.kind)
            }
            for t in toy.teachers
        },
        "teacher_entropy": {t.kind: t.entropy for t in toy.teachers},
        "chinchilla_fit": scaling.summary() if scaling else None,
    }
