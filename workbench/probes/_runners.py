"""How a probe sweep fits one fold: the linear fast path, the mass-mean fast path, any estimator.

A runner prepares per-site state once (rows on the device, a preconditioner); then, for each seed
and task, :meth:`folds` fits and scores every fold on two views of the site's rows permuted by
fold (``xs[:lo]`` and ``xs[hi:]`` train, ``xs[lo:hi]`` tests, with ``lo, hi = bounds[f:f + 2]``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from workbench.probes import _data, _solver
from workbench.probes.mass_mean import linear_form

Key = tuple[str, int, int]
"""(task, seed, fold)."""


@dataclass
class SiteState:
    """A site's rows (on the runner's device) and what is shared by all its fits."""

    x: Tensor
    pre: _solver.Preconditioner | None = None

    def permute(self, order: Tensor) -> Tensor:
        """The rows in fold order (one copy per seed)."""
        return self.x[order.to(self.x.device)]


def _present(ys: Tensor, lo: int, hi: int) -> Tensor:
    """Sorted class codes present in the training rows."""
    return torch.unique(torch.cat([ys[:lo], ys[hi:]]))


class Runner:
    """The interface: ``prepare`` once per site, then ``folds`` per (seed, task)."""

    name: str
    estimator: Any

    def prepare(self, x: Tensor, n_classes: int, cv: int, random_state: int) -> SiteState:
        """Per-site state shared by all fits."""
        return SiteState(x)

    def folds(
        self,
        state: SiteState,
        xs: Tensor,
        ys: Tensor,
        bounds: np.ndarray,
        warm: dict[Key, Any],
        task: str,
        seed: int,
    ) -> list[tuple[float, int]]:
        """(accuracy, iterations) of each fold."""
        return [
            self.fold(state, xs, ys, int(bounds[f]), int(bounds[f + 1]), warm, (task, seed, f))
            for f in range(len(bounds) - 1)
        ]

    def fold(
        self,
        state: SiteState,
        xs: Tensor,
        ys: Tensor,
        lo: int,
        hi: int,
        warm: dict[Key, Any],
        key: Key,
    ) -> tuple[float, int]:
        """(accuracy, iterations) of one fold."""
        raise NotImplementedError


class LinearRunner(Runner):
    """Preconditioned, warm-started L-BFGS fits (see :mod:`workbench.probes.sweep`)."""

    name = "linear"

    def __init__(self, estimator: Any, warm_start: bool) -> None:
        estimator._check_params()
        self.estimator = estimator
        self.warm_start = warm_start
        self.device = _data.resolve_device(estimator.device)
        self.recent: dict[str, Any] = {}

    def prepare(self, x: Tensor, n_classes: int, cv: int, random_state: int) -> SiteState:
        est = self.estimator
        x = x.to(self.device)
        self.recent = {}
        if not est.precondition:
            return SiteState(x, _solver.identity(x.shape[1], self.device))
        rows = _solver.sample_rows(len(x), np.random.default_rng([random_state, 3]))
        pre = _solver.Preconditioner.from_rows(
            x[rows.to(self.device)].cpu(),
            n_classes=n_classes,
            lam=0.0 if math.isinf(est.C) else cv / ((cv - 1) * est.C * len(x)),
            center=est.fit_intercept,
            device=self.device,
        )
        return SiteState(x, pre)

    def fold(
        self,
        state: SiteState,
        xs: Tensor,
        ys: Tensor,
        lo: int,
        hi: int,
        warm: dict[Key, Any],
        key: Key,
    ) -> tuple[float, int]:
        est = self.estimator
        ys = ys.to(self.device)
        present = _present(ys, lo, hi)
        test_y = ys[lo:hi]
        if len(present) < 2:
            return float((test_y == present[0]).float().mean()), 0
        lookup = torch.full((int(ys.max()) + 1,), -1, dtype=torch.long, device=self.device)
        lookup[present] = torch.arange(len(present), device=self.device)
        parts = [(xs[:lo], lookup[ys[:lo]]), (xs[hi:], lookup[ys[hi:]])]
        parts = [p for p in parts if len(p[0])]
        n_train = len(xs) - (hi - lo)
        lam = 0.0 if math.isinf(est.C) else 1.0 / (est.C * n_train)
        counts = torch.bincount(torch.cat([p[1] for p in parts]), minlength=len(present))
        k = 1 if len(present) == 2 else len(present)
        init = (torch.zeros(k, xs.shape[1], device=self.device), _solver.prior_intercept(counts))
        if not est.fit_intercept:
            init = None
        recent, previous = self.recent.get(key[0]), warm.get(key)
        if self.warm_start and recent is not None and torch.equal(recent[2], present):
            init = (recent[0], recent[1])  # same site, overlapping rows: always close
        elif self.warm_start and previous is not None and torch.equal(previous[2], present):
            # The previous site's solution for these rows: kept only if it beats the prior.
            best = _solver.prior_loss(counts) if est.fit_intercept else math.log(len(present))
            value = _solver.objective(lambda: parts, n_train, previous[0], previous[1], lam=lam)
            if value < best:
                init = (previous[0], previous[1])
        fit = _solver.fit_logistic(
            lambda: parts,
            n_train,
            len(present),
            state.pre,
            lam=lam,
            fit_intercept=est.fit_intercept,
            init=init,
            tol=est.tol,
            max_iter=est.max_iter,
        )
        warm[key] = self.recent[key[0]] = (fit.coef, fit.intercept, present)
        pred = present[_solver.predict_codes(xs[lo:hi], fit.coef, fit.intercept)]
        return float((pred == test_y).float().mean()), fit.n_iter


class MassMeanRunner(Runner):
    """Class sums per fold in one pass; each fold trains on the totals minus its own sums."""

    name = "mass_mean"

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator

    def folds(
        self,
        state: SiteState,
        xs: Tensor,
        ys: Tensor,
        bounds: np.ndarray,
        warm: dict[Key, Any],
        task: str,
        seed: int,
    ) -> list[tuple[float, int]]:
        k, d = int(ys.max()) + 1, xs.shape[1]
        parts = []
        for f in range(len(bounds) - 1):
            x = xs[int(bounds[f]) : int(bounds[f + 1])].to("cpu", torch.float64)
            y = ys[int(bounds[f]) : int(bounds[f + 1])].cpu()
            sums = torch.zeros(k, d, dtype=torch.float64).index_add_(0, y, x)
            counts = torch.bincount(y, minlength=k).double()
            parts.append((x, y, sums, counts, float((x * x).sum())))
        total_sums = sum(p[2] for p in parts)
        total_counts = sum(p[3] for p in parts)
        total_sq = sum(p[4] for p in parts)
        out = []
        for test, test_y, sums, counts, sum_sq in parts:
            train_sums, train_counts = total_sums - sums, total_counts - counts
            present = torch.nonzero(train_counts > 0).squeeze(1)
            if len(present) < 2:
                out.append((float((test_y == present[0]).double().mean()), 0))
                continue
            s, c = train_sums[present], train_counts[present]
            within = (total_sq - sum_sq) - float(((s * s).sum(1) / c).sum())
            variance = max(within, 0.0) / (float(c.sum()) * d)
            coef, intercept = linear_form((s / c[:, None]).numpy(), variance)
            scores = test.numpy() @ coef.T + intercept
            codes = (scores[:, 0] > 0).astype(int) if coef.shape[0] == 1 else scores.argmax(1)
            out.append((float((present.numpy()[codes] == test_y.numpy()).mean()), 0))
        return out


class GenericRunner(Runner):
    """Any scikit-learn classifier: cloned, fitted and scored on numpy copies of each fold."""

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator
        self.name = type(estimator).__name__

    def fold(
        self,
        state: SiteState,
        xs: Tensor,
        ys: Tensor,
        lo: int,
        hi: int,
        warm: dict[Key, Any],
        key: Key,
    ) -> tuple[float, int]:
        from sklearn.base import clone

        x, y = xs.numpy(), ys.numpy()
        train_x = np.concatenate([x[:lo], x[hi:]])
        train_y = np.concatenate([y[:lo], y[hi:]])
        est = clone(self.estimator).fit(train_x, train_y)
        n_iter = int(np.max(getattr(est, "n_iter_", 0)))
        return float(est.score(x[lo:hi], y[lo:hi])), n_iter
