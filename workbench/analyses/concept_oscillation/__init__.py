"""The concept-oscillation study: which of two conflicting sources a model follows, and why.

Which source wins, and how the layer-wise prediction wavers between the two answers on the way.

Reproduces the measurements of *When Modalities Conflict: How Unimodal Reasoning Uncertainty
Governs Preference Dynamics in MLLMs* (arXiv 2511.02243; ICML 2026 as "Beyond Fixed Biases").
The paper's claim: when two sources of a prompt disagree (an image and a text), which one a model
follows is governed by its *relative uncertainty* about each source alone, not by a fixed
preference for a modality; and near the balance point, where either could win, the prediction
read out layer by layer oscillates between the two answers.

The definitions (the paper's; none depends on the modality):

* For a conflict case whose sources alone give answers ``Y_a`` and ``Y_b``, ``H_a`` and ``H_b``
  are the entropies of the model's next-token distribution with source A alone and with source
  B alone, and ``dH = 2 (H_a - H_b) / (H_a + H_b)`` (positive: A is the more uncertain source).
* The follow curve ``P(follow a | dH)`` is a logistic regression of "the answer with both
  sources is ``Y_a``" on ``dH``; the balance point is where it crosses 0.5, with a percentile
  bootstrap interval. The paper finds a monotone decreasing curve for six models.
* Cases within 0.5 of the balance point are *ambiguous*, the others *clear*.
* Oscillations of a case: switches of the per-layer top-1 (through a lens) between ``Y_a`` and
  ``Y_b``; a layer whose top-1 is some other token does not reset the count. The paper reports
  1.43 for ambiguous cases of LLaVA-1.6-7B, 0.71 for clear ones and 0.35 for a control whose
  second source is irrelevant.

Our operationalization:

* **Answers are first tokens**: ``Y_a`` and ``Y_b`` are the first tokens of the two answers after
  the two-source prompt; "follow a" means the top-1 next token is ``Y_a``; cases whose answer is
  neither are left out of the fit (counted in the metrics).
* **Lens**: the logit lens (the model's final norm and unembedding) by default, or a tuned lens
  trained on the study's own prompts (``lens="tuned"``), from :mod:`workbench.lens`.
* **Probe**: a per-layer linear probe (:mod:`workbench.probes`) on the residual stream at the
  answer position, predicting the model's own final choice (A or B), cross-validated with a
  shuffled-label control; it says from which layer the winner is decodable.
* **Control**: cases whose source A is irrelevant to the question (a file's ``control`` lines;
  without any, each question gets another case's source A; for the toy, an image without the
  asked object).
* **Fit**: maximum likelihood with a weak ridge on the slope, so that perfectly separated
  outcomes keep a finite balance point (see :mod:`.compute`).
* **Embedded default**: the paper's models are 7B vision-language models; offline on a CPU the
  default is a tiny decoder trained in a minute or two on a two-channel conflict task (see
  :mod:`.toy`): channel A a lookup among distractors (the "image"), channel B a multi-hop chain
  (the "text"), with difficulty tiers on both whose label noise makes single-source uncertainty
  vary. It is trained on single-source examples and on two-source examples of the same noisy
  world (each channel misreports with its tier's probability; the label is the truth), and
  evaluated on conflicts drawn evenly over the tiers. (The issue asked for consistent two-source
  examples only; a toy trained that way followed channel A in every conflict: see :mod:`.toy`.)
* **Real models**: any causal LM :func:`workbench.load_model` gives, on a JSONL file of cases
  (:mod:`.cases`; text only: context against parametric knowledge); a small hand-written file of
  such cases ships as ``cases="builtin"``. Cases with an ``image`` go through the model's
  processor (untested: no vision-language model can be downloaded here).

Layout (every study has the same rooms): :mod:`.config`, :mod:`.cases` (the case format),
:mod:`.toy` (the task), :mod:`.compute` (pure), :mod:`.readout` (what a model gives),
:mod:`.results`, :mod:`.figures`, :mod:`.train_toy` and :mod:`.collect` (the only places that
train or load models), :mod:`.study`.

Example::

    from workbench.analyses import concept_oscillation as co
    result = co.run(co.ConceptOscillationConfig(), cache_dir="runs/cache")   # the toy
    result.figure("follow_curve").show()
    co.metrics(result)["oscillations_ambiguous"]
    # a real model on the shipped text-only cases, or on your own JSONL:
    co.run(co.ConceptOscillationConfig(model="EleutherAI/pythia-410m", cases="builtin"))
"""

from workbench.analyses.concept_oscillation.cases import (
    BUILTIN,
    CasesError,
    CaseSet,
    ConflictCase,
    derive_controls,
    prompt,
    read_cases,
    write_cases,
)
from workbench.analyses.concept_oscillation.compute import (
    AMBIGUOUS_WIDTH,
    ambiguous_mask,
    analyze,
    count_oscillations,
    entropy,
    fit_logistic,
    follow_curve,
    relative_uncertainty,
)
from workbench.analyses.concept_oscillation.config import ConceptOscillationConfig
from workbench.analyses.concept_oscillation.results import (
    FIGURES,
    CaseRun,
    ConceptOscillationResult,
    FollowCurve,
    LogitDiffMap,
    OscillationSummary,
    ProbeCurve,
    Readout,
)
from workbench.analyses.concept_oscillation.study import (
    ANALYSIS,
    METRIC_KEYS,
    cases_for,
    check,
    metrics,
    run,
    save,
)
from workbench.analyses.concept_oscillation.toy import ToySpec, toy_cases

__all__ = [
    "AMBIGUOUS_WIDTH",
    "ANALYSIS",
    "BUILTIN",
    "FIGURES",
    "METRIC_KEYS",
    "CaseRun",
    "CaseSet",
    "CasesError",
    "ConceptOscillationConfig",
    "ConceptOscillationResult",
    "ConflictCase",
    "FollowCurve",
    "LogitDiffMap",
    "OscillationSummary",
    "ProbeCurve",
    "Readout",
    "ToySpec",
    "ambiguous_mask",
    "analyze",
    "cases_for",
    "check",
    "count_oscillations",
    "derive_controls",
    "entropy",
    "fit_logistic",
    "follow_curve",
    "metrics",
    "prompt",
    "read_cases",
    "relative_uncertainty",
    "run",
    "save",
    "toy_cases",
    "write_cases",
]
