"""Partition-function isotropy.

After Mu & Viswanath 2018, "All-but-the-top: simple and effective postprocessing for word
representations", and Arora et al. 2016.

For vectors ``x_i`` the partition function in direction ``c`` is ``Z(c) = Σ_i exp(cᵀ x_i)``.
If the vectors are isotropic, ``Z(c)`` is nearly the same for every unit ``c``, so

    I(X) = min_c Z(c) / max_c Z(c)

is close to 1; a common direction or a dominant mean makes it collapse towards 0. The extremes over
all unit vectors cannot be computed, so Mu & Viswanath take ``c`` over the eigenvectors of ``XᵀX``
(no centring: the mean is part of what the measure detects). An eigenvector's sign is arbitrary and
``Z(c) ≠ Z(-c)``, so we use both signs of every eigenvector, which makes the value well defined.

``exp(cᵀ x)`` overflows for large activations, so everything is computed as ``log Z(c)`` with
log-sum-exp, and the ratio as ``exp(min log Z - max log Z)``.
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.geometry._input import as_matrix

__all__ = ["partition_isotropy"]


def partition_isotropy(x: Any) -> float:
    """``min Z(c) / max Z(c)`` over the (signed) eigenvectors ``c`` of ``XᵀX``.

    Args:
        x: An (n, d) array or tensor, n >= 2; not centred.

    Returns:
        A float in [0, 1]; 1 means isotropic. Can underflow to 0.0 for very anisotropic data
        (the ratio is then below about 1e-308).

    Raises:
        InputError: Bad shape or non-finite values.
    """
    xt = torch.from_numpy(as_matrix(x, min_rows=2))
    _, vecs = torch.linalg.eigh(xt.T @ xt)
    proj = xt @ vecs  # (n, d): c_jᵀ x_i for every eigenvector c_j
    log_z = torch.cat([torch.logsumexp(proj, dim=0), torch.logsumexp(-proj, dim=0)])
    return float(torch.exp(log_z.min() - log_z.max()))
