"""Multinomial logistic regression with an L2 penalty: preconditioned full-batch L-BFGS in torch.

The objective is scikit-learn's ``LogisticRegression(C=C)`` divided by ``C * n``::

    minimize over W, b:   (1/n) sum_i CE(softmax(W x_i + b), y_i)  +  ||W||_F^2 / (2 C n)

(scikit-learn minimizes ``C * sum_i CE + ||W||^2 / 2``; same minimizer). The intercept is not
penalized. Two classes use one logit, as scikit-learn does (``coef_`` has one row); more use one
logit per class, and the intercepts are centred (softmax is unchanged by a common shift).

Preconditioning. Activations are badly conditioned (a few directions carry most of the variance,
some have a large mean), so plain L-BFGS needs hundreds to thousands of iterations. Near the start
the Hessian of the mean cross-entropy in ``W`` is about ``alpha * Cov(x)`` per class
(``alpha = 1/K``, the curvature of a uniform softmax), plus ``lambda = 1/(C n)`` from the penalty.
With the Cholesky factor ``L L^T = alpha Cov(x) + lambda I`` we optimize ``u = W L`` (and an
intercept ``c`` for the centred rows, scaled by ``alpha^-1/2``), in which that Hessian is the
identity. This is a change of variables, not of the problem: the minimizer is the same whatever
preconditioner is used, so it can be estimated from a subsample of rows, or once per site from all
of a site's rows and shared by every fold and seed of a cross-validation (the test rows of a fold
shape only the path, never the solution). L-BFGS then converges in tens of iterations.

The loss and gradient are computed by hand, one batch at a time, so the same solver runs on an
in-memory tensor (one batch), on two views of a permuted copy (a cross-validation fold without a
copy), or on an ``ActivationStore`` streamed from disk at every function evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float, Int
from scipy.linalg import solve_triangular
from torch import Tensor

Batches = Callable[[], Iterable[tuple[Tensor, Tensor]]]
"""Returns a fresh iterable of ``(X_batch, y_batch)`` pairs (rows float, labels int64 codes)."""

CHUNK_ROWS = 1 << 16
"""Rows per matmul inside a batch (bounds the temporaries of a large in-memory batch)."""
FTOL = 1e-8
"""Relative decrease of the objective below which a step makes no progress (float32 noise)."""
NOISE = 1e-6
"""Relative objective change treated as rounding (float32 terms summed in float64)."""
PRECONDITION_ROWS = 8192
"""Rows sampled to estimate the preconditioner."""


def curvature(n_classes: int) -> float:
    """Per-row curvature of the cross-entropy at uniform probabilities (``alpha``)."""
    return 0.25 if n_classes == 2 else 1.0 / n_classes


@dataclass(frozen=True)
class Preconditioner:
    """The change of variables ``W = u L^-1``, ``b = c / sqrt(alpha) - W mean``.

    Attributes:
        mean: ``(d,)`` row mean (zeros without an intercept).
        chol: ``(d, d)`` lower Cholesky factor ``L`` of ``alpha Cov + lambda I``.
        chol_inv: ``(d, d)`` its inverse.
        intercept_scale: ``alpha ** -0.5``.
    """

    mean: Float[Tensor, " d"]
    chol: Float[Tensor, "d d"]
    chol_inv: Float[Tensor, "d d"]
    intercept_scale: float

    @classmethod
    def from_moments(
        cls,
        mean: Float[Tensor, " d"],
        second: Float[Tensor, "d d"],
        *,
        n_classes: int,
        lam: float,
        center: bool,
        device: torch.device | str = "cpu",
    ) -> Preconditioner:
        """Builds the preconditioner from a row mean and second moment ``E[x x^T]`` (float64)."""
        alpha = curvature(n_classes)
        mean = mean.double()
        cov = second.double() - torch.outer(mean, mean) if center else second.double()
        d = cov.shape[0]
        # A small floor keeps the factorization stable when some directions have no variance;
        # it changes the path of the optimizer, never the solution.
        floor = 1e-6 * float(cov.diagonal().clamp_min(0).mean()) * alpha
        a = alpha * cov + (lam + floor + 1e-12) * torch.eye(d, dtype=torch.float64)
        chol = torch.linalg.cholesky(a)
        chol_inv = torch.linalg.solve_triangular(
            chol, torch.eye(d, dtype=torch.float64), upper=False
        )
        return cls(
            mean=(mean if center else torch.zeros_like(mean)).float().to(device),
            chol=chol.float().to(device),
            chol_inv=chol_inv.float().to(device),
            intercept_scale=alpha**-0.5,
        )

    @classmethod
    def from_rows(
        cls,
        rows: Float[Tensor, "m d"],
        *,
        n_classes: int,
        lam: float,
        center: bool,
        device: torch.device | str = "cpu",
    ) -> Preconditioner:
        """Builds the preconditioner from sample rows."""
        x = rows.to(torch.float32)
        mean = x.mean(0, dtype=torch.float64)
        second = (x.T @ x).double() / x.shape[0]
        return cls.from_moments(
            mean, second, n_classes=n_classes, lam=lam, center=center, device=device
        )


@dataclass(frozen=True)
class LogisticFit:
    """A solution: ``coef`` ``(k, d)``, ``intercept`` ``(k,)`` (k = 1 for two classes)."""

    coef: Float[Tensor, "k d"]
    intercept: Float[Tensor, " k"]
    n_iter: int
    loss: float


def sample_rows(n: int, rng: np.random.Generator, limit: int = PRECONDITION_ROWS) -> Tensor:
    """Sorted indices of at most ``limit`` of ``n`` rows, drawn without replacement."""
    if n <= limit:
        return torch.arange(n)
    return torch.from_numpy(np.sort(rng.choice(n, size=limit, replace=False)))


def identity(d: int, device: torch.device | str = "cpu") -> Preconditioner:
    """No preconditioning (plain L-BFGS on ``W`` and ``b``)."""
    eye = torch.eye(d, device=device)
    return Preconditioner(torch.zeros(d, device=device), eye, eye, 1.0)


def fit_logistic(
    batches: Batches,
    n_rows: int,
    n_classes: int,
    pre: Preconditioner,
    *,
    lam: float,
    fit_intercept: bool = True,
    init: tuple[Tensor, Tensor] | None = None,
    tol: float = 1e-4,
    max_iter: int = 1000,
    history: int = 10,
) -> LogisticFit:
    """Minimizes the penalized mean cross-entropy over ``batches`` with L-BFGS.

    Args:
        batches: The training rows (see :data:`Batches`); labels are codes ``0..n_classes-1``.
        n_rows: Total rows over all batches.
        n_classes: Number of classes (at least 2).
        pre: The preconditioner (its device is the device of the computation).
        lam: The L2 strength ``1 / (C n_rows)``.
        fit_intercept: Learn an intercept.
        init: Warm start ``(coef, intercept)``.
        tol: Stop when the largest absolute entry of the preconditioned gradient, scaled by the
            square root of the inverse curvature seen by L-BFGS, is below this (in preconditioned
            coordinates this measures the gap to the optimum whatever the scale of the features;
            see :func:`lbfgs`).
        max_iter: Most L-BFGS iterations.
        history: L-BFGS memory.

    Returns:
        The solution, its iteration count and final loss.
    """
    k = 1 if n_classes == 2 else n_classes
    d = pre.chol.shape[0]
    device = pre.chol.device
    n_coef = k * d
    theta = torch.zeros(n_coef + (k if fit_intercept else 0), device=device)
    if init is not None:
        w0, b0 = (t.to(device=device, dtype=torch.float32) for t in init)
        theta[:n_coef] = (w0 @ pre.chol).reshape(-1)
        if fit_intercept:
            theta[n_coef:] = (b0 + w0 @ pre.mean) / pre.intercept_scale

    def unpack(theta: Tensor) -> tuple[Tensor, Tensor]:
        coef = theta[:n_coef].view(k, d) @ pre.chol_inv
        if fit_intercept:
            intercept = theta[n_coef:] * pre.intercept_scale - coef @ pre.mean
        else:
            intercept = torch.zeros(k, device=device)
        return coef, intercept

    def value_and_grad(theta: Tensor) -> tuple[float, Tensor]:
        coef, intercept = unpack(theta)
        loss, g_coef, g_int = loss_and_grad(batches, coef, intercept, binary=k == 1)
        loss = loss / n_rows + 0.5 * lam * float((coef * coef).sum())
        g_coef = g_coef / n_rows + lam * coef
        g_int = g_int / n_rows
        if fit_intercept:  # the intercept depends on coef through -coef @ mean
            g_coef = g_coef - torch.outer(g_int, pre.mean)
        grad = (g_coef @ pre.chol_inv.T).reshape(-1)
        if fit_intercept:
            grad = torch.cat([grad, g_int * pre.intercept_scale])
        return loss, grad

    theta, loss, n_iter = lbfgs(value_and_grad, theta, tol=tol, max_iter=max_iter, history=history)
    coef, intercept = unpack(theta)
    if k > 1:
        intercept = intercept - intercept.mean()
    return LogisticFit(coef, intercept, n_iter, loss)


def lbfgs(
    fun: Callable[[Tensor], tuple[float, Tensor]],
    x: Tensor,
    *,
    tol: float,
    max_iter: int,
    history: int = 10,
) -> tuple[Tensor, float, int]:
    """Minimizes a smooth convex ``fun`` (value, gradient) by L-BFGS with backtracking.

    The line search tries the unit step first (right for a well-preconditioned problem) and
    backtracks by interpolation until the Armijo condition holds; directions come from
    :func:`direction`. Near the optimum, objective
    differences drown in float32 rounding while gradients stay accurate, so a step whose objective
    change is within rounding is judged by the directional derivative instead (for a quadratic,
    ``phi'(t) <= (1 - 2 c1) |phi'(0)|`` is the Armijo condition). A curvature pair is kept only
    when ``s.y > 0``. Stops when ``max|grad| * sqrt(max(1, gamma)) <= tol``, ``gamma = s.y / y.y``
    being the inverse curvature along the last step: where the loss has flattened (confident,
    nearly separable fits) a small gradient still hides a large gap to the optimum, and the test
    tightens accordingly. Also stops after ``max_iter`` iterations, or when five steps in a row
    improve neither the objective (by ``FTOL`` relative) nor the gradient.

    Returns:
        The minimizer, its value and the number of iterations.
    """
    c1 = 1e-4
    f, g = fun(x)
    best_g = gmax = float(g.abs().max())
    pairs: list[tuple[Tensor, Tensor]] = []
    n_iter = stalled = 0
    scale = 1.0  # sqrt of the inverse curvature along the last step (L-BFGS's gamma), >= 1
    while n_iter < max_iter and gmax * scale > tol:
        n_iter += 1
        d = direction(g, pairs)
        slope = float(g @ d)
        if slope >= 0:  # not a descent direction: restart from steepest descent
            pairs.clear()
            d, slope = -g, -float(g @ g)
        t = 1.0 if pairs else min(1.0, 1.0 / float(g.norm()))
        while True:
            f_new, g_new = fun(x + t * d)
            change, slope_t = f_new - f, float(g_new @ d)
            if change <= c1 * t * slope:
                break
            if abs(change) <= NOISE * max(1.0, abs(f)) and slope_t <= (1 - 2 * c1) * -slope:
                break
            if slope_t > 0:  # secant on the directional derivative
                t_new = t * -slope / (slope_t - slope)
            else:
                denom = 2.0 * (change - t * slope)
                t_new = -slope * t * t / denom if denom > 0 else 0.5 * t
            t = min(max(t_new, 0.1 * t), 0.5 * t)
            if t < 1e-10:
                return x, f, n_iter  # no step improves on x within float precision
        s, y = t * d, g_new - g
        sy, yy = float(s @ y), float(y @ y)
        if sy > 1e-10 * yy:
            scale = max(1.0, sy / yy) ** 0.5
            pairs.append((s, y))
            if len(pairs) > history:
                pairs.pop(0)
        gmax = float(g_new.abs().max())
        progress = f - f_new > FTOL * max(1.0, abs(f)) or gmax < 0.9 * best_g
        stalled = 0 if progress else stalled + 1
        best_g = min(best_g, gmax)
        x, f, g = x + s, f_new, g_new
        if stalled >= 5:
            break
    return x, f, n_iter


def direction(g: Tensor, pairs: list[tuple[Tensor, Tensor]]) -> Tensor:
    """``-H g`` for the L-BFGS inverse Hessian ``H`` of the stored pairs, in compact form.

    Byrd, Nocedal & Schnabel (1994; Nocedal & Wright eq. 7.24): with ``S``, ``Y`` the stored steps
    and gradient changes, ``R = triu(S^T Y)``, ``D = diag(S^T Y)`` and ``H0 = gamma I``,
    ``H g = gamma g + S p + gamma Y q`` where ``q = -R^-1 S^T g`` and
    ``p = R^-T ((D + gamma Y^T Y) R^-1 S^T g - gamma Y^T g)``. Three matrix products on the
    device and a ``2m x 2m`` solve on the CPU, instead of the two-loop recursion's ``4m`` dot
    products, each a device round trip.
    """
    if not pairs:
        return -g
    m = len(pairs)
    basis = torch.stack([s for s, _ in pairs] + [y for _, y in pairs])
    gram = (basis @ basis.T).double().cpu().numpy()
    proj = (basis @ g).double().cpu().numpy()
    sty, yty = gram[:m, m:], gram[m:, m:]
    gamma = sty[-1, -1] / yty[-1, -1]
    r = np.triu(sty)
    r_inv_a = solve_triangular(r, proj[:m])
    p = solve_triangular(
        r, (np.diag(np.diag(sty)) + gamma * yty) @ r_inv_a - gamma * proj[m:], trans="T"
    )
    coeffs = torch.from_numpy(np.concatenate([p, -gamma * r_inv_a])).to(g)
    return -(gamma * g + coeffs @ basis)


def loss_and_grad(
    batches: Batches, coef: Float[Tensor, "k d"], intercept: Float[Tensor, " k"], *, binary: bool
) -> tuple[float, Tensor, Tensor]:
    """Summed cross-entropy over the batches and its gradients in ``coef`` and ``intercept``."""
    total = torch.zeros((), dtype=torch.float64, device=coef.device)
    g_coef = torch.zeros_like(coef)
    g_int = torch.zeros_like(intercept)
    device = coef.device
    for x_batch, y_batch in batches():
        for x, y in zip(x_batch.split(CHUNK_ROWS), y_batch.split(CHUNK_ROWS), strict=True):
            x = x.to(device=device, dtype=torch.float32, non_blocking=True)
            y = y.to(device=device, non_blocking=True)
            logits = torch.addmm(intercept, x, coef.T)
            if binary:
                logits = torch.cat([torch.zeros_like(logits), logits], 1)
            lse = torch.logsumexp(logits, 1)
            total += (lse - logits.gather(1, y[:, None]).squeeze(1)).sum()
            g = torch.exp(logits - lse[:, None])
            g[torch.arange(len(y), device=device), y] -= 1.0
            if binary:
                g = g[:, 1:]
            g_coef.addmm_(g.T, x)
            g_int += g.sum(0)
    return float(total), g_coef, g_int


def objective(
    batches: Batches,
    n_rows: int,
    coef: Float[Tensor, "k d"],
    intercept: Float[Tensor, " k"],
    *,
    lam: float,
) -> float:
    """The penalized mean cross-entropy at ``(coef, intercept)`` (a forward pass only)."""
    total = torch.zeros((), dtype=torch.float64, device=coef.device)
    for x_batch, y_batch in batches():
        for x, y in zip(x_batch.split(CHUNK_ROWS), y_batch.split(CHUNK_ROWS), strict=True):
            logits = torch.addmm(intercept, x.to(coef.device, torch.float32), coef.T)
            if coef.shape[0] == 1:
                logits = torch.cat([torch.zeros_like(logits), logits], 1)
            y = y.to(coef.device)
            total += (torch.logsumexp(logits, 1) - logits.gather(1, y[:, None]).squeeze(1)).sum()
    return float(total) / n_rows + 0.5 * lam * float((coef * coef).sum())


def prior_intercept(counts: Tensor) -> Tensor:
    """The intercept of ``coef = 0`` that minimizes the loss: log class frequencies."""
    logp = torch.log(counts.double() / counts.sum())
    if len(counts) == 2:
        return (logp[1:] - logp[:1]).float()
    return (logp - logp.mean()).float()


def prior_loss(counts: Tensor) -> float:
    """The mean cross-entropy of :func:`prior_intercept` (the entropy of the class frequencies)."""
    p = counts.double() / counts.sum()
    return float(-(p * torch.log(p)).sum())


def predict_codes(
    x: Float[Tensor, "n d"], coef: Float[Tensor, "k d"], intercept: Float[Tensor, " k"]
) -> Int[Tensor, " n"]:
    """Predicted class codes of a linear classifier (k = 1: binary by the sign of the logit)."""
    out = []
    for chunk in x.split(CHUNK_ROWS):
        logits = torch.addmm(intercept, chunk.to(coef.device, torch.float32), coef.T)
        out.append((logits[:, 0] > 0).long() if coef.shape[0] == 1 else logits.argmax(1))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long, device=coef.device)
