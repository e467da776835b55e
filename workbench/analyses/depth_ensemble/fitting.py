"""Power-law fits on log loss: ``L = L0 + sum_k c_k x_k^-a_k``, standard errors and bootstraps.

Both fits of the study are one model: a floor ``L0`` plus power-law terms in positive variables,
fitted by least squares on ``log L`` (relative errors, as the paper does) with scipy's trust-region
reflective solver and an analytic Jacobian:

* the toys: ``L(l) = L0 + c / l^a`` over student depths ``l`` (:func:`fit_power_law`);
* the scaling law: ``L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0`` over runs of width ``m``,
  depth ``l`` and data ``D`` (:func:`~workbench.analyses.depth_ensemble.scaling.fit_scaling_law`).

Parameters are ``theta = (log c_1, a_1, ..., log c_K, a_K, L0)``. Each variable is divided by its
geometric mean while fitting (the exponents do not change; the coefficients are converted back),
which makes one generic set of starting points work: a small grid of starts, the lowest cost wins.
Bounds: ``0 <= a <= 10`` and ``0 <= L0 <= min(L)``.

Standard errors: ``Cov = s^2 (J^T J)^-1`` with ``J`` the Jacobian of the log residuals at the
optimum and ``s^2 = sum r^2 / (n - p)`` (undefined, ``NaN``, without spare degrees of freedom);
the coefficients' errors follow by the delta method. The bootstrap refits resampled data (runs,
or held-out examples of the toys) from the optimum through :func:`workbench.stats.bootstrap`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.errors import ConfigError, InputError

MAX_EXPONENT = 10.0


@dataclass(frozen=True)
class LogFit:
    """A fitted ``L0 + sum_k c_k x_k^-a_k`` on log loss, in the variables' own units.

    Attributes:
        theta: ``(log c_1, a_1, ..., log c_K, a_K, L0)``, shape ``(2K + 1,)``.
        cov: Covariance of ``theta`` from the Jacobian, ``(2K + 1, 2K + 1)`` (``NaN`` without
            spare degrees of freedom).
        residuals: ``log L - log fit`` at each point, ``(n,)``.
        cost: Half the sum of squared log residuals.
    """

    theta: np.ndarray
    cov: np.ndarray
    residuals: np.ndarray
    cost: float

    @property
    def se(self) -> np.ndarray:
        """Standard errors of ``theta``."""
        return np.sqrt(np.clip(np.diag(self.cov), 0, None))


def predict(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``L0 + sum_k exp(log c_k - a_k log x_k)`` for ``x`` of shape ``(n, K)``."""
    k = x.shape[1]
    logx = np.log(x)
    terms = np.exp(theta[0 : 2 * k : 2] - theta[1 : 2 * k : 2] * logx)
    return terms.sum(axis=1) + theta[-1]


def _jacobian(theta: np.ndarray, logx: np.ndarray) -> np.ndarray:
    """d(log L - log fit)/d theta, ``(n, 2K + 1)``."""
    k = logx.shape[1]
    terms = np.exp(theta[0 : 2 * k : 2] - theta[1 : 2 * k : 2] * logx)
    fit = terms.sum(axis=1) + theta[-1]
    jac = np.empty((len(logx), 2 * k + 1))
    jac[:, 0 : 2 * k : 2] = -terms / fit[:, None]
    jac[:, 1 : 2 * k : 2] = terms * logx / fit[:, None]
    jac[:, -1] = -1.0 / fit
    return jac


