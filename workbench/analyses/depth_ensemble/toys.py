"""Teacher-student residual toys: the only place the study builds and trains toy networks.

The paper's control experiment (Liu et al., 2026, arXiv 2602.05970, Sec. 4; ``exp/exp-9*.py`` of
its release). A network of residual MLP blocks

    x <- rmsnorm(x_in);   x <- x + W2 relu(W1 rmsnorm(x) + b1)^2  (depth times);
    logits = W_head rmsnorm(x)

of width 32 (hidden 128) maps Gaussian inputs to 128 classes. A deep **teacher** (128 layers,
each ``W2`` scaled by ``1/sqrt(128)``) defines the target distribution ``softmax(logits / T)``:

* *independent* teacher: every layer has its own random weights, so the layers' updates are
  uncorrelated (successive increments nearly orthogonal): a target that smooth dynamics cannot
  describe;
* *tied* teacher: one layer repeated 128 times, a discretized ODE (successive increments nearly
  parallel): a target that a shallower network can approximate by taking larger steps.

**Students** of several depths start with ``W2 = 0`` and ``W_head = 0`` and are trained by
:func:`workbench.train.train` on the KL divergence to the teacher. How their held-out loss falls
with depth, ``L = L0 + c / l^a``, tells the regimes apart: ensemble averaging of similar layers
gives ``a ~ 1``, a discretized ODE a steeper fall.

The teacher's outputs are computed once, on a fixed pool of inputs, and students draw minibatches
from that pool (running a 128-layer teacher every step would dominate the cost).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from workbench.analyses.depth_ensemble.config import ToyPreset
from workbench.devices import torch_threads
from workbench.train import TrainConfig, TrainResult, train

log = logging.getLogger(__name__)

THREADS = 1
"""CPU threads of the toys' training and evaluation (see :func:`single_thread`): the thread count
changes how float sums are split, so the toys would otherwise change with the machine's cores."""


@contextmanager
def single_thread() -> Iterator[None]:
    """Torch on :data:`THREADS` CPU threads inside the block (restored after)."""
    with torch_threads(THREADS):
        yield


def rmsnorm(x: Tensor) -> Tensor:
    """Root-mean-square normalization over the last axis (no gain)."""
    return F.rms_norm(x, (x.shape[-1],))


class ResidualBlock(nn.Module):
    """``x -> W2 relu(W1 rmsnorm(x) + b1)^2`` (the update a block adds to the stream)."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, hidden, bias=True)
        self.proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """The block's update (without the residual add)."""
        return self.proj(F.relu(self.fc(rmsnorm(x))).square())


