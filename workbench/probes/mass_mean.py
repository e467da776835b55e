"""``MassMeanProbe``: the difference of class means as a probe direction (Marks & Tegmark, 2023).

Marks & Tegmark ("The Geometry of Truth", arXiv 2310.06824) read a binary concept off the
*mass-mean* direction ``theta = mu_+ - mu_-`` rather than a logistic-regression direction, which
fits spurious, barely-separating directions as readily as the concept's own. We generalize it to
``k`` classes as the **nearest class mean** rule under a shared *isotropic* covariance: no
covariance matrix is estimated or inverted (their "IID" variant, ``Sigma^-1 theta``, is left out on
purpose, since it is logistic-regression-like and unstable in high dimensions). The model is
``x | y=k ~ N(mu_k, sigma^2 I)`` with equal priors, so::

    p(k | x) = softmax_k(-||x - mu_k||^2 / (2 sigma^2)),
    logit_k  = (mu_k . x - ||mu_k||^2 / 2) / sigma^2,

with ``sigma^2`` the pooled within-class variance per dimension (maximum likelihood:
``sum_i ||x_i - mu_{y_i}||^2 / (n d)``). For two classes the one logit is
``theta . (x - (mu_+ + mu_-)/2) / sigma^2``: the mass-mean direction, thresholded at the midpoint
of the two means, with a sigmoid whose scale comes from the data. Equal priors keep ``predict`` the
nearest-mean rule whatever the class frequencies.

Fitting is one pass of per-class sums (float64), so ``fit_store`` streams any store in bounded
memory and gives the same probe as an in-memory fit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data
from torch import Tensor

from workbench.probes import _data
from workbench.probes._base import LinearScores
from workbench.store import ActivationStore


class ClassMoments:
    """Running per-class sums for class means and the pooled within-class variance (float64)."""

    def __init__(self, n_classes: int, d: int) -> None:
        self.counts = torch.zeros(n_classes, dtype=torch.float64)
        self.sums = torch.zeros(n_classes, d, dtype=torch.float64)
        self.sum_sq = 0.0

    def update(self, x: Tensor, codes: Tensor) -> None:
        """Adds rows ``x`` with class codes ``codes``."""
        x = x.to(dtype=torch.float64, device="cpu")
        codes = codes.cpu()
        self.counts.index_add_(0, codes, torch.ones(len(codes), dtype=torch.float64))
        self.sums.index_add_(0, codes, x)
        self.sum_sq += float((x * x).sum())

    @classmethod
    def from_batches(
        cls, batches: Iterable[tuple[Tensor, Tensor]], n_classes: int, d: int
    ) -> ClassMoments:
        """Accumulates every batch."""
        acc = cls(n_classes, d)
        for x, codes in batches:
            acc.update(x, codes)
        return acc

    def finalize(self) -> tuple[np.ndarray, float]:
        """Class means ``(k, d)`` and the pooled within-class variance per dimension."""
        means = self.sums / self.counts[:, None]
        n, d = float(self.counts.sum()), self.sums.shape[1]
        within = self.sum_sq - float(((self.sums * self.sums).sum(1) / self.counts).sum())
        variance = max(within, 0.0) / (n * d)
        return means.numpy(), variance


def linear_form(means: np.ndarray, variance: float) -> tuple[np.ndarray, np.ndarray]:
    """``coef`` and ``intercept`` of the nearest-mean rule (one logit for two classes)."""
    scale = 1.0 / variance if variance > 0 else 1.0
    coef = means * scale
    intercept = -0.5 * (means * means).sum(1) * scale
    if len(means) == 2:
        coef, intercept = coef[1:] - coef[:1], intercept[1:] - intercept[:1]
    return coef, intercept


class MassMeanProbe(LinearScores, ClassifierMixin, BaseEstimator):
    """Nearest-class-mean probe with a shared isotropic variance (mass-mean probing).

    No hyperparameters and no randomness. See the module docstring for the model.

    Attributes:
        classes_: The class labels, sorted.
        means_: ``(n_classes, d)`` class means.
        variance_: Pooled within-class variance per dimension (``sigma^2``).
        coef_: ``(1, d)`` (``(mu_1 - mu_0) / sigma^2``) for two classes, else ``mu_k / sigma^2``.
        intercept_: ``(1,)`` or ``(n_classes,)``, matching ``coef_``.
        n_features_in_: ``d``.
    """

    def fit(self, X: Any, y: Any) -> MassMeanProbe:
        """Fits the class means.

        Args:
            X: ``(n, d)`` activations.
            y: ``(n,)`` class labels (at least two classes).

        Returns:
            self

        Raises:
            ProbeError: One class only.
        """
        X, y = validate_data(self, _data.to_numpy(X), y, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        _data.check_classes(classes)
        moments = ClassMoments(len(classes), X.shape[1])
        moments.update(torch.tensor(X, dtype=torch.float64), torch.from_numpy(codes))
        self._set(classes, moments)
        return self

    def fit_store(
        self, store: ActivationStore, site: str, labels: Any, *, batch_size: int | None = 65536
    ) -> MassMeanProbe:
        """Fits on one site of an activation store in one streaming pass.

        Args:
            store: The store.
            site: A site it holds.
            labels: One label per row or per text (repeated over its rows).
            batch_size: Rows per batch (``None``: one shard at a time).

        Returns:
            self

        Raises:
            SiteError: ``site`` is not in the store.
            ProbeError: Labels of the wrong length, or one class.
        """
        _data.check_site(store, site)
        y, _ = _data.align_labels(labels, store.n_rows, store.offsets.numpy())
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        _data.check_classes(classes)
        width = _data.site_width(store, site)
        codes_t = torch.from_numpy(codes.astype(np.int64))
        moments = ClassMoments.from_batches(
            _data.store_batches(store, site, codes_t, batch_size), len(classes), width
        )
        self.n_features_in_ = width
        if hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self._set(classes, moments)
        return self

    def _set(self, classes: np.ndarray, moments: ClassMoments) -> None:
        means, variance = moments.finalize()
        self.classes_ = classes
        self.means_ = means
        self.variance_ = variance
        self.coef_, self.intercept_ = linear_form(means, variance)
