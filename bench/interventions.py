"""Interventions benchmark: the cost of an edit, against a bare forward, a hand-written hook,
TransformerLens and nnsight; and the batched activation-patching sweep against a naive loop.

    python bench/interventions.py [--repeats N] [--threads N] [--quick]

A GPT-2-small-shaped random-init model (12 layers, d=768, 12 heads, vocab 50257) built from
``GPT2Config``, saved and loaded with ``workbench.load_model`` on the CPU; a batch of 4 x 32
random token ids (small, so that per-hook overheads show). Steering adds one vector at every
block's output (``resid_post``, 12 sites); each method is first checked to give the hand-written
hook's logits. Every method runs
once to warm up, then ``--repeats`` interleaved rounds (so background load hits all alike); the
table shows medians and ratios over the bare forward.

Then an activation-patching sweep on one 16-token prompt, 12 ``resid_post`` sites x 16 positions
(192 patched runs): :func:`workbench.interventions.activation_patching` (positions batched, 16
a pass) against a loop of one ``intervene`` + forward per (site, position); the two must agree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import torch

GPT2_SMALL = {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}


def build(folder: Path) -> Path:
    """A random-init GPT-2-small-shaped model and a tiny tokenizer, saved to ``folder``."""
    import transformers as T
    from tokenizers import ByteLevelBPETokenizer

    torch.manual_seed(0)
    T.GPT2LMHeadModel(T.GPT2Config(**GPT2_SMALL)).save_pretrained(folder)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["a tiny tokenizer"] * 4, vocab_size=300, show_progress=False)
    eos = "<|endoftext|>"
    bpe.add_special_tokens([eos])
    T.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token=eos, eos_token=eos, pad_token=eos
    ).save_pretrained(folder)
    return folder


def timed(fns: dict[str, Callable[[], torch.Tensor]], repeats: int) -> dict[str, list[float]]:
    """Wall times: one warm-up each, then ``repeats`` round-robin rounds."""
    times: dict[str, list[float]] = {label: [] for label in fns}
    with torch.inference_mode():
        for fn in fns.values():
            fn()
        for _ in range(repeats):
            for label, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - start)
    return times


def steering_methods(subject, ids: torch.Tensor, v: torch.Tensor) -> dict[str, Callable]:
    """Every way of adding ``v`` at every block output, by row label."""
    import nnsight

    from workbench.backends.nnsight import wrap
    from workbench.backends.transformer_lens import build_bridge
    from workbench.interventions import add, intervene

    model, n_layers = subject.model, subject.n_layers
    blocks = [subject.site(f"resid_post.{i}").module for i in range(n_layers)]

    def bare() -> torch.Tensor:
        return model(ids, use_cache=False).logits

    def hand_written() -> torch.Tensor:
        def hook(_m, _a, out):
            return (out[0] + v, *out[1:]) if isinstance(out, tuple) else out + v

        handles = [b.register_forward_hook(hook) for b in blocks]
        try:
            return bare()
        finally:
            for h in handles:
                h.remove()

    def workbench() -> torch.Tensor:
        with intervene(subject, {"resid_post": add(v)}):
            return bare()

    def workbench_last() -> torch.Tensor:
        with intervene(subject, {"resid_post": add(v, positions="last")}):
            return bare()

    bridge = build_bridge(subject)
    tl_hooks = [(f"blocks.{i}.hook_resid_post", lambda x, hook: x + v) for i in range(n_layers)]

    def transformer_lens() -> torch.Tensor:
        return bridge.run_with_hooks(ids, fwd_hooks=tl_hooks)

    nn_model = wrap(subject)
    base = next(n for n, m in model.named_modules() if m is model.base_model)
    envoys = nn_model.get(f"{base}.{subject.family.layers}")

    def nnsight_trace() -> torch.Tensor:
        with nn_model.trace(ids):
            for i in range(n_layers):
                out = envoys[i].output
                if isinstance(out, tuple):
                    envoys[i].output = (out[0] + v, *out[1:])
                else:
                    envoys[i].output = out + v
            logits = nnsight.save(nn_model.output.logits)
        return logits

    return {
        "HF forward (bare)": bare,
        "hand-written forward hooks (12)": hand_written,
        "workbench intervene, add at resid_post": workbench,
        "workbench intervene, add at 'last'": workbench_last,
        "TransformerLens run_with_hooks": transformer_lens,
        "nnsight trace, edit 12 block outputs": nnsight_trace,
    }


def naive_sweep(subject, clean: torch.Tensor, corrupt: torch.Tensor, metric) -> torch.Tensor:
    """One ``intervene`` + forward per (site, position)."""
    from workbench.hooking import read_hooks
    from workbench.interventions import intervene, patch

    sites = subject.expand("resid_post")
    values: dict[str, torch.Tensor] = {}
    with torch.inference_mode():
        with read_hooks(sites, lambda s, t: values.__setitem__(s.name, t[0].clone())):
            subject.model(clean[None], use_cache=False)
        out = torch.empty(len(sites), len(clean), dtype=torch.float64)
        for i, site in enumerate(sites):
            for p in range(len(clean)):
                with intervene(subject, {site.name: patch(values[site.name], positions=[p])}):
                    out[i, p] = metric(subject.model(corrupt[None], use_cache=False).logits)[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: 1)")
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    torch.set_num_threads(args.threads or 1)
    repeats = args.repeats or (3 if args.quick else 7)
    import transformers

    from workbench import load_model
    from workbench.interventions import activation_patching, logit_diff
    from workbench.models import quiet_transformers

    quiet_transformers()
    root = Path(tempfile.mkdtemp(prefix="wb-bench-iv-"))
    try:
        subject = load_model(build(root / "model"), device="cpu")
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(0, subject.model.config.vocab_size, (4, 32), generator=gen)
        v = torch.randn(subject.d_model, generator=gen)
        print(
            f"model: GPT-2-small shape, random init, {subject.n_layers} layers, "
            f"d={subject.d_model}, float32, CPU, {torch.get_num_threads()} thread(s); batch 4x32; "
            f"median of {repeats} interleaved rounds; torch {torch.__version__}, transformers "
            f"{transformers.__version__}, transformer-lens {version('transformer-lens')}, "
            f"nnsight {version('nnsight')}"
        )
        fns = steering_methods(subject, ids, v)
        with torch.inference_mode():
            reference = fns["hand-written forward hooks (12)"]()
            for label in (
                "workbench intervene, add at resid_post",
                "nnsight trace, edit 12 block outputs",
            ):
                diff = (fns[label]() - reference).abs().max().item()
                print(f"  max |logits - hand-written| for {label}: {diff:.2e}", file=sys.stderr)
        times = timed(fns, repeats)
        medians = {label: statistics.median(t) for label, t in times.items()}
        bare, hand = medians["HF forward (bare)"], medians["hand-written forward hooks (12)"]
        print(f"\n{'steering, 12 sites':<42} {'median s':>9} {'x bare':>7} {'x hand':>7}")
        for label, seconds in medians.items():
            print(f"{label:<42} {seconds:>9.3f} {seconds / bare:>6.2f}x {seconds / hand:>6.2f}x")

        clean = torch.randint(0, subject.model.config.vocab_size, (16,), generator=gen)
        corrupt = clean.clone()
        corrupt[5] = (clean[5] + 1) % subject.model.config.vocab_size
        metric = logit_diff(1, 2)
        sweep_times: dict[str, list[float]] = {"batched": [], "naive": []}
        results = {}
        for _ in range(max(1, repeats // 2)):
            start = time.perf_counter()
            results["batched"] = activation_patching(
                subject, clean, corrupt, "resid_post", metric, batch_size=16, progress=False
            ).scores
            sweep_times["batched"].append(time.perf_counter() - start)
            start = time.perf_counter()
            results["naive"] = naive_sweep(subject, clean, corrupt, metric).numpy()
            sweep_times["naive"].append(time.perf_counter() - start)
        diff = abs(results["batched"] - results["naive"]).max()
        batched = statistics.median(sweep_times["batched"])
        naive = statistics.median(sweep_times["naive"])
        print(
            f"\nactivation patching, 12 sites x 16 positions (192 patched runs), "
            f"median of {len(sweep_times['naive'])}:"
        )
        print(f"  activation_patching (16 positions a pass)  {batched:>7.3f} s")
        print(
            f"  naive loop (one intervene + forward each)  {naive:>7.3f} s  {naive / batched:.1f}x"
        )
        print(f"  max |batched - naive| metric: {diff:.2e}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
