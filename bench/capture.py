"""Capture benchmark: workbench against a bare forward, HF hidden states, TransformerLens, nnsight.

    python bench/capture.py [--device cpu|cuda] [--quick]

CPU (default): a GPT-2-small-shaped random-init model (12 layers, d=768, 12 heads, vocab 50257,
1024 positions), built from ``GPT2Config``, saved with ``save_pretrained`` into a temporary folder
and loaded with ``workbench.load_model``; a batch of 8 x 128 random token ids. Each method runs
under ``torch.inference_mode`` once to warm up, then ``--repeats`` rounds (5; 2 with ``--quick``)
in which the methods take turns, so that background load hits them alike; the table shows the
median and the minimum of each, and their ratios over the bare forward. Then the peak RSS of a
streamed capture of 20x (5x with ``--quick``) one shard's worth of tokens against one shard's
worth, each in a fresh subprocess, the peak measured during the capture only (``VmHWM`` after
resetting it through ``/proc/self/clear_refs``; ``ru_maxrss`` where that is not possible), once
with glibc's default allocator and once with its mmap threshold fixed at 1 MiB: by default glibc
raises the threshold after a large free, later buffers come from a heap that keeps freed pages,
and the peak swings between runs (-0.95 to 4.13 shards above a bare forward in two runs here; 1.04
with the threshold fixed, for 1 and for 10 shards alike).

CUDA (``--device cuda``): a Llama-shaped ~1.1B random model in bfloat16 (16 layers, d=2048, 32
heads, 8 KV heads, MLP 8192, vocab 32000), batch 16 x 512, activations stored as bfloat16; the
table also gives tokens/s, and the disk's write bandwidth is measured by writing 1 GiB with fsync
next to the stores (the streamed capture must write its bytes at least that fast to keep up).

The model, stores and scratch files live in one temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import torch

GPT2_SMALL = {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
LLAMA_1B = {
    "num_hidden_layers": 16,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 8192,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
TARGET_TIME = 1.05  # streamed capture over a bare forward
TARGET_MEMORY = 1.2  # peak RSS of 20 shards over one shard
TARGET_SHARDS = 1.2  # peak RSS above the warmed-up baseline, in shards


def build_model(folder: Path, device: str) -> Path:
    """Saves a random-init model (GPT-2 small on CPU, Llama ~1B in bf16 on CUDA) and a tokenizer."""
    import transformers as T
    from tokenizers import ByteLevelBPETokenizer

    torch.manual_seed(0)
    if device == "cpu":
        model = T.GPT2LMHeadModel(T.GPT2Config(**GPT2_SMALL))
    else:
        with torch.device(device):
            model = T.LlamaForCausalLM(T.LlamaConfig(**LLAMA_1B)).to(torch.bfloat16)
    model.save_pretrained(folder)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["a tiny tokenizer for random token ids"] * 4,
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    eos = "<|endoftext|>"
    tokenizer = T.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token=eos, eos_token=eos, pad_token=eos
    )
    tokenizer.save_pretrained(folder)
    return folder


def load(folder: Path, device: str):
    from workbench import load_model

    return load_model(folder, device=device, dtype="float32" if device == "cpu" else "bfloat16")


def timed(fns: dict[str, Callable[[], object]], repeats: int, device: str) -> dict[str, list]:
    """Wall times of every method: one warm-up each, then ``repeats`` rounds, round-robin.

    Interleaving the methods spreads any background load over all of them alike, so that the
    ratios stay meaningful on a shared machine.
    """

    def sync() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    times: dict[str, list] = {label: [] for label in fns}
    with torch.inference_mode():
        for label, fn in fns.items():
            fn()
            print(f"  warmed up: {label}", file=sys.stderr, flush=True)
        for _ in range(repeats):
            for label, fn in fns.items():
                sync()
                start = time.perf_counter()
                fn()
                sync()
                times[label].append(time.perf_counter() - start)
    return times


def methods(subject, ids: torch.Tensor, scratch: Path, store_dtype: str) -> dict[str, Callable]:
    """Every method to time, by row label, in print order."""
    import nnsight

    from workbench import capture
    from workbench.backends.nnsight import wrap
    from workbench.backends.transformer_lens import build_bridge

    model = subject.model
    n_layers = subject.n_layers
    dev_ids = ids.to(subject.device)
    bridge = build_bridge(subject)
    resid_hooks = [f"blocks.{i}.hook_resid_post" for i in range(n_layers)]
    nn_model = wrap(subject)
    blocks = nn_model.get(
        next(n for n, m in model.named_modules() if m is model.base_model)
        + "."
        + subject.family.layers
    )
    runs = iter(range(10**6))
    common = {
        "sites": "resid_post",
        "batch_size": len(ids),
        "dtype": store_dtype,
        "progress": False,
    }

    def nnsight_blocks() -> list:
        saved: list = []
        with nn_model.trace(dev_ids):
            for i in range(n_layers):
                out = blocks[i].output
                saved.append(nnsight.save(out[0] if isinstance(out, tuple) else out))
        return saved

    return {
        "HF forward (bare)": lambda: model(dev_ids, use_cache=False),
        "HF output_hidden_states=True": lambda: model(
            dev_ids, use_cache=False, output_hidden_states=True
        ),
        "workbench capture, in memory": lambda: capture(subject, ids, **common),
        "workbench capture, streamed to store": lambda: capture(
            subject, ids, out=scratch / f"store-{next(runs)}", **common
        ),
        "workbench capture, backend=transformer_lens": lambda: capture(
            subject, ids, backend="transformer_lens", **common
        ),
        "workbench capture, backend=nnsight": lambda: capture(
            subject, ids, backend="nnsight", **common
        ),
        "TransformerLens run_with_cache (all hooks)": lambda: bridge.run_with_cache(
            dev_ids, return_cache_object=False
        ),
        "TransformerLens run_with_cache (resid_post)": lambda: bridge.run_with_cache(
            dev_ids, names_filter=resid_hooks, return_cache_object=False
        ),
        "nnsight trace, save 12 block outputs".replace("12", str(n_layers)): nnsight_blocks,
    }


def sustained(
    subject,
    batch: int,
    seq: int,
    n_batches: int,
    scratch: Path,
    store_dtype: str,
    repeats: int,
    device: str,
) -> dict[str, list[float]]:
    """A long streamed capture (one shard per batch) against the same bare forwards, interleaved.

    This is how a store is filled in practice: many batches, so each shard's write overlaps the
    next batch's forward passes (only the last write cannot be hidden).
    """
    from workbench import capture

    ids = torch.randint(
        0,
        subject.model.config.vocab_size,
        (n_batches * batch, seq),
        generator=torch.Generator().manual_seed(1),
    )
    dev_ids = ids.to(subject.device)
    item = torch.empty((), dtype=getattr(torch, store_dtype)).element_size()
    shard_bytes = batch * seq * subject.n_layers * subject.d_model * item
    runs = iter(range(10**6))

    def bare() -> None:
        for start in range(0, len(ids), batch):
            subject.model(dev_ids[start : start + batch], use_cache=False)

    def streamed() -> None:
        capture(
            subject,
            ids,
            sites="resid_post",
            batch_size=batch,
            dtype=store_dtype,
            out=scratch / f"sustained-{next(runs)}",
            shard_bytes=shard_bytes,
            progress=False,
        )

    label = f"{n_batches} batches"
    fns = {f"HF forward (bare), {label}": bare, f"streamed to store, {label} -> shards": streamed}
    return timed(fns, repeats, device)


def disk_bandwidth(folder: Path, size: int = 2**30) -> float:
    """Write bandwidth in bytes/s: ``size`` bytes written in 64 MiB chunks, then fsync."""
    chunk = os.urandom(64 * 2**20)
    path = folder / "bandwidth.bin"
    start = time.perf_counter()
    with open(path, "wb") as fh:
        for _ in range(size // len(chunk)):
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return size / seconds


def rss_child(folder: str, n_texts: int, seq: int, shard_bytes: int, out: str) -> None:
    """Subprocess body: one streamed capture; prints the peak RSS during the capture as JSON."""
    from workbench import capture

    subject = load(Path(folder), "cpu")
    ids = torch.randint(
        0,
        subject.model.config.vocab_size,
        (n_texts, seq),
        generator=torch.Generator().manual_seed(0),
    )
    mask = torch.ones_like(ids[:8])
    with torch.inference_mode():
        subject.model(ids[:8], attention_mask=mask, use_cache=False)  # warm-up
    # the baseline: the peak of one bare forward of a batch, as capture runs it (the forward's
    # own working memory is not the capture's)
    _reset_peak()
    with torch.inference_mode():
        subject.model(
            ids[:8], attention_mask=mask, position_ids=mask.cumsum(-1) - 1, use_cache=False
        )
    before = _status_kb("VmHWM")
    reset = _reset_peak()
    capture(
        subject,
        ids,
        sites="resid_post",
        batch_size=8,
        out=out,
        shard_bytes=shard_bytes,
        progress=False,
    )
    peak = _status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_kb": peak, "before_kb": before, "reset": reset}))


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def shard_size(seq: int, shard_texts: int = 8) -> int:
    """Bytes of one shard of the RSS measurement (one batch of 8 texts, every layer, float32)."""
    return shard_texts * seq * GPT2_SMALL["n_layer"] * GPT2_SMALL["n_embd"] * 4


def measure_rss(
    folder: Path,
    scratch: Path,
    shard_counts: tuple[int, ...],
    seq: int,
    env: dict[str, str] | None = None,
) -> dict[int, dict]:
    """Peak RSS of a streamed capture of each number of shards, each in a new process.

    ``env`` adds environment variables to the children (the allocator settings of the second
    measurement).
    """
    shard_texts = 8  # one shard = one batch of 8 texts
    shard_bytes = shard_size(seq, shard_texts)
    result = {}
    for shards in shard_counts:
        out = scratch / f"rss-{shards}"
        args = [
            sys.executable,
            __file__,
            "--rss-child",
            str(folder),
            str(shards * shard_texts),
            str(seq),
            str(shard_bytes),
            str(out),
        ]
        done = subprocess.run(
            args, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})}
        )
        result[shards] = json.loads(done.stdout.strip().splitlines()[-1])
        result[shards]["shards"] = len(list(out.glob("shard-*.safetensors")))
        shutil.rmtree(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="2 repeats, a 5x memory test")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--rss-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        folder, n_texts, seq, shard_bytes, out = args.rss_child
        rss_child(folder, int(n_texts), int(seq), int(shard_bytes), out)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    repeats = args.repeats or (2 if args.quick else 5)
    batch, seq = (8, 128) if args.device == "cpu" else (16, 512)
    store_dtype = "float32" if args.device == "cpu" else "bfloat16"
    import transformers

    from workbench.models import quiet_transformers

    quiet_transformers()
    root = Path(tempfile.mkdtemp(prefix="wb-bench-"))
    try:
        folder = build_model(root / "model", args.device)
        subject = load(folder, args.device)
        n_params = sum(p.numel() for p in subject.model.parameters())
        ids = torch.randint(
            0,
            subject.model.config.vocab_size,
            (batch, seq),
            generator=torch.Generator().manual_seed(0),
        )
        print(
            f"model: {type(subject.model).__name__}, {subject.n_layers} layers, "
            f"d={subject.d_model}, "
            f"{n_params / 1e6:.0f}M params, {subject.dtype}, on {subject.device}; "
            f"batch {batch}x{seq}; stored activations {store_dtype}; "
            f"median of {repeats} interleaved rounds after a warm-up; torch {torch.__version__}, "
            f"transformers {transformers.__version__}, "
            f"transformer-lens {version('transformer-lens')}, "
            f"nnsight {version('nnsight')}; {torch.get_num_threads()} threads"
        )
        scratch = root / "scratch"
        scratch.mkdir()
        times = timed(methods(subject, ids, scratch, store_dtype), repeats, args.device)
        medians = {label: statistics.median(t) for label, t in times.items()}
        mins = {label: min(t) for label, t in times.items()}
        bare, bare_min = medians["HF forward (bare)"], mins["HF forward (bare)"]
        tokens = batch * seq
        print(
            f"\n{'method':<46} {'median s':>9} {'x bare':>7} {'min s':>7} {'x bare':>7} "
            f"{'tokens/s':>9}  target"
        )
        for label, seconds in medians.items():
            target = f"<= {TARGET_TIME:.2f}x" if label.endswith("streamed to store") else ""
            print(
                f"{label:<46} {seconds:>9.3f} {seconds / bare:>6.2f}x {mins[label]:>7.3f} "
                f"{mins[label] / bare_min:>6.2f}x {tokens / seconds:>9.0f}  {target}"
            )
        n_batches = 4 if args.quick else 8
        long = sustained(
            subject, batch, seq, n_batches, scratch, store_dtype, max(2, repeats - 2), args.device
        )
        (bare_label, bare_long), (stream_label, stream_long) = long.items()
        ratio = statistics.median(stream_long) / statistics.median(bare_long)
        print(f"\nsustained streaming (median of {len(bare_long)} interleaved rounds):")
        print(f"  {bare_label:<46} {statistics.median(bare_long):>9.3f}")
        print(
            f"  {stream_label:<46} {statistics.median(stream_long):>9.3f} {ratio:>6.2f}x  "
            f"<= {TARGET_TIME:.2f}x"
        )
        site_bytes = (
            tokens
            * subject.d_model
            * torch.empty((), dtype=getattr(torch, store_dtype)).element_size()
        )
        written = site_bytes * subject.n_layers
        print(
            f"\nstreamed capture writes {written / 2**20:.0f} MiB per batch; "
            f"to keep pace with a bare forward: {written / bare / 2**20:.0f} MiB/s"
        )
        if args.device != "cpu":
            bandwidth = disk_bandwidth(scratch)
            print(f"disk write bandwidth (1 GiB, fsync): {bandwidth / 2**20:.0f} MiB/s")
            return
        bandwidth = disk_bandwidth(scratch, 2**28)
        print(f"disk write bandwidth (256 MiB, fsync): {bandwidth / 2**20:.0f} MiB/s")
        n_shards = 5 if args.quick else 20
        rss = measure_rss(folder, scratch, (1, n_shards), seq)
        small, big = rss[1], rss[n_shards]
        how = "VmHWM during the capture" if small["reset"] and big["reset"] else "ru_maxrss"
        print(f"\npeak RSS of a streamed capture ({how}), fresh process each:")
        for shards, r in rss.items():
            growth = (r["peak_kb"] - r["before_kb"]) / 1024
            label = "1 shard" if shards == 1 else f"{shards} shards"
            print(
                f"  {label:<10} ({r['shards']:>2} shard files): "
                f"peak {r['peak_kb'] / 1024:7.0f} MiB, "
                f"{growth:+6.0f} MiB over a bare forward's peak"
            )
        ratio = big["peak_kb"] / small["peak_kb"]
        growth_ratio = (big["peak_kb"] - big["before_kb"]) / max(
            1, small["peak_kb"] - small["before_kb"]
        )
        print(
            f"  ratio {n_shards} shards / 1 shard: {ratio:.2f}x (target <= {TARGET_MEMORY:.1f}x); "
            f"growth over a bare forward's peak: {growth_ratio:.2f}x"
        )
        shard_mib = shard_size(seq) / 2**20
        in_shards = (big["peak_kb"] - big["before_kb"]) / 1024 / shard_mib
        verdict = "PASS" if in_shards <= TARGET_SHARDS else "MISS"
        print(
            f"  {n_shards} shards: peak {in_shards:.2f} shards of "
            f"{shard_mib:.0f} MiB above a bare forward's peak (target <= {TARGET_SHARDS:.1f}: the "
            f"shard buffer, no second serialized copy) {verdict}"
        )
        # glibc raises its mmap threshold after a large free (up to 32 MiB), so later buffers
        # below it come from the heap, which keeps freed pages: the default allocator's peak
        # swings from run to run. With the threshold fixed, what remains is the capture's own.
        fixed = {"MALLOC_MMAP_THRESHOLD_": str(2**20), "MALLOC_TRIM_THRESHOLD_": str(2**20)}
        big = measure_rss(folder, scratch, (n_shards,), seq, env=fixed)[n_shards]
        in_shards = (big["peak_kb"] - big["before_kb"]) / 1024 / shard_mib
        verdict = "PASS" if in_shards <= TARGET_SHARDS else "MISS"
        print(
            f"  {n_shards} shards, glibc mmap threshold fixed at 1 MiB: peak {in_shards:.2f} "
            f"shards above a bare forward's peak {verdict}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
