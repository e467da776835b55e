"""``LinearProbe``: multinomial logistic regression with an L2 penalty, trained in torch.

The same model and penalty as scikit-learn's ``LogisticRegression(C=C, solver="lbfgs")``: it
minimizes ``mean cross-entropy + ||W||^2 / (2 C n)`` with an unpenalized intercept, so one ``C``
means one regularization strength in both (see :mod:`workbench.probes._solver` for the solver and
its preconditioning). Learned attributes follow scikit-learn (``coef_``, ``intercept_``,
``classes_``, ``n_features_in_``, ``n_iter_``); ``fit_store`` trains on one site of an
:class:`~workbench.store.ActivationStore`, streaming it from disk when it does not fit in memory.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from workbench.errors import ProbeError
from workbench.probes import _data, _solver
from workbench.probes._base import LinearScores
from workbench.store import ActivationStore


class LinearProbe(LinearScores, ClassifierMixin, BaseEstimator):
    """Multinomial logistic regression (L2), fitted by preconditioned full-batch L-BFGS in torch.

    Args:
        C: Inverse regularization strength, as in scikit-learn: the penalty is
            ``||coef_||^2 / (2 C n)`` on the mean cross-entropy over ``n`` rows.
        fit_intercept: Learn an (unpenalized) intercept.
        tol: Stop when the largest entry of the preconditioned gradient, scaled by the square root
            of the inverse curvature L-BFGS has seen, is below ``tol`` (a scale-free measure of
            the gap to the optimum; not the same units as scikit-learn's ``tol``).
        max_iter: Most L-BFGS iterations (a ``ConvergenceWarning`` when reached).
        precondition: Optimize in whitened coordinates (same solution, far fewer iterations).
        warm_start: Start from the previous ``coef_`` and ``intercept_`` when refitting.
        device: ``"cpu"``, ``"cuda"``...; ``None`` uses CUDA when available.
        random_state: Seeds the row sample that estimates the preconditioner (the only
            randomness; it changes the optimizer's path, not the solution).

    Attributes:
        classes_: The class labels, sorted.
        coef_: ``(1, d)`` for two classes, else ``(n_classes, d)``.
        intercept_: ``(1,)`` or ``(n_classes,)``.
        n_features_in_: ``d``.
        n_iter_: ``(1,)`` L-BFGS iterations used.
    """

    def __init__(
        self,
        C: float = 1.0,
        *,
        fit_intercept: bool = True,
        tol: float = 1e-4,
        max_iter: int = 1000,
        precondition: bool = True,
        warm_start: bool = False,
        device: str | None = None,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.C = C
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.precondition = precondition
        self.warm_start = warm_start
        self.device = device
        self.random_state = random_state

    def _check_params(self) -> None:
        if not (isinstance(self.C, int | float) and self.C > 0):
            raise ProbeError(f"C={self.C!r}; a positive number (math.inf: no penalty) is accepted")
        if not (isinstance(self.tol, int | float) and self.tol >= 0):
            raise ProbeError(f"tol={self.tol!r}; a number >= 0 is accepted")
        if not (isinstance(self.max_iter, int) and self.max_iter >= 1):
            raise ProbeError(f"max_iter={self.max_iter!r}; an integer >= 1 is accepted")

    def fit(self, X: Any, y: Any) -> LinearProbe:
        """Fits the probe.

        Args:
            X: ``(n, d)`` array or tensor of activations.
            y: ``(n,)`` class labels (at least two classes).

        Returns:
            self

        Raises:
            ProbeError: One class only, or a bad hyperparameter.
        """
        self._check_params()
        X, y = validate_data(self, _data.to_numpy(X), y, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        _data.check_classes(classes)
        device = _data.resolve_device(self.device)
        x = _data.as_float32(X).to(device)
        labels = torch.from_numpy(codes.astype(np.int64)).to(device)
        rows = _solver.sample_rows(len(x), check_random_state(self.random_state))
        pre = self._preconditioner(x[rows.to(device)], len(classes), len(x), device)
        self._solve(lambda: [(x, labels)], len(x), classes, pre)
        return self

    def fit_store(
        self,
        store: ActivationStore,
        site: str,
        labels: Any,
        *,
        batch_size: int | None = 65536,
        in_memory: bool | None = None,
    ) -> LinearProbe:
        """Fits the probe on one site of an activation store.

        Each L-BFGS step needs the loss over every row; when the site does not fit in memory
        (or ``in_memory=False``) every step streams the store's shards from disk in batches of
        ``batch_size`` rows, so memory stays bounded by one batch and the result is the same as
        an in-memory fit (up to float32 summation order).

        Args:
            store: The store.
            site: A site it holds, e.g. ``"resid_post.3"``.
            labels: One label per row (``store.n_rows``) or per text (repeated over its rows).
            batch_size: Rows per streamed batch (``None``: one shard at a time).
            in_memory: Read the site into memory (``True``), stream it (``False``), or decide
                from its size and the free memory (``None``).

        Returns:
            self

        Raises:
            SiteError: ``site`` is not in the store.
            ProbeError: Labels of the wrong length, one class, or a bad hyperparameter.
        """
        self._check_params()
        _data.check_site(store, site)
        y, _ = _data.align_labels(labels, store.n_rows, store.offsets.numpy())
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        _data.check_classes(classes)
        width = _data.site_width(store, site)
        if in_memory is None:
            in_memory = _data.fits_in_memory(store.n_rows, width)
        if in_memory:
            return self.fit(_data.as_float32(store.read(site)), y)
        self._reset_features(width)
        device = _data.resolve_device(self.device)
        codes_t = torch.from_numpy(codes.astype(np.int64))
        rows = _solver.sample_rows(store.n_rows, check_random_state(self.random_state))
        sample = _data.gather_rows(store, site, rows, batch_size).to(device)
        pre = self._preconditioner(sample, len(classes), store.n_rows, device)
        self._solve(
            lambda: _data.store_batches(store, site, codes_t, batch_size),
            store.n_rows,
            classes,
            pre,
        )
        return self

    def _reset_features(self, width: int) -> None:
        self.n_features_in_ = width
        if hasattr(self, "feature_names_in_"):
            del self.feature_names_in_

    def _preconditioner(
        self, sample: torch.Tensor, n_classes: int, n_rows: int, device: torch.device
    ) -> _solver.Preconditioner:
        if not self.precondition:
            return _solver.identity(sample.shape[1], device)
        return _solver.Preconditioner.from_rows(
            sample.cpu(),
            n_classes=n_classes,
            lam=1.0 / (self.C * n_rows),
            center=self.fit_intercept,
            device=device,
        )

    def _solve(
        self,
        batches: _solver.Batches,
        n_rows: int,
        classes: np.ndarray,
        pre: _solver.Preconditioner,
    ) -> None:
        init = None
        k = 1 if len(classes) == 2 else len(classes)
        if self.warm_start and getattr(self, "coef_", np.empty(0)).shape == (k, pre.chol.shape[0]):
            init = (torch.from_numpy(self.coef_), torch.from_numpy(self.intercept_))
        fit = _solver.fit_logistic(
            batches,
            n_rows,
            len(classes),
            pre,
            lam=0.0 if math.isinf(self.C) else 1.0 / (self.C * n_rows),
            fit_intercept=self.fit_intercept,
            init=init,
            tol=self.tol,
            max_iter=self.max_iter,
        )
        if fit.n_iter >= self.max_iter:
            warnings.warn(
                f"LinearProbe did not converge in max_iter={self.max_iter} iterations; "
                "raise max_iter or tol",
                ConvergenceWarning,
                stacklevel=3,
            )
        self.classes_ = classes
        self.coef_ = fit.coef.double().cpu().numpy()
        self.intercept_ = fit.intercept.double().cpu().numpy()
        self.n_iter_ = np.array([fit.n_iter])
