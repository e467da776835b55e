"""``tiny-lm``: a small causal LM the workbench trains itself, offline and deterministically.

The corpus is the English reference text that ships with CPython (``pydoc_data.topics``,
about 465 KB).
A byte-level BPE tokenizer is trained on it with ``tokenizers``; then a 4-layer GPT-2-style model is
trained with AdamW on random windows of the token stream. Checkpoints are saved at log-spaced steps
(0, 10, 20, 50, 100, 200, 500), step 0 being the initialization, so that training-dynamics
analyses can follow a metric across training. Same seed, same machine: the same weights.

The checkpoints live in ``$WORKBENCH_HOME/tiny-lm/<tag>/step-N`` (``WORKBENCH_HOME`` defaults to
``~/.cache/workbench``) and are built on first use. A run writes into a temporary folder that is
renamed into place only when complete, so an interrupted run leaves nothing behind.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from workbench.errors import ConfigError

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"


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
    batch_size: int = 8
    lr: float = 3e-3
    warmup: int = 50

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"steps must be at least 1, got {self.steps}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    @property
    def tag(self) -> str:
        """Folder name identifying this configuration in the cache."""
        default = TinyLMConfig()
        changed = [f"{k}{v}" for k, v in asdict(self).items() if v != getattr(default, k)]
        return "-".join(["v1", *changed]) if changed else "v1-default"


def checkpoint_steps(steps: int) -> list[int]:
    """Log-spaced checkpoint steps: 0, then 10, 20, 50, 100, ... below ``steps``, then ``steps``."""
    out = [0]
    for decade in range(1, int(math.log10(max(steps, 1))) + 2):
        out += [m * 10**decade for m in (1, 2, 5)]
    return sorted({s for s in out if 0 <= s < steps} | {steps})


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


def default_path(config: TinyLMConfig | None = None) -> Path:
    """Where the checkpoints of ``config`` are cached."""
    return home() / "tiny-lm" / (config or TinyLMConfig()).tag


def ensure_tiny_lm(config: TinyLMConfig | None = None) -> Path:
    """Returns the cached checkpoint folder, training the model first if it is missing."""
    path = default_path(config)
    if not (path / "training.json").is_file():
        log.info("training tiny-lm into %s (first use)", path)
        train_tiny_lm(config, out=path)
    return path


def train_tiny_lm(
    config: TinyLMConfig | None = None, *, out: str | Path, progress: bool = True
) -> Path:
    """Trains the embedded causal LM and saves its checkpoints.

    Args:
        config: Hyperparameters; the defaults train in two to three minutes on two CPU cores.
        out: Folder to create; it gets one ``step-N`` subfolder per checkpoint (model and tokenizer,
            safetensors) and ``training.json`` with the losses. An existing complete folder is
            replaced only by a finished run.
        progress: Show a progress bar.

    Returns:
        The output folder.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    config = config or TinyLMConfig()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    texts = corpus()
    tokenizer = train_tokenizer(texts, config.vocab_size)
    ids = [i for text in texts for i in [*tokenizer(text)["input_ids"], tokenizer.eos_token_id]]
    stream = torch.tensor(ids, dtype=torch.long)
    split = int(len(stream) * 0.95)
    train, val = stream[:split], stream[split:]

    torch.manual_seed(config.seed)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=config.seq_len,
            n_embd=config.d_model,
            n_layer=config.n_layers,
            n_head=config.n_heads,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.eos_token_id,
        )
    )
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, config))
    gen = torch.Generator().manual_seed(config.seed)
    save_at = set(checkpoint_steps(config.steps))
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    record: dict = {"config": asdict(config), "n_train_tokens": len(train), "checkpoints": []}
    try:
        for step in tqdm(range(config.steps + 1), desc="train tiny-lm", disable=not progress):
            if step in save_at:
                model.eval()
                entry = {
                    "step": step,
                    "revision": f"step-{step}",
                    "val_loss": _eval(model, val, config),
                }
                record["checkpoints"].append(entry)
                model.save_pretrained(tmp / f"step-{step}")
                tokenizer.save_pretrained(tmp / f"step-{step}")
                model.train()
            if step == config.steps:
                break
            starts = torch.randint(
                0, len(train) - config.seq_len - 1, (config.batch_size,), generator=gen
            )
            batch = torch.stack([train[s : s + config.seq_len] for s in starts.tolist()])
            loss = model(input_ids=batch, labels=batch).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
        record["seconds"] = round(time.time() - started, 1)
        (tmp / "training.json").write_text(json.dumps(record, indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _lr_factor(step: int, config: TinyLMConfig) -> float:
    if step < config.warmup:
        return (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


@torch.no_grad()
def _eval(
    model: torch.nn.Module, val: torch.Tensor, config: TinyLMConfig, n_windows: int = 16
) -> float:
    n = min(n_windows, (len(val) - 1) // config.seq_len)
    batch = val[: n * config.seq_len].view(n, config.seq_len)
    return round(float(model(input_ids=batch, labels=batch).loss), 4)