class ResidualToy(nn.Module):
    """A stack of :class:`ResidualBlock` with a linear head.

    Args:
        depth: Number of blocks.
        width: Residual width.
        vocab: Output classes.
        tied: One block repeated ``depth`` times (shared weights) instead of ``depth`` blocks.
    """

    def __init__(self, depth: int, *, width: int = 32, vocab: int = 128, tied: bool = False):
        super().__init__()
        if tied:
            block = ResidualBlock(width, 4 * width)
            self.blocks = nn.ModuleList([block] * depth)
        else:
            self.blocks = nn.ModuleList(ResidualBlock(width, 4 * width) for _ in range(depth))
        self.head = nn.Linear(width, vocab, bias=False)
        self.tied = tied

    @property
    def depth(self) -> int:
        """Number of blocks."""
        return len(self.blocks)

    def forward(self, x: Float[Tensor, "n width"]) -> Float[Tensor, "n vocab"]:
        """Logits of inputs ``x``."""
        h = rmsnorm(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(rmsnorm(h))

    def states(self, x: Float[Tensor, "n width"]) -> Float[Tensor, "layer_plus_1 n width"]:
        """The stream before the first block and after each block, ``(depth + 1, n, width)``."""
        h = rmsnorm(x)
        out = [h]
        for block in self.blocks:
            h = h + block(h)
            out.append(h)
        return torch.stack(out)


def make_teacher(kind: str, preset: ToyPreset, seed: int) -> ResidualToy:
    """The teacher: PyTorch's default init, each ``W2`` scaled by ``1/sqrt(depth)``.

    Args:
        kind: ``independent`` or ``tied``.
        preset: Width, vocabulary and depth.
        seed: Its initialization seed (the same for both kinds, so the tied teacher's one layer
            is the independent teacher's first).
    """
    depth = preset.teacher_depth
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        teacher = ResidualToy(depth, width=preset.width, vocab=preset.vocab, tied=kind == "tied")
    with torch.no_grad():
        for block in {id(b): b for b in teacher.blocks}.values():
            block.proj.weight.mul_(depth**-0.5)
    return teacher.eval().requires_grad_(False)


def make_student(depth: int, preset: ToyPreset) -> ResidualToy:
    """A student: default init with ``W2 = 0`` and a zero head (it starts as the uniform guess)."""
    student = ResidualToy(depth, width=preset.width, vocab=preset.vocab)
    with torch.no_grad():
        for block in student.blocks:
            block.proj.weight.zero_()
        student.head.weight.zero_()
    return student


@dataclass(frozen=True)
class ToyData:
    """Inputs and the teacher's log-probabilities: a training pool and a held-out set.

    Attributes:
        x: Training inputs ``(pool, width)``.
        logp: Teacher log-probabilities on them ``(pool, vocab)``.
        x_test: Held-out inputs ``(n_test, width)``.
        logp_test: Teacher log-probabilities on them.
    """

    x: Tensor
    logp: Tensor
    x_test: Tensor
    logp_test: Tensor


@torch.no_grad()
def teacher_outputs(
    teacher: ResidualToy, preset: ToyPreset, seed: int, device: str | torch.device = "cpu"
) -> ToyData:
    """Draws the input pool and the held-out inputs and runs the teacher on them, once.

    Inputs are standard Gaussian, drawn from a generator seeded with ``seed`` (pool first, then
    the held-out set). The teacher runs in chunks on ``device``; the results stay there.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(preset.pool, preset.width, generator=g)
    x_test = torch.randn(preset.n_test, preset.width, generator=g)
    teacher = teacher.to(device)

    def run(inputs: Tensor) -> Tensor:
        parts = [
            torch.log_softmax(teacher(chunk.to(device)) / preset.temperature, dim=-1)
            for chunk in inputs.split(8192)
        ]
        return torch.cat(parts)

    return ToyData(x.to(device), run(x), x_test.to(device), run(x_test))


def kl_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """KL(teacher || student), averaged over the batch (the students' training loss)."""
    x, teacher_logp = batch
    return F.kl_div(
        torch.log_softmax(model(x), dim=-1), teacher_logp, log_target=True, reduction="batchmean"
    )


def train_student(
    depth: int,
    data: ToyData,
    preset: ToyPreset,
    *,
    seed: int,
    device: str = "cpu",
    progress: bool = False,
    desc: str = "student",
) -> TrainResult:
    """Trains one student on minibatches of the teacher's pool with :func:`workbench.train.train`.

    AdamW without weight decay (Adam), the preset's learning rate with a linear warm-up and a
    cosine decay to ``min_lr_ratio``, no gradient clipping (as the paper).
    """
    config = TrainConfig(
        steps=preset.steps,
        lr=preset.lr,
        weight_decay=0.0,
        warmup=preset.warmup,
        min_lr_ratio=preset.min_lr_ratio,
        grad_clip=None,
        batch_size=preset.batch_size,
        seed=seed,
        device=device,
        threads=THREADS,
    )
    return train(
        lambda: make_student(depth, preset),
        config,
        loss_fn=kl_loss,
        data=(data.x, data.logp),
        progress=progress,
        desc=desc,
    )


@torch.no_grad()
def per_example_kl(model: nn.Module, x: Tensor, teacher_logp: Tensor) -> np.ndarray:
    """KL(teacher || model) of each example, float64 ``(n,)``."""
    model.eval()
    out = []
    for xs, ts in zip(x.split(8192), teacher_logp.split(8192), strict=True):
        logq = torch.log_softmax(model(xs), dim=-1).double()
        t = ts.double()
        out.append((t.exp() * (t - logq)).sum(-1).clamp(min=0.0).cpu())
    return torch.cat(out).numpy()


@torch.no_grad()
def entropy(logp: Tensor) -> float:
    """Mean entropy (nats) of distributions given as log-probabilities ``(n, vocab)``."""
    p = logp.double()
    return float(-(p.exp() * p).sum(-1).mean())


@torch.no_grad()
def toy_states(model: ResidualToy, x: Tensor) -> np.ndarray:
    """The residual stream ``(depth + 1, n, width)`` as float64 on the CPU."""
    model.eval()
    return model.states(x).double().cpu().numpy()
