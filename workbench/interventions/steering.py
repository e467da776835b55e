"""Steering vectors as differences of means.

A concept's direction in the residual stream can be estimated as the difference between the mean
activation over inputs that have it and the mean over inputs that do not (contrastive activation
addition, Rimsky et al., 2024, arXiv 2312.06681; mass-mean probing, Marks & Tegmark, 2024, arXiv
2310.06824). Adding it with :func:`~workbench.interventions.add` steers the model towards the
concept; projecting it out with :func:`~workbench.interventions.project_out` removes it.
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.capturing import Activations
from workbench.errors import InterventionError


def steering_vector(a: Any, b: Any, site: str | None = None) -> Float[Tensor, " d"]:
    """The difference of means ``mean(a) - mean(b)`` (contrastive steering vector).

    Args:
        a: ``(n_a, d)`` rows (tensor or array), or :class:`~workbench.Activations`.
        b: ``(n_b, d)`` rows, or :class:`~workbench.Activations`.
        site: The site to read when ``a``/``b`` are Activations (may be omitted when they hold one
            site).

    Returns:
        ``(d,)`` float32, computed in float64.
    """
    mean_a, mean_b = _mean_rows(a, site, "a"), _mean_rows(b, site, "b")
    if mean_a.shape != mean_b.shape:
        raise InterventionError(
            f"steering_vector: a has width {mean_a.shape[0]} but b has width {mean_b.shape[0]}"
        )
    return (mean_a - mean_b).float()


def _mean_rows(value: Any, site: str | None, what: str) -> Tensor:
    if isinstance(value, Activations):
        if site is None:
            if len(value) != 1:
                raise InterventionError(
                    f"steering_vector: {what} holds sites {', '.join(value.sites)}; pass site="
                )
            site = value.sites[0]
        if site not in value:
            raise InterventionError(
                f"steering_vector: {what} holds no site {site!r}; captured: "
                f"{', '.join(value.sites)}"
            )
        value = value[site]
    rows = torch.as_tensor(value).detach()
    if rows.dim() == 1:
        rows = rows.unsqueeze(0)
    if rows.dim() != 2 or rows.shape[0] == 0:
        raise InterventionError(
            f"steering_vector: {what} must be (n, d) rows with n >= 1, got {tuple(rows.shape)}"
        )
    return rows.double().mean(0)
