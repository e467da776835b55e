"""GPU benchmark: bare forward vs streamed capture of every resid_post, whole and placed models.

    python bench/gpu.py [--quick] [--budget SECONDS]

For a random-init Llama-shaped ~1B model (16 layers, d=2048) and ~7B model (32 layers, d=4096;
``--quick``: the 1B only), in bfloat16, built from a ``LlamaConfig`` directly on the GPU (no
download, no host copy of the weights) and saved once as safetensors:

* on each CUDA device, the model loaded whole with ``load_model(path, device="cuda:N")``;
* over all GPUs, ``load_model(path, device_map="auto")`` (accelerate's placement; on a one-GPU
  machine it is the whole model on cuda:0 again, through the placement path).

For each: bare forward tokens/s (``use_cache=False``, batch 8 x 512 random token ids), a streamed
``capture(..., sites="resid_post", out=...)`` of every layer in bfloat16 (tokens/s and its ratio to
the bare forward: the capture copies every block's output to the host and writes it to disk, so
on a fast GPU it is bound by the copy and the disk), the same capture held in memory (``mem``: the
device-to-host copy without the disk), and the peak GPU memory of the forward and the streamed
capture (``max_memory_allocated`` summed over devices).

Without CUDA it prints one line and exits 0. Each measurement that fails (say, out of memory on a
small GPU) prints one line and the rest still run; the exit status is then 1. A time budget
(``--budget``, 420 s) skips what would start after it. Everything is written under one temporary
folder, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

MODELS: dict[str, dict[str, int]] = {
    "llama-1b": {
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    },
    "llama-7b": {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    },
}
BATCH, SEQ = 8, 512
FORWARD_REPEATS = 5
CAPTURE_BATCHES = 4


def say(line: str) -> None:
    """One progress line on stderr (stdout holds the table and the JSON)."""
    print(line, file=sys.stderr, flush=True)


def build(name: str, folder: Path, device: str) -> int:
    """Saves a random-init bf16 model built on ``device`` and a stub tokenizer; its size."""
    import transformers as T
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    config = T.LlamaConfig(**MODELS[name], tie_word_embeddings=False)
    with torch.device(device):
        model = T.LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    stub = Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1}, unk_token="<unk>"))
    stub.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = T.PreTrainedTokenizerFast(
        tokenizer_object=stub, pad_token="<pad>", unk_token="<unk>", eos_token="<pad>"
    )
    tokenizer.save_pretrained(folder)
    return n_params


def sync() -> None:
    for i in range(torch.cuda.device_count()):
        torch.cuda.synchronize(i)


def reset_peaks() -> None:
    for i in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(i)


def peak_gib() -> float:
    return sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())) / 2**30


def measure(subject: Any, scratch: Path) -> dict[str, Any]:
    """Bare forward and streamed capture tokens/s and peak GPU memory of one loaded model."""
    from workbench import capture

    vocab = int(subject.model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen)
    dev_ids = ids.to(subject.device)
    out: dict[str, Any] = {"placement": subject.placement_summary()}
    with torch.inference_mode():
        subject.model(input_ids=dev_ids, use_cache=False)  # warm-up
        sync()
        reset_peaks()
        start = time.perf_counter()
        for _ in range(FORWARD_REPEATS):
            subject.model(input_ids=dev_ids, use_cache=False)
        sync()
        seconds = time.perf_counter() - start
    out["forward_tokens_per_s"] = FORWARD_REPEATS * BATCH * SEQ / seconds
    out["forward_peak_gib"] = peak_gib()
    texts = torch.randint(0, vocab, (CAPTURE_BATCHES * BATCH, SEQ), generator=gen)
    common = {"sites": "resid_post", "dtype": "bfloat16", "batch_size": BATCH, "progress": False}
    capture(subject, texts[:BATCH], out=scratch / "warm", **common)  # warm-up
    shutil.rmtree(scratch / "warm")
    sync()
    reset_peaks()
    start = time.perf_counter()
    store = capture(subject, texts, out=scratch / "store", **common)
    sync()
    seconds = time.perf_counter() - start
    out["capture_tokens_per_s"] = texts.numel() / seconds
    sync()
    start = time.perf_counter()
    held = capture(subject, texts, **common)  # in memory: the device-to-host copy, no disk
    sync()
    out["memory_capture_tokens_per_s"] = texts.numel() / (time.perf_counter() - start)
    del held
    out["capture_peak_gib"] = peak_gib()
    out["capture_over_forward"] = out["forward_tokens_per_s"] / out["capture_tokens_per_s"]
    out["store_gib"] = sum(f.stat().st_size for f in Path(store.path).rglob("*")) / 2**30
    shutil.rmtree(scratch / "store")
    return out


def run_model(name: str, root: Path, deadline: float) -> list[dict[str, Any]]:
    """Every measurement of one model: whole on each GPU, then device_map='auto'."""
    from workbench import load_model

    rows: list[dict[str, Any]] = []
    folder = root / name
    say(f"{name}: building on cuda:0 and saving")
    n_params = build(name, folder, "cuda:0")
    setups = [(f"cuda:{i}", {"device": f"cuda:{i}"}) for i in range(torch.cuda.device_count())]
    setups.append(("device_map=auto", {"device_map": "auto"}))
    for label, kwargs in setups:
        row: dict[str, Any] = {"model": name, "params_b": n_params / 1e9, "load": label}
        if time.monotonic() > deadline:
            row["error"] = "skipped: over the time budget"
            rows.append(row)
            continue
        say(f"{name}: {label}")
        subject = None
        try:
            start = time.perf_counter()
            subject = load_model(folder, dtype="bfloat16", **kwargs)
            row["load_s"] = time.perf_counter() - start
            row.update(measure(subject, root))
        except Exception as exc:  # a failed measurement is reported, the others still run
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            row["error"] = f"{type(exc).__name__}: {first}"[:200]
        finally:
            del subject
            torch.cuda.empty_cache()
        rows.append(row)
    shutil.rmtree(folder, ignore_errors=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'model':<9} {'load':<16} {'params':>7} {'fwd tok/s':>10} {'cap tok/s':>10} "
        f"{'cap/fwd':>7} {'mem tok/s':>10} {'peak fwd':>9} {'peak cap':>9}  placement"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        start = f"{r['model']:<9} {r['load']:<16} {r['params_b']:>6.2f}B"
        if "error" in r:
            lines.append(f"{start}  {r['error']}")
            continue
        lines.append(
            f"{start} {r['forward_tokens_per_s']:>10,.0f} {r['capture_tokens_per_s']:>10,.0f} "
            f"{r['capture_over_forward']:>6.2f}x {r['memory_capture_tokens_per_s']:>10,.0f} "
            f"{r['forward_peak_gib']:>7.1f}Gi "
            f"{r['capture_peak_gib']:>7.1f}Gi  {r['placement']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 1B model only")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds before skipping")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA device here; nothing to measure (run it on a GPU machine)")
        return 0
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from workbench.models import quiet_transformers

    quiet_transformers()
    deadline = time.monotonic() + args.budget
    names = ["llama-1b"] if args.quick else ["llama-1b", "llama-7b"]
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    say(f"GPUs: {', '.join(gpus)}; torch {torch.__version__}")
    root = Path(tempfile.mkdtemp(prefix="wb-bench-gpu-"))
    rows: list[dict[str, Any]] = []
    try:
        for name in names:
            if time.monotonic() > deadline:
                rows.append({"model": name, "load": "-", "params_b": 0.0, "error": "skipped"})
                continue
            try:
                rows += run_model(name, root, deadline)
            except Exception as exc:  # building failed (say, out of memory): report, go on
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                error = f"{type(exc).__name__}: {first}"[:200]
                rows.append({"model": name, "load": "build", "params_b": 0.0, "error": error})
                torch.cuda.empty_cache()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"GPUs: {', '.join(gpus)}; batch {BATCH} x {SEQ} tokens, bfloat16")
    print(table(rows))
    print(json.dumps({"gpus": gpus, "rows": rows}))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
