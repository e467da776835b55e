"""The depth-ensemble study: why loss falls as 1/depth, measured on models, toys and a scaling law.

Reproduces *Inverse Depth Scaling From Most Layers Being Similar* (Liu, Kangaslahti, Liu & Gore,
arXiv 2602.05970, ICML 2026; code release ``liuyz0/DepthScaling``). The paper's claim: in LLMs
the part of the loss that depends on depth ``l`` falls as ``1/l``, because most layers make
similar, small, nearly orthogonal updates that average out errors like an ensemble, not because
they compose new features layer after layer or discretize smooth dynamics (an ODE).

Four parts, each one of the paper's lines of evidence:

1. **Layer geometry** of any model the hook files cover (``resid_pre.0`` and ``resid_post.l``):
   the step angle ``theta_l = angle(h_l, h_{l+1})``, the angle between successive updates
   ``dh_l`` and ``dh_{l+1}`` (near 90 degrees: independent updates; near 0: smooth dynamics),
   the update norms, the angle to the final state, the next-token loss by layer through the
   logit lens and a tuned lens, and the share of tokens that exit early.
2. **Layer skipping**: the loss change when each layer is removed (``skip()``), when contiguous
   blocks are removed, and when the middle layers are reversed or shuffled
   (:func:`workbench.interventions.reorder_layers`). An ensemble of similar layers tolerates
   reordering far better than removal.
3. **Teacher-student residual toys** (:mod:`.toys`): students of depths 4-32 learn a 128-layer
   teacher whose layers are *independent* (a target no smooth flow describes) or *tied* (one
   layer repeated: a discretized ODE). ``L = L0 + c / l^a`` is fitted to their held-out loss,
   with standard errors from the Jacobian and a bootstrap over held-out examples.
4. **The scaling law** ``L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0`` fitted to a CSV of runs
   (:mod:`.scaling`); on the paper's Chinchilla table it gives ``a_l ~ 1.1 ± 0.26``.

Our operationalizations, where the paper leaves a choice: angles are averaged over tokens (every
real token of every text); ``h_0`` is the first block's input and ``h_L`` the last block's output
(before the final norm); a token *exits early* when its lens top-1 equals the model's final top-1
at every layer from some layer below ``L/2`` on (the logit lens; the tuned lens's share is an
extra); the middle layers are all but the first and the last; the toys' increment angles of the
``results.json`` metrics are the teachers' (the regimes' definition), the students' are extras.
The CPU preset trains far less than the paper (see :data:`~.config.PRESETS` and the notebook).
The toys train and are measured on one CPU thread, so they do not change with the machine's core
count. The paper effects the default must show are ``study.CLAIMS`` (the Chinchilla depth exponent
near 1, the teachers' increment angles). The toys' exponents are no claim: at the CPU preset the
fitted order "tied steeper" (a = 1.20 / 1.33 against 0.60 / 0.58 on seeds 0 / 1) rests on the
fitted floor alone (L0 is 78-88% of the deepest tied student's loss and 0 for the independent
ones), while the plain log-log slopes of depths 4-32 are equal or reversed (0.60 / 0.60 and
0.58 / 0.47): four depths leave the three-parameter fit one degree of freedom.

Layout (every study has the same rooms):

* :mod:`.config`: :class:`DepthEnsembleConfig` and the toy presets;
* :mod:`.compute`, :mod:`.fitting`: pure steps (geometry, early exits, power-law fits);
* :mod:`.results`, :mod:`.toy_results`: frozen results with ``to_dict``/``from_dict``;
* :mod:`.figures`: the plotly builders;
* :mod:`.collect` (the language model) and :mod:`.toys` (the toy networks): the only places that
  load or train models;
* :mod:`.scaling`: the scaling CSV and its fit;
* :mod:`.study`: :func:`run` with a per-unit cache and :func:`save`; :mod:`.summary`: the
  ``results.json`` metrics (:data:`METRIC_KEYS`, :func:`metrics`).

Example::

    from workbench.analyses import depth_ensemble
    config = depth_ensemble.DepthEnsembleConfig(model="tiny-lm", toy_steps=500)
    result = depth_ensemble.run(config, cache_dir="runs/cache")
    result.figure("toy_depth").show()
    result.metrics()["chinchilla_alpha_depth"]
"""

from workbench.analyses.depth_ensemble.compute import (
    early_exit_fraction,
    exit_layers,
    fit_toy,
    layer_geometry,
)
from workbench.analyses.depth_ensemble.config import (
    BUILTIN_CSV,
    PRESETS,
    DepthEnsembleConfig,
    ToyPreset,
    parse_depths,
)
from workbench.analyses.depth_ensemble.fitting import fit_log_power_law
from workbench.analyses.depth_ensemble.results import (
    FIGURES,
    DepthEnsembleResult,
    LayerGeometry,
    LayerSkip,
    LensLoss,
    ModelResult,
)
from workbench.analyses.depth_ensemble.scaling import (
    PARAMS,
    ScalingFit,
    ScalingRuns,
    fit_scaling_law,
    read_runs,
)
from workbench.analyses.depth_ensemble.study import ANALYSIS, STUDY, check, run
from workbench.analyses.depth_ensemble.summary import CLAIMS, METRIC_KEYS
from workbench.analyses.depth_ensemble.toy_results import ToyFit, ToyResult, ToyStudent, ToyTeacher

__all__ = [
    "ANALYSIS",
    "BUILTIN_CSV",
    "CLAIMS",
    "FIGURES",
    "METRIC_KEYS",
    "PARAMS",
    "PRESETS",
    "STUDY",
    "DepthEnsembleConfig",
    "DepthEnsembleResult",
    "LayerGeometry",
    "LayerSkip",
    "LensLoss",
    "ModelResult",
    "ScalingFit",
    "ScalingRuns",
    "ToyFit",
    "ToyPreset",
    "ToyResult",
    "ToyStudent",
    "ToyTeacher",
    "check",
    "early_exit_fraction",
    "exit_layers",
    "fit_log_power_law",
    "fit_scaling_law",
    "fit_toy",
    "layer_geometry",
    "parse_depths",
    "read_runs",
    "run",
]
