"""The readouts study: what each layer predicts (lenses), encodes (probes) and controls (steering).

The workbench's second layer, shown on one model in one notebook:

1. **Lenses** (:mod:`workbench.lens`): the residual stream after every block read out as a
   next-token distribution by the logit lens (nostalgebraist 2020), the last-block lens and the
   tuned lens (Belrose et al. 2023, arXiv 2303.08112), on held-out text: KL to the model's own
   distribution and next-token loss by layer. The tuned lens is trained on the texts *before* the
   held-out ones; it should sit below the logit lens at every layer but the last.
2. **Probes** (:mod:`workbench.probes`): a linear probe per layer for a property read off the text
   itself (does the next token start a new word; the class of a token's first character), with
   Hewitt & Liang's control task (a random label per token type, arXiv 1909.03368) and
   selectivity = accuracy minus control accuracy.
3. **Steering** (:mod:`workbench.interventions`): the difference of means between positions whose
   next token starts a word and the others, added to a middle layer's output, should raise the
   next-token probability mass on word-starting tokens; random vectors of the same norm should not.

Our operationalizations: the probe labels and the steering readout are derived from the token
strings (a piece that starts with a space marker starts a word), so no annotation is needed; the
steering effect is the mean change of that probability mass over held-out positions.

Layout as every study: :mod:`.config`, :mod:`.compute`, :mod:`.results`, :mod:`.figures`,
:mod:`.collect` (the only place the model is used), :mod:`.study`.

Example::

    from workbench.analyses import readouts
    result = readouts.run(readouts.ReadoutsConfig(model="tiny-lm"), cache_dir="runs/cache")
    result.figure("lens_kl").show()
    result.metrics()["steering_effect"]
    result.claims()
"""

from workbench.analyses.readouts.compute import (
    CHAR_CLASSES,
    char_class,
    probe_labels,
    starts_word,
    word_mass,
)
from workbench.analyses.readouts.config import LENSES, ReadoutsConfig
from workbench.analyses.readouts.results import (
    FIGURES,
    LensCurve,
    ReadoutsResult,
    SteeringResult,
)
from workbench.analyses.readouts.study import ANALYSIS, STUDY, run
from workbench.analyses.readouts.summary import CLAIMS, METRIC_KEYS

__all__ = [
    "ANALYSIS",
    "CHAR_CLASSES",
    "CLAIMS",
    "FIGURES",
    "LENSES",
    "METRIC_KEYS",
    "STUDY",
    "LensCurve",
    "ReadoutsConfig",
    "ReadoutsResult",
    "SteeringResult",
    "char_class",
    "probe_labels",
    "run",
    "starts_word",
    "word_mass",
]
