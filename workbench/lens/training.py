"""The tuned lens's training loop, on captured activations (see :mod:`workbench.lens.tuned`).

The model is never run here: the rows of every layer come from one capture, the model's final
distribution is recomputed per minibatch from the last layer's rows through its own head, and
gradients are taken with :func:`torch.autograd.grad` with respect to the translators only, so
nothing accumulates in the model's ``.grad``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from workbench.lens.core import LensError, decode
from workbench.models.subject import Subject


@dataclass(frozen=True)
class TunedLensTraining:
    """Hyperparameters of :meth:`TunedLens.train`.

    Attributes:
        steps: Optimizer steps.
        batch_tokens: Token rows per step (every trainable layer sees the same rows).
        lr: Learning rate. For ``"sgd"`` in the momentum-corrected scale (the optimizer gets
            ``lr * (1 - momentum)``, so 1.0 is the paper's default); for ``"adam"`` as given.
        momentum: SGD momentum (Nesterov), or Adam's beta1.
        weight_decay: L2 penalty on the translators (it pulls them towards the identity).
        optimizer: ``"sgd"`` (the paper's) or ``"adam"``.
        seed: Seed of the row order.
        clip: Gradient norm clip.
        init: Where the translators start: ``"identity"`` (the paper's: the logit lens) or
            ``"least_squares"``: each layer's affine map fitted in closed form to the last
            layer's residual on the same rows (the linear shortcut of Din et al. 2023, arXiv
            2303.09435), which the KL steps (if any) then refine. On a real LM the KL steps cost
            a full-vocabulary softmax per row, layer and step; the closed form costs one
            ``(d+1) x (d+1)`` solve per layer.
        ridge: For ``"least_squares"``: the penalty, as a share of the mean variance of the
            inputs (a small one keeps the solve well posed when rows are few).
    """

    steps: int = 250
    batch_tokens: int = 512
    lr: float = 1.0
    momentum: float = 0.9
    weight_decay: float = 1e-3
    optimizer: Literal["sgd", "adam"] = "sgd"
    seed: int = 0
    clip: float = 1.0
    init: Literal["identity", "least_squares"] = "identity"
    ridge: float = 1e-3

    def __post_init__(self) -> None:
        if self.init not in ("identity", "least_squares"):
            raise LensError(f"unknown init {self.init!r}; use 'identity' or 'least_squares'")
        least = 0 if self.init == "least_squares" else 1
        if self.steps < least or self.batch_tokens < 1:
            raise LensError(
                f"steps must be at least {least} (0 only with init='least_squares') and "
                f"batch_tokens at least 1, got {self.steps}, {self.batch_tokens}"
            )
        if (
            not (isinstance(self.ridge, int | float) and math.isfinite(self.ridge))
            or self.ridge < 0
        ):
            raise LensError(f"ridge must be a number >= 0, got {self.ridge!r}")
        if self.optimizer not in ("sgd", "adam"):
            raise LensError(f"unknown optimizer {self.optimizer!r}; use 'sgd' or 'adam'")
        for name in ("lr", "clip"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise LensError(f"{name} must be a positive number, got {value!r}")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise LensError(
                f"momentum must be in [0, 1) and weight_decay >= 0, got {self.momentum}, "
                f"{self.weight_decay}"
            )


def least_squares_translators(
    rows: list[Tensor], ridge: float
) -> tuple[Float[Tensor, "layer d d"], Float[Tensor, "layer d"]]:
    """Each layer's affine map to the last layer's residual, by ridge-regularised least squares.

    For layer ``l`` it solves ``min ||(X_l - mean) B + mean_Y - Y||^2 + lam ||B||^2`` in float64,
    where ``Y`` is the last layer's rows and ``lam`` is ``ridge`` times the mean variance of
    ``X_l`` (the intercept is not penalised), and returns it in the translator's form
    ``T_l(h) = h + h @ W_l.T + b_l``: ``W_l = B.T - I``. The last layer's map is the identity.

    Args:
        rows: ``resid_post`` rows of every layer, each (n_rows, d_model), same rows in each.
        ridge: The penalty's share of the mean input variance.

    Returns:
        ``(weight, bias)`` of shapes (n_layers, d, d) and (n_layers, d), float32.
    """
    n_layers, d = len(rows), rows[0].shape[1]
    weight = torch.zeros(n_layers, d, d)
    bias = torch.zeros(n_layers, d)
    y = rows[-1].to(torch.float64)
    y_mean = y.mean(0)
    eye = torch.eye(d, dtype=torch.float64)
    for layer in range(n_layers - 1):
        x = rows[layer].to(torch.float64)
        x_mean = x.mean(0)
        xc = x - x_mean
        gram = xc.T @ xc
        lam = ridge * float(gram.diagonal().mean())
        b = torch.linalg.solve(gram + lam * eye, xc.T @ (y - y_mean))
        weight[layer] = (b.T - eye).to(torch.float32)
        bias[layer] = (y_mean - x_mean @ b).to(torch.float32)
    return weight, bias


def fit_translators(
    subject: Subject,
    norm: Any,
    unembed: Any,
    rows: list[Tensor],
    settings: TunedLensTraining,
    progress: bool,
) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """The training loop: minibatches of captured rows, KL(final || lens) summed over layers.

    Args:
        subject: The model (its head decodes the translated rows; its weights get no gradient).
        norm: The ``final_norm`` site, or ``None``.
        unembed: The ``unembed`` site.
        rows: ``resid_post`` rows of every layer, each (n_rows, d_model), same rows in each.
        settings: Hyperparameters.
        progress: Show a progress bar.

    Returns:
        ``(weight, bias, curves)``: translators for every layer (the last one zero, i.e. the
        identity) and the training KL by layer at the first step and over the last 10% of steps.
    """
    n_layers, (n_rows, d) = len(rows), rows[0].shape
    trainable = list(range(n_layers - 1))
    weight = torch.zeros(n_layers, d, d)
    bias = torch.zeros(n_layers, d)
    curves: dict[str, Any] = {"trained_layers": trainable, "init": settings.init}
    if not trainable:
        return weight, bias, curves
    if settings.init == "least_squares":
        weight, bias = least_squares_translators(rows, settings.ridge)
        if settings.steps == 0:
            return weight, bias, curves
    device = subject.device
    w = weight[trainable].clone().to(device).requires_grad_(True)
    b = bias[trainable].clone().to(device).requires_grad_(True)
    s = settings
    if s.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            [w, b],
            lr=s.lr * (1 - s.momentum),
            momentum=s.momentum,
            nesterov=s.momentum > 0,
            weight_decay=s.weight_decay,
        )
    else:
        opt = torch.optim.Adam(
            [w, b], lr=s.lr, betas=(s.momentum, 0.999), weight_decay=s.weight_decay
        )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / s.steps)
    gen = torch.Generator().manual_seed(s.seed)
    order, cursor = torch.randperm(n_rows, generator=gen), 0
    batch = min(s.batch_tokens, n_rows)
    history = []
    for _ in tqdm(range(s.steps), desc="train tuned lens", disable=not progress):
        if cursor + batch > n_rows:
            order, cursor = torch.randperm(n_rows, generator=gen), 0
        idx = order[cursor : cursor + batch]
        cursor += batch
        with torch.no_grad():
            final = torch.log_softmax(decode(subject, norm, unembed, rows[-1][idx]), dim=-1)
            p_final = final.exp()
        x = torch.stack([rows[layer][idx] for layer in trainable]).to(device)
        y = x + x @ w.transpose(1, 2) + b[:, None, :]
        logits = decode(subject, norm, unembed, y.reshape(-1, d)).reshape(len(trainable), batch, -1)
        logp = torch.log_softmax(logits, dim=-1)
        kl = (p_final * (final - logp)).sum(-1).mean(-1)
        grads = torch.autograd.grad(kl.sum(), [w, b])
        norm_all = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        scale = min(1.0, s.clip / (float(norm_all) + 1e-6))
        w.grad, b.grad = grads[0] * scale, grads[1] * scale
        opt.step()
        sched.step()
        history.append(kl.detach().cpu())
    k = max(1, s.steps // 10)
    curves["train_kl_first"] = [round(float(v), 6) for v in history[0]]
    curves["train_kl_last"] = [round(float(v), 6) for v in torch.stack(history[-k:]).mean(0)]
    weight[trainable] = w.detach().cpu()
    bias[trainable] = b.detach().cpu()
    return weight, bias, curves
