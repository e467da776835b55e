"""load_model: embedded MiniLM, tiny-lm checkpoints, local folders, errors and safety."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
import transformers as T
from tinymodels import SENTENCES, SMALL_TINY_LM

from workbench import capture, load_model
from workbench.errors import ModelNotFoundError, UnknownArchitectureError
from workbench.models.tiny_lm import TinyLMConfig, checkpoint_steps, default_path, train_tiny_lm


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


def test_tiny_lm_is_deterministic(tiny_lm, tmp_path):
    again = train_tiny_lm(SMALL, out=tmp_path / "again", progress=False)
    a = load_model(tiny_lm, device="cpu").model.state_dict()
    b = load_model(again, device="cpu").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_tiny_lm_by_name_from_cache(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    target = default_path()
    target.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(tiny_lm, target)
    subject = load_model("tiny-lm", revision="step-10", device="cpu")
    assert subject.revision == "step-10" and subject.name == "tiny-lm"
    with pytest.raises(
        ModelNotFoundError, match=r"no revision 'step-7'.*step-0, step-10, step-20, step-50"
    ):
        load_model("tiny-lm", revision="step-7")


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
