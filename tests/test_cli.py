"""The workbench command: listing, capture to a store and resume, one-line errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench import ActivationStore, capture, load_model
from workbench.cli import main


def test_models_lists_embedded_models_and_families(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for word in ("minilm", "tiny-lm", "gpt2", "gpt_neox", "llama", "qwen2", "bert"):
        assert word in out


def test_capture_writes_a_store_equal_to_the_api(tiny_dir, tmp_path, capsys):
    texts = tmp_path / "texts.jsonl"
    texts.write_text('{"text": "One text here."}\n{"text": "And a second, longer text here."}\n')
    args = [
        "capture",
        "--model",
        str(tiny_dir("gpt2")),
        "--sites",
        "resid_post,final_norm",
        "--layers",
        "0,-1",
        "--texts",
        str(texts),
        "--out",
        str(tmp_path / "store"),
    ]
    assert main(args) == 0
    store = ActivationStore(tmp_path / "store")
    assert store.sites == ["resid_post.0", "resid_post.2", "final_norm"]
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    mem = capture(
        subject,
        ["One text here.", "And a second, longer text here."],
        sites="resid_post.2",
        progress=False,
    )
    torch.testing.assert_close(
        store.read("resid_post.2"), mem["resid_post.2"], atol=1e-5, rtol=1e-5
    )
    assert main(args) == 0  # a rerun resumes: nothing to do, same store
    # The repr's first line (with complete=True) is clipped where tmp paths are long; its second
    # line ends in the state: "complete", or "resumable (done/total shards)".
    out = capsys.readouterr().out
    assert ", complete\n" in out and "resumable" not in out and "complete=False" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [
                "--model",
                "nonexistent-model-xyz",
                "--sites",
                "resid_post",
                "--texts",
                "builtin:pydoc",
            ],
            "cannot load model",
        ),
        (
            ["--model", "{gpt2}", "--sites", "resid_bogus", "--texts", "builtin:pydoc"],
            "unknown site 'resid_bogus'",
        ),
        (
            [
                "--model",
                "{gpt2}",
                "--sites",
                "resid_post",
                "--layers",
                "12",
                "--texts",
                "builtin:pydoc",
            ],
            "layer 12 out of range",
        ),
        (
            ["--model", "{gpt2}", "--sites", "resid_post", "--texts", "{tmp}/empty.txt"],
            "holds no text",
        ),
        (
            ["--model", "{gpt2}", "--sites", "resid_post", "--texts", "{tmp}/missing.txt"],
            "cannot read text source",
        ),
        (
            ["--model", "{gpt2}", "--sites", "resid_post", "--texts", "data.csv"],
            "unknown text source",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_dir, tmp_path, capsys, argv, message):
    (tmp_path / "empty.txt").write_text("\n\n")
    argv = [a.format(gpt2=tiny_dir("gpt2"), tmp=tmp_path) for a in argv]
    assert main(["capture", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def _texts(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("One text here.\nAnd a second, longer text here.\nA third one.\n")
    return texts


def test_capture_prints_placement_and_store_size_before_running(tiny_dir, tmp_path, capsys):
    from workbench.capturing import estimate_bytes
    from workbench.devices import format_bytes

    out = tmp_path / "store"
    args = ["capture", "--model", str(tiny_dir("gpt2")), "--sites", "resid_post,final_norm"]
    assert main([*args, "--texts", str(_texts(tmp_path)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    store = ActivationStore(out)
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    size = estimate_bytes(subject, store.n_rows, "resid_post,final_norm")
    on_disk = sum(f.stat().st_size for f in out.glob("shard-*.safetensors"))
    assert size <= on_disk < size + 4096  # the estimate is the data; shard headers add a little
    lines = printed.splitlines()
    assert lines[0] == "placement: cpu"
    assert lines[1].startswith("store: about ") and f"({store.n_rows} rows x 4 sites" in lines[1]
    assert format_bytes(size) in lines[1]
    assert printed.index("store: about") < printed.index(", complete")


def test_capture_of_a_placed_model_lists_blocks_and_matches_the_whole_model(
    tiny_dir, tmp_path, capsys
):
    split = {
        "model.embed_tokens": "cpu",
        "model.rotary_emb": "cpu",
        "model.layers.0": "cpu",
        "model.layers.1": "disk",
        "model.layers.2": "disk",
        "model.norm": "cpu",
        "lm_head": "cpu",
    }
    out = tmp_path / "store"
    argv = [
        "capture",
        "--model",
        str(tiny_dir("llama")),
        "--sites",
        "resid_post",
        "--texts",
        str(_texts(tmp_path)),
        "--batch-size",
        "1",
        "--device-map",
        json.dumps(split),
        "--offload-folder",
        str(tmp_path / "offload"),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "placement: 5 on cpu, 2 on disk" in printed
    assert "  model.layers.1 -> disk (offloaded" in printed
    assert "  model.layers.0 -> cpu\n" in printed
    whole = load_model(tiny_dir("llama"), device="cpu")
    want = capture(whole, _texts(tmp_path), sites="resid_post", progress=False)
    for name in want:
        torch.testing.assert_close(ActivationStore(out).read(name), want[name], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-memory", "cpu:8GiB"], "is not DEVICE=SIZE"),
        (["--device-map", "{model.layers.0: cpu}"], "--device-map is not a JSON object"),
    ],
)
def test_bad_placement_flags_exit_2_with_one_line(tiny_dir, tmp_path, capsys, flags, message):
    argv = ["capture", "--model", str(tiny_dir("llama")), "--sites", "resid_post"]
    argv += ["--texts", str(_texts(tmp_path)), "--out", str(tmp_path / "out"), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_console_script_and_debug_traceback(tmp_path):
    exe = [sys.executable, "-m", "workbench.cli"]
    ok = subprocess.run([*exe, "models"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "minilm" in ok.stdout
    bad = [
        *exe,
        "capture",
        "--model",
        "minilm",
        "--sites",
        "unembed",
        "--texts",
        "builtin:pydoc",
        "--out",
        str(tmp_path / "x"),
    ]
    plain = subprocess.run(bad, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2 and plain.stderr.strip().splitlines()[-1].startswith(
        "error: unknown site 'unembed'"
    )
    assert "Traceback" not in plain.stderr
    # --debug shows the traceback of the same kind of error (one that needs no model load)
    early = [*exe, "capture", "--model", "minilm", "--sites", "resid_post.0"]
    early += ["--texts", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "y")]
    plain = subprocess.run(early, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().startswith("error: cannot read text source")
    debug = subprocess.run(
        [*early[:3], "--debug", *early[3:]], capture_output=True, text=True, timeout=300
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_train_tiny_lm_passes_its_options_to_the_trainer(tmp_path, monkeypatch, capsys):
    from workbench.models import tiny_lm

    calls = []

    def fake(config, *, out, progress=True):
        calls.append((config, out))
        return out

    monkeypatch.setattr(tiny_lm, "train_tiny_lm", fake)
    assert main(["train", "tiny-lm", "--steps", "7", "--seed", "3", "--out", str(tmp_path)]) == 0
    assert calls == [(tiny_lm.TinyLMConfig(steps=7, seed=3), str(tmp_path))]
    assert capsys.readouterr().out.strip() == str(tmp_path)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    assert main(["train", "tiny-lm"]) == 0  # into the cache, through a temporary folder
    assert calls[-1][0] == tiny_lm.TinyLMConfig()
    assert Path(calls[-1][1]).parent == tiny_lm.default_path().parent
    assert capsys.readouterr().out.strip() == str(tiny_lm.default_path())
    assert json.loads((tiny_lm.default_path() / "recipe.json").read_text()) == tiny_lm.recipe()
    assert main(["train", "tiny-lm"]) == 0 and len(calls) == 2  # cached: not trained again
    assert main(["train", "tiny-lm", "--steps", "0"]) == 2
    assert capsys.readouterr().err == "error: steps must be at least 1, got 0\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "n_texts", "0"], "n_texts"),
        (["-p", "site", "resid_sideways"], "site"),
        (["-p", "lens", "logit,bogus"], "lens"),
    ],
)
def test_run_refuses_a_bad_study_config_before_any_kernel(tmp_path, capsys, argv, message):
    """The study's own config check runs in the CLI: exit 2, one line, no run folder written."""
    analysis = "readouts" if "lens" in argv else "anisotropy"
    out = tmp_path / "out"
    assert main(["run", analysis, *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not out.exists()
