"""Capture benchmark: workbench against a bare forward, HF hidden states, TransformerLens, nnsight.

    python bench/capture.py [--device cpu|cuda] [--quick] [--only random|smollm2] [--threads N]

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

SmolLM2 (``--only smollm2`` runs this section alone; ``--only random`` the one above): the
embedded pretrained ``load_model("smollm2")`` (SmolLM2-135M-Instruct, Llama, 30 layers, d=576,
Q4_1 GGUF weights dequantised to float32), on 32 texts of ``builtin:pydoc`` truncated to 64
tokens, in batches of 8 (the batches ``capture`` runs: sorted by length, padded), 2 interleaved
rounds after a warm-up (1 with ``--quick``; as above, median and minimum). A streamed
capture of all 30 ``resid_post`` against the bare forward over the same batches, workbench's
TransformerLens and nnsight backends (streamed alike), TransformerLens's ``run_with_cache`` on a
``TransformerBridge`` and an nnsight trace saving the 30 block outputs over the same batches (with
the same attention mask and position ids); tokens/s counts real tokens (the rows stored). Then the
peak RSS of each method, each in a fresh process after loading and one warm-up batch (``VmHWM``
reset as above, the method's own setup included, its imports not), and the load time: cold (the
GGUF converted into an empty temporary ``WORKBENCH_HOME``), warm (a second load of that folder),
and, as a reference, transformers reading the GGUF itself (``from_pretrained(folder,
gguf_file=...)``, which dequantises on every load); each in a fresh process, imports not timed.
The section's own table runs on ``--device``; its RSS and load rows on the CPU. With
``--threads 1`` on 2 cores that other work shares: 2 min 48 s to 4 min 3 s, about a minute of it
the three loads.

``--threads N`` sets torch's threads, here and in the children. On a machine that other work
shares, torch's default (one thread a core) can make a forward pass 5-14x slower in bursts, as
each parallel step waits for its slowest thread: one SmolLM2 batch took 10.3 s with 2 threads
against 0.73 s idle, and 1.40 s with 1 thread against 1.37 s idle. The ratios then mean nothing;
``--threads 1`` keeps them steady (on 64 texts, the SmolLM2 section took 13 to 17 minutes with 2
threads on 2 busy cores, a method's two rounds up to 2.7x apart; with 1 thread, within 5%).

The model, stores and scratch files live in one temporary folder, removed at the end (SmolLM2's
timed rows load from the default ``WORKBENCH_HOME``, converting it there on first use).
"""

from __future__ import annotations

import argparse
import importlib
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
SECTIONS = ("random", "smollm2")
SMOLLM2_SOURCE = "builtin:pydoc"
SMOLLM2_TEXTS = 32
SMOLLM2_TOKENS = 64  # each text truncated to this many tokens
SMOLLM2_BATCH = 8
SMOLLM2_BARE = "HF forward (bare), same batches"
SMOLLM2_STREAMED = "workbench capture, streamed to store"
SMOLLM2_TL = "TransformerLens run_with_cache (resid_post)"
SMOLLM2_NNSIGHT = "nnsight trace, save 30 block outputs"


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


def smollm2_inputs(subject) -> tuple[list[str], list[dict], int]:
    """The texts, the batches ``capture`` runs on them, and their real tokens.

    The batches are capture's own: the texts sorted by length (one shard holds them all), 8 a
    batch, padded on the tokenizer's side, with the attention mask and position ids it passes.
    """
    from workbench.hooking import pad, position_ids
    from workbench.inputs import read_texts, tokenize

    texts = read_texts(SMOLLM2_SOURCE, limit=SMOLLM2_TEXTS)
    toks = tokenize(
        subject.tokenizer,
        texts,
        max_length=SMOLLM2_TOKENS,
        vocab_size=int(subject.model.get_input_embeddings().num_embeddings),
    )
    seqs = sorted(toks.sequences, key=len)
    side = getattr(subject.tokenizer, "padding_side", "right")
    pad_id = int(subject.tokenizer.pad_token_id or 0)
    device = subject.device
    batches = []
    for start in range(0, len(seqs), SMOLLM2_BATCH):
        ids, mask = pad(seqs[start : start + SMOLLM2_BATCH], pad_id, side)
        batches.append(
            {
                "input_ids": ids.to(device),
                "attention_mask": mask.to(device),
                "position_ids": position_ids(mask).to(device),
                "use_cache": False,
            }
        )
    return texts, batches, int(toks.lengths.sum())


