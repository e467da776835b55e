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
    """

    steps: int = 250
    batch_tokens: int = 512
    lr: float = 1.0
    momentum: float = 0.9
    weight_decay: float = 1e-3
    optimizer: Literal["sgd", "adam"] = "sgd"
    seed: int = 0
    clip: float = 1.0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_tokens < 1:
            raise LensError(
                f"steps and batch_tokens must be at least 1, got {self.steps}, {self.batch_tokens}"
            )
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
    curves: dict[str, Any] = {"trained_layers": trainable}
    if not trainable:
        return weight, bias, curves
    device = subject.device
    w = torch.zeros(len(trainable), d, d, device=device, requires_grad=True)
    b = torch.zeros(len(trainable), d, device=device, requires_grad=True)
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
