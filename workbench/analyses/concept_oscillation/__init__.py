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
* **Lens**: a tuned lens trained on the study's own prompts by default (``lens="tuned"``; the
  oscillation figure's title names the lens), or the logit lens (the model's final norm and
  unembedding, ``lens="logit"``), from :mod:`workbench.lens`. On the toy the logit lens is the
  less trusted one: at its first layer it shows neither answer in 4-30% of conflicts (seeds
  0-5 of the previous recipe), where the tuned lens does in 2-11%.
* **Probe**: a per-layer linear probe (:mod:`workbench.probes`) predicting the model's own final
  choice (A or B), cross-validated with a shuffled-label control; it says from which layer the
  winner is decodable. Its input is the residual read along the case's two answers' unembedding
  difference (the lens's ``logit(Y_a) - logit(Y_b)``), since "follows A" is a relation between
  the residual and the case's two answers: a probe of the raw residual (one direction for all
  cases) stayed at the majority baseline (0.734 against 0.729).
* **Control**: cases whose source A is irrelevant to the question (a file's ``control`` lines;
  without any, each question gets another case's source A; for the toy, an image without the
  asked object).
* **Fit**: maximum likelihood with a weak ridge on the slope, so that perfectly separated
  outcomes keep a finite balance point (see :mod:`.compute`).
* **Embedded default**: the paper's models are 7B vision-language models; offline on a CPU the
  default is a tiny decoder trained in a minute or two on a two-channel conflict task (see
  :mod:`.toy`): channel A a lookup among distractors (the "image"), channel B a multi-hop chain
  (the "text"), with difficulty tiers on both whose label noise makes single-source uncertainty
  vary. It is trained on single-source examples, on two-source examples of the same noisy
  world (each channel misreports with its tier's probability; the label is the truth) and on
  two-source examples whose channel A is irrelevant (a 2,000-step schedule, then on at its final
  learning rate until the excess KL over the Bayes-optimal predictor is at most
  ``toy_target_kl``, 0.25 nats), and evaluated on 2,000 conflicts drawn
  evenly over the tiers and 1,000 controls. (The issue asked for consistent two-source
  examples only; a toy trained that way followed channel A in every conflict: see :mod:`.toy`.)
* **How robust**: the verdicts over seeds are on the study's page
  (``docs/studies/concept_oscillation.md``, from the committed replication record); the
  measurements behind the toy's recipe are in the dated notes (``docs/notes/``).
* **Real models**: any causal LM :func:`workbench.load_model` gives, on a JSONL file of cases
  (:mod:`.cases`; text only: context against parametric knowledge); a small hand-written file of
  such cases ships as ``cases="builtin"``.

Layout (every study has the same rooms): :mod:`.config`, :mod:`.cases` (the case format),
:mod:`.toy` (the task), :mod:`.compute` (pure), :mod:`.readout` (what a model gives),
:mod:`.results`, :mod:`.figures`, :mod:`.train_toy` and :mod:`.collect` (the only places that
train or load models), :mod:`.study`.

Example::

    from workbench.analyses import concept_oscillation as co
    result = co.run(co.ConceptOscillationConfig(), cache_dir="runs/cache")   # the toy
    result.figure("follow_curve").show()
    result.metrics()["oscillations_ambiguous"]
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
from workbench.analyses.concept_oscillation.study import ANALYSIS, STUDY, cases_for, check, run
from workbench.analyses.concept_oscillation.summary import CLAIMS, METRIC_KEYS
from workbench.analyses.concept_oscillation.toy import ToySpec, toy_cases

__all__ = [
    "AMBIGUOUS_WIDTH",
    "ANALYSIS",
    "BUILTIN",
    "CLAIMS",
    "FIGURES",
    "METRIC_KEYS",
    "STUDY",
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
    "prompt",
    "read_cases",
    "relative_uncertainty",
    "run",
    "toy_cases",
    "write_cases",
]
