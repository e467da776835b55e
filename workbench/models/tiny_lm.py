"""``tiny-lm``: a small causal LM the workbench trains itself, offline and deterministically.

The corpus is the English reference text that ships with CPython (``pydoc_data.topics``,
about 465 KB).
A byte-level BPE tokenizer is trained on it with ``tokenizers`` (about 129k tokens); then a
4-layer GPT-2-style model is trained by :func:`workbench.train.train` (AdamW, warm-up and cosine
decay, clipping) on random 128-token windows of the token stream. Checkpoints are saved at
log-spaced steps (0, 10, 20, 50, 100, 200, 500), step 0 being the initialization, so that
training-dynamics analyses can follow a metric across training. It trains on one CPU thread,
whatever the process's thread count: the same seed gives the same weights on any machine with the
same CPU kernels (AVX-512, AVX2 or scalar), on any number of cores, in a serial or a parallel run.
With the process's own count (``v2``), one and two threads differed by 2e-6 after 10 steps, and a
two-thread run on a CPU shared with other busy processes was 3.6x (the default) to 8x (a test
model) slower than one thread.

The default (since ``v2``) sees about 2M tokens: 500 steps of 32 windows. The first default (``v1``,
500 steps of 8 windows, 0.5M tokens) was undertrained: its last layer put frequent tokens *farther*
from the centroid (frequency-distance correlation about +0.27), the opposite of trained LMs; with
4x the tokens the sign turns negative (about -0.3) and IsoScore doubles, while anisotropy still
rises sharply in the first 20 steps and falls after.

The checkpoints live in ``$WORKBENCH_HOME/tiny-lm/<tag>-<key>/step-N`` (``WORKBENCH_HOME``
defaults to ``~/.cache/workbench``; ``key`` hashes the whole :func:`recipe`, corpus included) and
are built on first use. A run writes into a temporary folder that is
renamed into place only when complete, so an interrupted run leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from workbench.errors import ConfigError

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"
CACHE_VERSION = "v3"
"""Cache generation: bumped when the default changes (v2: batch 32 instead of 8; v3: trained on one
thread), so that an old cached model is never taken for the new default."""
THREADS = 1
"""CPU threads of the training (the float sums, hence the weights, depend on the count)."""


@dataclass(frozen=True)
class TinyLMConfig:
    """Hyperparameters of the embedded causal LM.

    Attributes:
        steps: Optimizer steps.
        seed: Seed for initialization and batch sampling.
        vocab_size: BPE vocabulary size.
        d_model: Residual width.
        n_layers: Transformer blocks.
        n_heads: Attention heads.
        seq_len: Training window (and maximum context).
        batch_size: Windows per step.
        lr: Peak learning rate (linear warm-up, then cosine decay to 10%).
        warmup: Warm-up steps.
    """

    steps: int = 500
    seed: int = 0
    vocab_size: int = 2048
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    seq_len: int = 128
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 50

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"steps must be at least 1, got {self.steps}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    @property
    def tag(self) -> str:
        """Folder name of this configuration in the cache.

        ``v3-default``, or ``v3-`` followed by the fields that differ from the default, such as
        ``v3-steps2000``.
        """
        default = TinyLMConfig()
        changed = [f"{k}{v}" for k, v in asdict(self).items() if v != getattr(default, k)]
        return "-".join([CACHE_VERSION, *changed]) if changed else f"{CACHE_VERSION}-default"


def checkpoint_steps(steps: int) -> list[int]:
    """Log-spaced checkpoint steps: 0, then 10, 20, 50, 100, ... below ``steps``, then ``steps``."""
    from workbench.train import log_steps

    return list(log_steps(steps))


def corpus() -> list[str]:
    """The training texts: CPython's pydoc topics, in sorted key order."""
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def train_tokenizer(texts: list[str], vocab_size: int):
    """Trains a byte-level BPE tokenizer and wraps it for transformers."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        texts, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS], show_progress=False
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token=EOS, eos_token=EOS, pad_token=EOS
    )


def home() -> Path:
    """The workbench's cache folder."""
    return Path(os.environ.get("WORKBENCH_HOME", Path.home() / ".cache" / "workbench"))


