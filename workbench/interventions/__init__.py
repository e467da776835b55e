"""Interventions: edit activations during a forward pass, and measure what the edit does.

Reading activations shows what a model represents; editing them shows what it *uses*. If
adding a direction to the residual stream changes the output in the expected way (steering,
Turner et al., 2023, arXiv 2308.10248), if removing a subspace removes a behaviour (directional
ablation, Arditi et al., 2024, arXiv 2406.11717), or if copying one activation from a clean run
into a corrupt run restores the clean answer (activation patching, Meng et al., 2022, arXiv
2202.05262), the representation is causally involved, not merely decodable.

Usage::

    from workbench.interventions import intervene, add, ablate, project_out, patch, skip, apply

    with intervene(subject, {"resid_post.3": add(vector, scale=4.0),
                             "mlp_out.1": [ablate("zero", positions="last")],
                             "resid_post.5": skip()}):
        subject.model.generate(...)      # forward, generate, capture, lenses, backward: all edited

Each edit is a small frozen object with the protocol ``edit(hidden, ctx) -> Tensor`` (see
:mod:`~workbench.interventions.edits`); several edits on one site compose in the order given.
The hooks sit on the same resolved sites as :func:`~workbench.capturing` (``hooks/*.toml``, read
through :mod:`workbench.hooking`) and are removed when the block exits, also on an exception.
Token positions are counted in each text from its first real token, whatever the padding;
under cached generation an edit reaches each position once, in the pass that computes it (see
:mod:`~workbench.interventions.positions`).

Helpers: :func:`steering_vector` (difference of means) and :func:`activation_patching` (a
sites x positions sweep returning a :class:`PatchingResult` with a tidy ``.table`` and a
heatmap ``.figure()``).
"""

from workbench.interventions.edits import (
    Ablate,
    Add,
    Apply,
    Edit,
    EditContext,
    Patch,
    ProjectOut,
    Skip,
    ablate,
    add,
    apply,
    patch,
    project_out,
    skip,
)
from workbench.interventions.patching import (
    LogitDiff,
    LogProb,
    PatchingResult,
    activation_patching,
    logit_diff,
)
from workbench.interventions.positions import Positions, TokenPass
from workbench.interventions.runtime import Intervention, intervene
from workbench.interventions.steering import steering_vector

__all__ = [
    "Ablate",
    "Add",
    "Apply",
    "Edit",
    "EditContext",
    "Intervention",
    "LogProb",
    "LogitDiff",
    "Patch",
    "PatchingResult",
    "Positions",
    "ProjectOut",
    "Skip",
    "TokenPass",
    "ablate",
    "activation_patching",
    "add",
    "apply",
    "intervene",
    "logit_diff",
    "patch",
    "project_out",
    "skip",
    "steering_vector",
]
