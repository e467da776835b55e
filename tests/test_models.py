"""load_model: embedded MiniLM, tiny-lm checkpoints, local folders, errors and safety."""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import transformers as T
from tinymodels import SENTENCES, SMALL_TINY_LM

from workbench import capture, load_model
from workbench.errors import ModelNotFoundError, UnknownArchitectureError
from workbench.models.tiny_lm import TinyLMConfig, checkpoint_steps, default_path


def test_minilm_is_the_real_pretrained_encoder(minilm):
    assert minilm.family.name == "bert" and minilm.n_layers == 6 and minilm.d_model == 384
    assert sum(p.numel() for p in minilm.model.parameters()) == 22_713_216
    texts = [
        "A man is playing a guitar.",
        "Someone plays an instrument.",
        "The stock market fell sharply.",
    ]
    acts = capture(minilm, texts, sites="resid_post.5", positions="mean", progress=False)
    emb = torch.nn.functional.normalize(acts["resid_post.5"], dim=-1)
    sim = emb @ emb.T
    assert sim[0, 1] > 0.5 > sim[0, 2]  # trained weights: paraphrases are close, unrelated are not


def test_minilm_matches_hf_on_real_text(minilm):
    texts = SENTENCES
    acts = capture(minilm, texts, sites="resid_post", batch_size=2, progress=False)
    for i, text in enumerate(texts):
        enc = minilm.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            hs = minilm.model(**enc, output_hidden_states=True).hidden_states
        for layer in range(6):
            torch.testing.assert_close(
                acts.text(i, f"resid_post.{layer}"), hs[layer + 1][0], atol=1e-5, rtol=0
            )


def test_checkpoint_steps_are_log_spaced():
    assert checkpoint_steps(500) == [0, 10, 20, 50, 100, 200, 500]
    assert checkpoint_steps(30) == [0, 10, 20, 30]


def test_default_tiny_lm_is_trained_enough_and_not_confused_with_v1():
    default = TinyLMConfig()
    assert default.steps * default.batch_size * default.seq_len >= 2_000_000  # tokens seen
    assert checkpoint_steps(default.steps)[:4] == [0, 10, 20, 50]  # early dynamics resolved
    assert default.tag == "v3-default"  # never the v1 (0.5M tokens) or v2 (any threads) cache
    assert TinyLMConfig(steps=500, batch_size=8).tag == "v3-batch_size8"


SMALL = TinyLMConfig(**SMALL_TINY_LM)


@pytest.fixture(scope="module")
def tiny_lm(tiny_lm_dir):
    return tiny_lm_dir


def test_tiny_lm_trains_with_checkpoints_and_learns(tiny_lm):
    record = json.loads((tiny_lm / "training.json").read_text())
    assert [c["revision"] for c in record["checkpoints"]] == [
        "step-0",
        "step-10",
        "step-20",
        "step-50",
    ]
    losses = [c["val_loss"] for c in record["checkpoints"]]
    assert losses[-1] < losses[0] - 0.5
    first = load_model(tiny_lm, revision="step-0", device="cpu")
    last = load_model(tiny_lm, device="cpu")
    assert last.revision == "step-50" and first.revision == "step-0"
    assert first.family.name == "gpt2" and first.n_layers == 2
    assert not torch.equal(first.model.lm_head.weight, last.model.lm_head.weight)
    assert list(tiny_lm.glob("step-*/*.bin")) == []  # safetensors only


