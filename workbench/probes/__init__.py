"""Linear probes: what can a linear readout recover from a layer's activations?

A *probe* is a small classifier trained to predict a property (part of speech, truth of a
statement, which agent is speaking) from activations at one site (Alain & Bengio, 2016,
"Understanding intermediate layers using linear classifier probes", arXiv 1610.01644). Its
held-out accuracy across layers says where the property becomes linearly available. Two cautions
shape this module:

* **Controls.** A probe with enough capacity can fit a property the model does not use. Hewitt &
  Liang (2019, arXiv 1909.03368) compare each probe with the same probe on a *control task* (a
  random label per token type) and report *selectivity*, task minus control accuracy;
  :func:`probe_sweep` does this (or a shuffled-label control) on the same folds.
* **Directions.** Logistic regression finds *a* separating direction, not necessarily the one the
  model represents the concept with. Marks & Tegmark (2023, "The Geometry of Truth",
  arXiv 2310.06824) read it off the difference of class means instead: :class:`MassMeanProbe`.

Both probes follow the scikit-learn estimator contract (hyperparameters in ``__init__``, ``fit``
returns ``self``, learned attributes end in ``_``) and pass ``check_estimator``, so they work with
``cross_val_score``, pipelines and grid searches. :class:`LinearProbe` is multinomial logistic
regression with the same objective as scikit-learn's ``LogisticRegression(C=C)``, fitted in torch
(float32, CPU or GPU) by preconditioned L-BFGS; both probes also fit on one site of an
:class:`~workbench.store.ActivationStore` (``fit_store``), streaming it when it does not fit in
memory.

Usage::

    from workbench.probes import LinearProbe, MassMeanProbe, probe_sweep
    result = probe_sweep(acts, labels, sites="resid_post", cv=5, seeds=3, control="control_task")
    result.summary()            # accuracy, control, selectivity per layer, with 95% intervals
    result.figure()             # the same, by layer
    LinearProbe(C=0.1).fit(acts["resid_post.6"], labels).score(X_test, y_test)
"""

from __future__ import annotations

from workbench.errors import ProbeError
from workbench.probes.folds import control_task_labels, cv_folds, shuffled_labels
from workbench.probes.linear import LinearProbe
from workbench.probes.mass_mean import MassMeanProbe
from workbench.probes.results import ProbeSweepResult
from workbench.probes.sweep import probe_sweep, select_sites

__all__ = [
    "LinearProbe",
    "MassMeanProbe",
    "ProbeError",
    "ProbeSweepResult",
    "control_task_labels",
    "cv_folds",
    "probe_sweep",
    "select_sites",
    "shuffled_labels",
]