def smollm2_methods(
    subject, texts: list[str], batches: list[dict], scratch: Path
) -> dict[str, Callable[[], Callable[[], None]]]:
    """Every SmolLM2 method by row label, in print order, as ``setup() -> run``.

    A peer's bridge or wrapper is built by its setup, once, outside the timed runs; workbench's
    rows build theirs inside every call, as each capture does.
    """
    import nnsight

    from workbench import capture
    from workbench.backends.nnsight import wrap
    from workbench.backends.transformer_lens import build_bridge

    model = subject.model
    n_layers = subject.n_layers
    runs = iter(range(10**6))
    common = {
        "sites": "resid_post",
        "layers": "all",
        "max_length": SMOLLM2_TOKENS,
        "batch_size": SMOLLM2_BATCH,
        "progress": False,
    }

    def bare() -> Callable[[], None]:
        def run() -> None:
            for kwargs in batches:
                model(**kwargs)

        return run

    def streamed(backend: str) -> Callable[[], Callable[[], None]]:
        def setup() -> Callable[[], None]:
            def run() -> None:
                out = scratch / f"smollm2-{backend}-{next(runs)}"
                capture(subject, texts, backend=backend, out=out, **common)

            return run

        return setup

    def transformer_lens() -> Callable[[], None]:
        bridge = build_bridge(subject)
        hooks = [f"blocks.{i}.hook_resid_post" for i in range(n_layers)]

        def run() -> None:
            for kwargs in batches:
                rest = {k: v for k, v in kwargs.items() if k != "input_ids"}
                bridge.run_with_cache(
                    kwargs["input_ids"], names_filter=hooks, return_cache_object=False, **rest
                )

        return run

    def nnsight_trace() -> Callable[[], None]:
        nn_model = wrap(subject)
        base = next(n for n, m in model.named_modules() if m is model.base_model)
        blocks = nn_model.get(base + "." + subject.family.layers)

        def run() -> None:
            for kwargs in batches:
                saved: list = []
                with nn_model.trace(**kwargs):
                    for i in range(n_layers):
                        out = blocks[i].output
                        saved.append(nnsight.save(out[0] if isinstance(out, tuple) else out))

        return run

    return {
        SMOLLM2_BARE: bare,
        SMOLLM2_STREAMED: streamed("hooks"),
        "workbench streamed, backend=transformer_lens": streamed("transformer_lens"),
        "workbench streamed, backend=nnsight": streamed("nnsight"),
        SMOLLM2_TL: transformer_lens,
        SMOLLM2_NNSIGHT.replace("30", str(n_layers)): nnsight_trace,
    }