def reference_train_tiny_lm(config: TinyLMConfig, out: Path) -> Path:
    """The tiny-lm training loop as it was before it moved onto ``workbench.train`` (verbatim but
    for the progress bar), kept as the reference the trainer must reproduce bitwise."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from workbench.models.tiny_lm import corpus, train_tokenizer

    def lr_factor(step: int) -> float:
        if step < config.warmup:
            return (step + 1) / config.warmup
        progress = (step - config.warmup) / max(1, config.steps - config.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    @torch.no_grad()
    def evaluate(model, val, n_windows=16):
        n = min(n_windows, (len(val) - 1) // config.seq_len)
        batch = val[: n * config.seq_len].view(n, config.seq_len)
        return round(float(model(input_ids=batch, labels=batch).loss), 4)

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
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    gen = torch.Generator().manual_seed(config.seed)
    save_at = set(checkpoint_steps(config.steps))
    record: dict = {"config": asdict(config), "n_train_tokens": len(train), "checkpoints": []}
    for step in range(config.steps + 1):
        if step in save_at:
            model.eval()
            record["checkpoints"].append(
                {"step": step, "revision": f"step-{step}", "val_loss": evaluate(model, val)}
            )
            model.save_pretrained(out / f"step-{step}")
            tokenizer.save_pretrained(out / f"step-{step}")
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
    (out / "training.json").write_text(json.dumps(record, indent=2))
    return out


def test_tiny_lm_on_the_trainer_reproduces_the_old_loop_bitwise(tiny_lm, tmp_path):
    from safetensors.torch import load_file

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny-lm trains on one thread whatever the process's count
    try:
        reference = reference_train_tiny_lm(SMALL, tmp_path / "reference")
    finally:
        torch.set_num_threads(threads)
    old = json.loads((reference / "training.json").read_text())
    new = json.loads((tiny_lm / "training.json").read_text())
    assert new["train_config"]["threads"] == 1  # the same weights on any number of cores
    assert new["checkpoints"] == old["checkpoints"] and new["config"] == old["config"]
    assert new["n_train_tokens"] == old["n_train_tokens"]
    for step in checkpoint_steps(SMALL.steps):
        a = load_file(tiny_lm / f"step-{step}" / "model.safetensors")
        b = load_file(reference / f"step-{step}" / "model.safetensors")
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), f"step {step} differs"
        for name in ("tokenizer.json", "config.json"):
            assert (tiny_lm / f"step-{step}" / name).read_bytes() == (
                reference / f"step-{step}" / name
            ).read_bytes()


def test_tiny_lm_by_name_from_cache(tiny_lm_home):
    subject = load_model("tiny-lm", revision="step-10", device="cpu")
    assert subject.revision == "step-10" and subject.name == "tiny-lm"
    assert subject.n_layers == SMALL.n_layers  # the session's small one, not the default
    with pytest.raises(
        ModelNotFoundError, match=r"no revision 'step-7'.*step-0, step-10, step-20, step-50"
    ):
        load_model("tiny-lm", revision="step-7")


def test_tests_never_train_the_default_tiny_lm(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="full default tiny-lm"):
        load_model("tiny-lm")
    assert not default_path().exists()


def test_unknown_model_errors(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"no model folder '\./nowhere'"):
        load_model("./nowhere")
    with pytest.raises(ModelNotFoundError, match="offline and not in the Hugging Face cache"):
        load_model("EleutherAI/pythia-70m-not-cached")
    with pytest.raises(ModelNotFoundError, match="single revision"):
        load_model("minilm", revision="v2")


def test_unknown_architecture_names_the_class_and_the_folder(tmp_path):
    config = T.OPTConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        ffn_dim=32,
        vocab_size=64,
        max_position_embeddings=32,
        word_embed_proj_dim=16,
    )
    T.OPTForCausalLM(config).save_pretrained(tmp_path / "opt")
    from tinymodels import bpe_tokenizer

    bpe_tokenizer().save_pretrained(tmp_path / "opt")
    with pytest.raises(
        UnknownArchitectureError, match=r"OPTForCausalLM \(model_type='opt'\).*hooks/?"
    ):
        load_model(tmp_path / "opt", device="cpu")


class _Exploit:
    def __reduce__(self):
        import os

        return (os.system, ("touch /tmp/workbench-pickle-ran",))


def test_pickled_weights_are_never_executed(tiny_dir, tmp_path):
    import os
    import shutil

    folder = tmp_path / "evil"
    shutil.copytree(tiny_dir("gpt2"), folder)
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as fh:
        pickle.dump({"weights": _Exploit()}, fh)
    marker = "/tmp/workbench-pickle-ran"
    if os.path.exists(marker):
        os.unlink(marker)
    with pytest.raises(ModelNotFoundError):
        load_model(folder, device="cpu")
    assert not os.path.exists(marker)


def test_custom_wrapped_subject(tiny_dir):
    from workbench import Subject

    model = T.AutoModelForCausalLM.from_pretrained(tiny_dir("llama"))
    tokenizer = T.AutoTokenizer.from_pretrained(tiny_dir("llama"))
    subject = Subject.wrap(model, tokenizer, name="mine")
    assert subject.family.name == "llama"
    assert "resid_mid.2" in subject.site_names() and subject.site_names()[-1] == "unembed"
