"""Hook sites as data: TOML families, resolution, layer parsing, adding a family by file."""

from __future__ import annotations

import pytest
import transformers as T

from workbench import capture, load_model
from workbench.errors import ConfigError, SiteError
from workbench.sites import families, parse_family, parse_layers


def test_bundled_families_cover_the_required_architectures():
    fams = families()
    assert {"gpt2", "gpt_neox", "llama", "bert"} <= set(fams)
    assert {"mistral", "qwen2"} <= set(fams["llama"].model_types)
    for fam in fams.values():
        assert {"embed", "resid_pre", "resid_post", "attn_out", "mlp_out"} <= set(fam.sites)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("all", [0, 1, 2, 3]), ("0,-1", [0, 3]), ("1:3", [1, 2]), (2, [2]), ([3, 0, 3], [0, 3])],
)
def test_parse_layers(text, expected):
    assert parse_layers(text, 4) == expected


@pytest.mark.parametrize(
    ("text", "match"), [("4", "out of range"), ("x", "cannot read"), ("3:1", "selects no layer")]
)
def test_parse_layers_errors(text, match):
    with pytest.raises(SiteError, match=match):
        parse_layers(text, 4)


def test_site_names_in_forward_order(tiny_dir):
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    names = subject.site_names()
    assert names[0] == "embed" and names[-2:] == ["final_norm", "unembed"]
    assert names.index("resid_pre.1") < names.index("resid_mid.1") < names.index("resid_post.1")
    assert subject.site("resid_post.-1").name == "resid_post.2"


def test_a_new_family_is_a_new_file(tmp_path, monkeypatch):
    """GPT-J is unknown until a TOML file describes it; then capture works with no code change."""
    config = T.GPTJConfig(
        n_layer=2, n_embd=32, n_head=4, rotary_dim=4, vocab_size=256, n_positions=64
    )
    T.GPTJForCausalLM(config).save_pretrained(tmp_path / "gptj")
    from tinymodels import bpe_tokenizer

    bpe_tokenizer().save_pretrained(tmp_path / "gptj")
    with pytest.raises(Exception, match="no hook sites known for GPTJForCausalLM"):
        load_model(tmp_path / "gptj", device="cpu")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "gptj.toml").write_text(
        'family = "gptj"\nmodel_types = ["gptj"]\nlayers = "h"\n'
        '[sites.embed]\nmodule = "drop"\n'
        '[sites.resid_pre]\nmodule = "h.{layer}"\nio = "input"\n'
        '[sites.resid_post]\nmodule = "h.{layer}"\n'
        '[sites.final_norm]\nmodule = "ln_f"\n'
    )
    monkeypatch.setenv("WORKBENCH_HOOKS_PATH", str(hooks))
    subject = load_model(tmp_path / "gptj", device="cpu")
    acts = capture(
        subject, ["a small test sentence"], sites="resid_post,final_norm", progress=False
    )
    enc = subject.tokenizer("a small test sentence", return_tensors="pt")
    hs = subject.model(**enc, output_hidden_states=True).hidden_states
    assert (acts["resid_post.0"] - hs[1][0]).abs().max() < 1e-5
    assert (acts["final_norm"] - hs[-1][0]).abs().max() < 1e-5


def test_bad_family_file(tmp_path):
    (tmp_path / "bad.toml").write_text(
        'family = "x"\nmodel_types = ["x"]\nlayers = "h"\n[sites.resid_psot]\nmodule = "h"\n'
    )
    with pytest.raises(ConfigError, match="unknown site kind"):
        parse_family(tmp_path / "bad.toml")
    (tmp_path / "worse.toml").write_text("family = ")
    with pytest.raises(ConfigError, match="not a valid hook family file"):
        parse_family(tmp_path / "worse.toml")