def recipe(config: TinyLMConfig | None = None) -> dict[str, Any]:
    """Everything the trained model depends on: the config, the corpus, the cache generation.

    The corpus is CPython's pydoc topics, which change between Python releases: its digest keeps
    one Python's model from being served to another.
    """
    from workbench.cache import data_digest

    return {
        "config": asdict(config or TinyLMConfig()),
        "data": data_digest(*corpus()),
        "version": CACHE_VERSION,
    }


def default_path(config: TinyLMConfig | None = None) -> Path:
    """Where the checkpoints of ``config`` are cached (``<tag>-<recipe key>``)."""
    from workbench.cache import trained_folder

    config = config or TinyLMConfig()
    return trained_folder(home() / "tiny-lm", config.tag, recipe(config))


def ensure_tiny_lm(config: TinyLMConfig | None = None) -> Path:
    """Returns the cached checkpoint folder, training the model first if it is missing.

    Through :func:`workbench.cache.trained`: keyed by :func:`recipe`, trained once under a file
    lock when several processes ask at the same time.
    """
    from workbench.cache import trained

    config = config or TinyLMConfig()
    return trained(
        home() / "tiny-lm",
        config.tag,
        recipe(config),
        lambda out: train_tiny_lm(config, out=out),
    )


def train_tiny_lm(
    config: TinyLMConfig | None = None, *, out: str | Path, progress: bool = True
) -> Path:
    """Trains the embedded causal LM with :func:`workbench.train.train` and saves its checkpoints.

    Args:
        config: Hyperparameters; the default sees 2M tokens, a few minutes on one CPU core.
        out: Folder to create; it gets one ``step-N`` subfolder per checkpoint (model and tokenizer,
            safetensors) and ``training.json`` with the losses. An existing complete folder is
            replaced only by a finished run.
        progress: Show a progress bar.

    Returns:
        The output folder.
    """
    from workbench.models.gpt2 import tiny_gpt2
    from workbench.train import TrainConfig, train

    config = config or TinyLMConfig()
    texts = corpus()
    tokenizer = train_tokenizer(texts, config.vocab_size)
    ids = [i for text in texts for i in [*tokenizer(text)["input_ids"], tokenizer.eos_token_id]]
    stream = torch.tensor(ids, dtype=torch.long)
    split = int(len(stream) * 0.95)
    train_ids, val = stream[:split], stream[split:]

    def build() -> torch.nn.Module:
        eos = tokenizer.eos_token_id
        return tiny_gpt2(
            len(tokenizer),
            config.seq_len,
            config.d_model,
            config.n_layers,
            config.n_heads,
            bos_id=eos,
            eos_id=eos,
            pad_id=eos,
        )

    def windows(step: int, generator: torch.Generator) -> torch.Tensor:
        starts = torch.randint(
            0, len(train_ids) - config.seq_len - 1, (config.batch_size,), generator=generator
        )
        return torch.stack([train_ids[s : s + config.seq_len] for s in starts.tolist()])

    def save(model: torch.nn.Module, folder: Path, record: dict) -> None:
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # no "Writing model shards" bar per checkpoint
        try:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        finally:
            if bars:
                hf_logging.enable_progress_bar()

    schedule = TrainConfig(
        steps=config.steps,
        lr=config.lr,
        weight_decay=0.01,
        betas=(0.9, 0.95),
        warmup=config.warmup,
        min_lr_ratio=0.1,
        grad_clip=1.0,
        seed=config.seed,
        checkpoints=checkpoint_steps(config.steps),
        threads=THREADS,
    )
    result = train(
        build,
        schedule,
        loss_fn=_lm_loss,
        sample=windows,
        evaluate=lambda model: {"val_loss": _eval(model, val, config)},
        out=out,
        save=save,
        record={"config": asdict(config), "n_train_tokens": len(train_ids)},
        progress=progress,
        desc="train tiny-lm",
    )
    return result.out


def _lm_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


@torch.no_grad()
def _eval(
    model: torch.nn.Module, val: torch.Tensor, config: TinyLMConfig, n_windows: int = 16
) -> float:
    n = min(n_windows, (len(val) - 1) // config.seq_len)
    batch = val[: n * config.seq_len].view(n, config.seq_len)
    return round(float(model(input_ids=batch, labels=batch).loss), 4)