def _solve(
    logx: np.ndarray, logy: np.ndarray, starts: Sequence[np.ndarray], upper_l0: float
) -> tuple[np.ndarray, float]:
    try:
        from scipy.optimize import least_squares
    except ImportError as exc:  # scipy comes with the notebooks extra
        raise ConfigError(
            "the power-law fits need scipy; install it with: pip install 'workbench[notebooks]'"
        ) from exc

    k = logx.shape[1]
    lower = np.array([-np.inf, 0.0] * k + [0.0])
    upper = np.array([np.inf, MAX_EXPONENT] * k + [upper_l0])

    def residual(theta: np.ndarray) -> np.ndarray:
        terms = np.exp(theta[0 : 2 * k : 2] - theta[1 : 2 * k : 2] * logx)
        return logy - np.log(terms.sum(axis=1) + theta[-1])

    best: tuple[np.ndarray, float] | None = None
    for start in starts:
        x0 = np.clip(start, lower, upper)
        x0[-1] = min(x0[-1], upper_l0 * (1 - 1e-9))
        sol = least_squares(
            residual,
            x0,
            jac=lambda t: _jacobian(t, logx),
            bounds=(lower, upper),
            method="trf",
            x_scale="jac",
            xtol=1e-12,
            ftol=1e-12,
            gtol=1e-12,
            max_nfev=2000,
        )
        if np.isfinite(sol.cost) and (best is None or sol.cost < best[1]):
            best = (sol.x, float(sol.cost))
    if best is None:
        raise InputError("the power-law fit failed from every starting point")
    return best


def _starts(k: int, y: np.ndarray) -> list[np.ndarray]:
    floor = float(y.min())
    out = []
    for l0 in (0.25 * floor, 0.5 * floor, 0.8 * floor):
        height = max(float(np.mean(y)) - l0, 1e-12) / k
        for a in (0.5, 1.0, 2.0):
            out.append(np.array([np.log(height), a] * k + [l0]))
    return out


def fit_log_power_law(
    x: np.ndarray,
    y: np.ndarray,
    *,
    start: np.ndarray | None = None,
) -> LogFit:
    """Fits ``y = L0 + sum_k c_k x_k^-a_k`` on ``log y`` (see the module docstring).

    Args:
        x: Positive variables, ``(n, K)``.
        y: Positive losses, ``(n,)``.
        start: One starting ``theta`` (in the variables' own units) instead of the grid, e.g. the
            full fit's optimum for a bootstrap refit.

    Raises:
        InputError: Non-positive or non-finite values, or fewer points than parameters.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.shape != (len(x),):
        raise InputError(f"x must be (n, K) and y (n,), got {x.shape} and {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all() and (x > 0).all() and (y > 0).all()):
        raise InputError("a power-law fit needs finite, positive variables and losses")
    k = x.shape[1]
    p = 2 * k + 1
    if len(y) < p:
        raise InputError(f"{len(y)} points cannot determine {p} parameters")
    ref = np.exp(np.log(x).mean(axis=0))
    logx = np.log(x / ref)
    shift = np.zeros(p)
    shift[0 : 2 * k : 2] = np.log(ref)  # log c (own units) = log c (scaled) + a log ref
    if start is None:
        starts = _starts(k, y)
    else:
        scaled = np.asarray(start, dtype=np.float64).copy()
        scaled[0 : 2 * k : 2] -= scaled[1 : 2 * k : 2] * np.log(ref)
        starts = [scaled]
    theta, cost = _solve(logx, np.log(y), starts, float(y.min()))
    jac = _jacobian(theta, logx)
    residuals = np.log(y) - np.log(predict(theta, np.exp(logx)))
    dof = len(y) - p
    if dof > 0:
        s2 = float(residuals @ residuals) / dof
        cov_scaled = s2 * np.linalg.pinv(jac.T @ jac)
    else:
        cov_scaled = np.full((p, p), np.nan)
    # theta_own = A theta_scaled: log c_k gains a_k log ref_k
    a_map = np.eye(p)
    for i in range(k):
        a_map[2 * i, 2 * i + 1] = np.log(ref[i])
    own = a_map @ theta
    return LogFit(own, a_map @ cov_scaled @ a_map.T, residuals, cost)


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Minus the least-squares slope of ``log y`` on ``log x`` (a power law with no floor)."""
    slope = np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0]
    return float(-slope)