def smollm2_child(kind: str, arg: str, folder: str) -> None:
    """Subprocess body: one load (``kind`` "load", ``arg`` cold|warm|gguf) or one method's peak.

    Prints JSON: for a load its seconds (imports not timed) and the peak RSS while loading; for
    a method (``arg`` its row label, stores under ``folder``) the peak RSS while it runs, its
    setup included, after loading and one warm-up batch.
    """
    import transformers

    from workbench import load_model
    from workbench.models import quiet_transformers
    from workbench.models.smollm2 import gguf_file

    quiet_transformers()
    if kind == "load":
        path = gguf_file()
        reset = _reset_peak()
        start = time.perf_counter()
        if arg == "gguf":
            transformers.AutoModelForCausalLM.from_pretrained(
                path.parent, gguf_file=path.name, dtype=torch.float32
            )
            model_s = time.perf_counter() - start
            transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        else:
            load_model("smollm2", device="cpu")
            model_s = None
        seconds = time.perf_counter() - start
        peak = _status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"seconds": seconds, "model_s": model_s, "peak_kb": peak}))
        return
    subject = load_model("smollm2", device="cpu")
    texts, batches, _ = smollm2_inputs(subject)
    with torch.inference_mode():
        subject.model(**batches[-1])  # warm-up: the longest batch
    setups = smollm2_methods(subject, texts, batches, Path(folder))
    # the peers' imports are not their methods' memory (transformer_lens alone adds ~80 MiB)
    importlib.import_module("transformer_lens.model_bridge.sources")
    reset = _reset_peak()
    before = _status_kb("VmRSS")
    run = setups[arg]()
    with torch.inference_mode():
        run()
    peak = _status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_kb": peak, "before_kb": before, "reset": reset}))


def smollm2_run_child(kind: str, arg: str, folder: Path, env: dict[str, str] | None = None) -> dict:
    """Runs :func:`smollm2_child` in a fresh process; its JSON result."""
    args = [sys.executable, __file__, "--smollm2-child", kind, arg, str(folder)]
    done = subprocess.run(
        args, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        raise RuntimeError(f"smollm2 child {kind} {arg!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def smollm2_section(args: argparse.Namespace) -> None:
    """The embedded SmolLM2: timed methods on real texts, their peak RSS, the load times."""
    import transformers

    from workbench import load_model

    repeats = args.repeats or (1 if args.quick else 2)
    root = Path(tempfile.mkdtemp(prefix="wb-bench-smollm2-"))
    try:
        # loads first, each in a fresh process: cold converts into an empty WORKBENCH_HOME, warm
        # reads what cold wrote, gguf is transformers reading the GGUF itself
        home = {"WORKBENCH_HOME": str(root / "home")}
        loads = {}
        for kind in ("cold", "warm", "gguf"):
            loads[kind] = smollm2_run_child("load", kind, root, home)
            print(f"  loaded: {kind}", file=sys.stderr, flush=True)
        subject = load_model("smollm2", device=args.device)
        texts, batches, n_tokens = smollm2_inputs(subject)
        n_params = sum(p.numel() for p in subject.model.parameters())
        padded = sum(b["input_ids"].numel() for b in batches)
        stored = n_tokens * subject.n_layers * subject.d_model * 4
        print(
            f"\nSmolLM2 ({subject.name}): {type(subject.model).__name__}, "
            f"{subject.n_layers} layers, d={subject.d_model}, {n_params / 1e6:.1f}M params, "
            f"{subject.dtype}, on {subject.device}; {len(texts)} texts of {SMOLLM2_SOURCE} "
            f"truncated to {SMOLLM2_TOKENS} tokens: {n_tokens} tokens ({padded} padded) in "
            f"{len(batches)} batches of {SMOLLM2_BATCH}; {subject.n_layers} resid_post stored "
            f"float32 ({stored / 2**20:.0f} MiB); median of {repeats} interleaved rounds after a "
            f"warm-up; torch {torch.__version__}, transformers {transformers.__version__}, "
            f"transformer-lens {version('transformer-lens')}, nnsight {version('nnsight')}; "
            f"{torch.get_num_threads()} threads"
        )
        scratch = root / "scratch"
        scratch.mkdir()
        setups = smollm2_methods(subject, texts, batches, scratch)
        times = timed({label: setup() for label, setup in setups.items()}, repeats, args.device)
        rss: dict[str, dict] = {}
        if args.device == "cpu":
            for index, label in enumerate(setups):
                # a fresh folder each: a store left by the timed runs would be resumed, not run
                folder = scratch / f"rss-{index}"
                folder.mkdir()
                rss[label] = smollm2_run_child("method", label, folder)
                print(f"  peak RSS measured: {label}", file=sys.stderr, flush=True)
        medians = {label: statistics.median(t) for label, t in times.items()}
        mins = {label: min(t) for label, t in times.items()}
        bare, bare_min = medians[SMOLLM2_BARE], mins[SMOLLM2_BARE]
        tl = medians[SMOLLM2_TL]
        nn = medians[SMOLLM2_NNSIGHT.replace("30", str(subject.n_layers))]
        print(
            f"\n{'method':<46} {'median s':>9} {'x bare':>7} {'min s':>7} {'x bare':>7} "
            f"{'tokens/s':>9} {'x TL':>7} {'x nnsight':>9} {'peak MiB':>9} {'vs bare':>8}  target"
        )
        bare_peak = rss[SMOLLM2_BARE]["peak_kb"] / 1024 if rss else None
        for label, seconds in medians.items():
            target = f"<= {TARGET_TIME:.2f}x" if label == SMOLLM2_STREAMED else ""
            memory = f"{'-':>9} {'-':>8}"
            if rss:
                peak = rss[label]["peak_kb"] / 1024
                memory = f"{peak:>9.0f} {peak - bare_peak:>+8.0f}"
            print(
                f"{label:<46} {seconds:>9.3f} {seconds / bare:>6.2f}x {mins[label]:>7.3f} "
                f"{mins[label] / bare_min:>6.2f}x {n_tokens / seconds:>9.0f} "
                f"{seconds / tl:>6.2f}x {seconds / nn:>8.2f}x {memory}  {target}"
            )
        print(
            f"x TL, x nnsight: over the median of '{SMOLLM2_TL}' and of the nnsight trace; "
            f"tokens/s: the {n_tokens} real tokens"
        )
        if rss:
            resets = all(r["reset"] for r in rss.values())
            how = "VmHWM while it runs" if resets else "ru_maxrss"
            before = statistics.median(r["before_kb"] for r in rss.values()) / 1024
            print(
                f"peak RSS: {how}, the method's setup included, each in a fresh process after "
                f"loading and one warm-up batch ({before:.0f} MiB resident then); 'vs bare': MiB "
                "above the bare forward's peak"
            )
        gguf = loads["gguf"]
        print("\nload time (fresh process each, imports not timed; peak RSS while loading):")
        rows = [
            ("load_model('smollm2'), cold (GGUF -> safetensors)", loads["cold"]),
            ("load_model('smollm2'), warm (converted folder)", loads["warm"]),
            ("transformers from_pretrained(gguf_file=...)", gguf),
        ]
        warm = loads["warm"]["seconds"]
        for label, r in rows:
            print(
                f"  {label:<52} {r['seconds']:>7.2f} s {r['seconds'] / warm:>6.1f}x warm  "
                f"peak {r['peak_kb'] / 1024:>6.0f} MiB"
            )
        print(f"  (the GGUF reference: model {gguf['model_s']:.2f} s, then its tokenizer)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="2 repeats, a 5x memory test")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--only",
        choices=SECTIONS,
        default=None,
        help="run one section: the random-init model, or the embedded SmolLM2 (default: both)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads, here and in the child processes (default: torch's, one a core)",
    )
    parser.add_argument("--rss-child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--smollm2-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        folder, n_texts, seq, shard_bytes, out = args.rss_child
        rss_child(folder, int(n_texts), int(seq), int(shard_bytes), out)
        return
    if args.smollm2_child:
        smollm2_child(*args.smollm2_child)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the children's torch reads it
    from workbench.models import quiet_transformers

    quiet_transformers()
    if args.only in (None, "random"):
        random_section(args)
    if args.only in (None, "smollm2"):
        smollm2_section(args)


def random_section(args: argparse.Namespace) -> None:
    """The random-init model: timed methods, sustained streaming, disk bandwidth, peak RSS."""
    repeats = args.repeats or (2 if args.quick else 5)
    batch, seq = (8, 128) if args.device == "cpu" else (16, 512)
    store_dtype = "float32" if args.device == "cpu" else "bfloat16"
    import transformers

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
