"""The depth-ensemble study on tiny models: collect vs references, toys, cache, notebook."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers as T
from support import run_notebook
from tinymodels import VOCAB, bpe_tokenizer

from workbench import load_model
from workbench.analyses import depth_ensemble as de
from workbench.analyses.depth_ensemble import collect, toys
from workbench.errors import InputError, SiteError
from workbench.models.subject import Subject

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "depth_ensemble.ipynb"
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Activations are read at every layer of the residual stream.",
    "Padding must never leak into the captured rows.",
    "A short one.",
    "Geometry of representations changes across training.",
]


@pytest.fixture(scope="module")
def config(tiny_lm_dir):
    return de.DepthEnsembleConfig(
        model=str(tiny_lm_dir),
        n_texts=12,
        max_length=24,
        toy_depths="1,2,4",
        toy_steps=40,
        toy_pool=1024,
        lens_steps=10,
        shuffles=2,
        bootstrap=20,
        device="cpu",
    )


@pytest.fixture(scope="module")
def study(config, tmp_path_factory):
    cache = tmp_path_factory.mktemp("depth-cache")
    return de.run(config, cache_dir=cache, progress=False), cache


@pytest.fixture(scope="module")
def deep_gpt2(tmp_path_factory):
    """A random-init 5-layer GPT-2 (so that it has 3 middle layers to reorder)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("gpt2-5")
    config = T.GPT2Config(n_layer=5, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64)
    T.GPT2LMHeadModel(config).save_pretrained(folder)
    bpe_tokenizer().save_pretrained(folder)
    return load_model(str(folder), device="cpu")


def _without(subject, layers):
    model = copy.deepcopy(subject.model)
    blocks = model.base_model.get_submodule(subject.family.layers)
    for layer in sorted(layers, reverse=True):
        del blocks[layer]
    return Subject(model, subject.tokenizer, subject.family, "reference")


def _permuted(subject, order):
    model = copy.deepcopy(subject.model)
    blocks = model.base_model.get_submodule(subject.family.layers)
    originals = list(blocks)
    for position, source in enumerate(order):
        blocks[position] = originals[source]
    return Subject(model, subject.tokenizer, subject.family, "reference")


def _hf_loss(subject, texts, max_length):
    """Reference loss: HF's own labels loss, weighted by each text's number of predicted tokens."""
    total, count = 0.0, 0
    for text in texts:
        ids = subject.tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
        with torch.no_grad():
            out = subject.model(**ids, labels=ids["input_ids"])
        n = ids["input_ids"].shape[1] - 1
        total += float(out.loss) * n
        count += n
    return total / count


def test_layer_skip_equals_models_with_blocks_deleted_or_permuted(deep_gpt2):
    config = de.DepthEnsembleConfig(model="x", n_texts=5, max_length=16, shuffles=3, batch_size=2)
    data = collect.batches(deep_gpt2, TEXTS, config)
    skip = collect.layer_skip(deep_gpt2, data, config)
    base = _hf_loss(deep_gpt2, TEXTS, 16)
    assert skip.baseline == pytest.approx(base, rel=1e-5)
    for layer in range(5):
        ref = _hf_loss(_without(deep_gpt2, [layer]), TEXTS, 16) - base
        assert skip.single[layer] == pytest.approx(ref, rel=1e-4, abs=1e-6)
    assert skip.block_sizes.tolist() == [2] * 4 and skip.block_starts.tolist() == [0, 1, 2, 3]
    for start, delta in zip(skip.block_starts, skip.block_deltas, strict=True):
        ref = _hf_loss(_without(deep_gpt2, [start, start + 1]), TEXTS, 16) - base
        assert delta == pytest.approx(ref, rel=1e-4, abs=1e-6)
    assert skip.middle == (1, 3)
    ref = _hf_loss(_permuted(deep_gpt2, [0, 3, 2, 1, 4]), TEXTS, 16) - base
    assert skip.reverse == pytest.approx(ref, rel=1e-4, abs=1e-6)
    assert skip.shuffle_orders.shape == (3, 3)
    for order, delta in zip(skip.shuffle_orders.tolist(), skip.shuffle_deltas, strict=True):
        assert order != [1, 2, 3] and sorted(order) == [1, 2, 3]
        ref = _hf_loss(_permuted(deep_gpt2, [0, *order, 4]), TEXTS, 16) - base
        assert delta == pytest.approx(ref, rel=1e-4, abs=1e-6)
    # the model is intact afterwards
    assert collect.mean_loss(deep_gpt2, data) == pytest.approx(skip.baseline, rel=1e-12)
    assert de.LayerSkip.from_dict(json.loads(json.dumps(skip.to_dict()))).to_dict() == (
        skip.to_dict()
    )


def test_states_are_hfs_hidden_states_before_the_final_norm(deep_gpt2):
    config = de.DepthEnsembleConfig(model="x", max_length=64)
    states = collect.states(deep_gpt2, TEXTS[:2], config)
    rows = []
    for text in TEXTS[:2]:
        ids = deep_gpt2.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            hidden = deep_gpt2.model(**ids, output_hidden_states=True).hidden_states
        rows.append(torch.stack(hidden[:-1])[:, 0])  # HF's last state is after ln_f
    expected = torch.cat(rows, dim=1).double().numpy()
    assert states.shape == (6, expected.shape[1], 32)
    np.testing.assert_allclose(states[:-1], expected, rtol=1e-5, atol=1e-5)
    # the last state is the last block's output, before the final norm
    ids = deep_gpt2.tokenizer(TEXTS[0], return_tensors="pt")
    with torch.no_grad():
        final = deep_gpt2.model(**ids, output_hidden_states=True).hidden_states[-1][0]
        normed = deep_gpt2.model.transformer.ln_f(
            torch.from_numpy(states[-1, : len(final)]).float()
        )
    torch.testing.assert_close(normed, final, rtol=1e-4, atol=1e-4)


def test_toy_forward_is_the_written_recursion():
    preset = replace(de.PRESETS["cpu"], teacher_depth=6)
    teacher = toys.make_teacher("independent", preset, seed=0)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))

    def rms(v):
        return v / torch.sqrt((v * v).mean(-1, keepdim=True) + torch.finfo(v.dtype).eps)

    h = rms(x)
    for block in teacher.blocks:
        w1, b1, w2 = block.fc.weight, block.fc.bias, block.proj.weight
        h = h + torch.clamp(rms(h) @ w1.T + b1, min=0) ** 2 @ w2.T
    torch.testing.assert_close(teacher(x), rms(h) @ teacher.head.weight.T, rtol=1e-5, atol=1e-6)
    states = toys.toy_states(teacher, x)
    assert states.shape == (7, 5, 32)
    np.testing.assert_allclose(states[-1], h.double().numpy(), rtol=1e-5, atol=1e-6)


def test_teachers_and_students_are_built_as_the_paper():
    preset = replace(de.PRESETS["cpu"], teacher_depth=16)
    tied = toys.make_teacher("tied", preset, seed=0)
    independent = toys.make_teacher("independent", preset, seed=0)
    assert len({id(b) for b in tied.blocks}) == 1 and len(tied.blocks) == 16
    assert len({id(b) for b in independent.blocks}) == 16
    n_block = 32 * 128 + 128 + 128 * 32
    assert sum(p.numel() for p in tied.parameters()) == n_block + 32 * 128
    assert sum(p.numel() for p in independent.parameters()) == 16 * n_block + 32 * 128
    torch.manual_seed(0)
    plain = toys.ResidualToy(16)
    torch.testing.assert_close(independent.blocks[3].proj.weight, plain.blocks[3].proj.weight / 4)
    student = toys.make_student(4, preset)
    assert all(int(torch.count_nonzero(b.proj.weight)) == 0 for b in student.blocks)
    data = toys.teacher_outputs(tied, replace(preset, pool=64, n_test=32), seed=3)
    # a fresh student predicts the uniform distribution: KL = log V - H(teacher)
    kl = toys.per_example_kl(student, data.x_test, data.logp_test)
    entropy = -(data.logp_test.double().exp() * data.logp_test.double()).sum(-1).numpy()
    np.testing.assert_allclose(kl, np.log(128) - entropy, rtol=0, atol=1e-5)  # float32 logits
    assert toys.entropy(data.logp_test) == pytest.approx(entropy.mean())
    batch = (data.x_test, data.logp_test)
    loss = toys.kl_loss(student, batch)
    assert float(loss.detach()) == pytest.approx(kl.mean(), rel=1e-5)


def test_students_train_deterministically_through_workbench_train(monkeypatch):
    preset = replace(de.PRESETS["cpu"], teacher_depth=8, steps=15, pool=256, n_test=64)
    data = toys.teacher_outputs(toys.make_teacher("tied", preset, 0), preset, seed=1)
    calls = []
    real = toys.train
    monkeypatch.setattr(toys, "train", lambda *a, **k: calls.append(k) or real(*a, **k))
    one = toys.train_student(3, data, preset, seed=2)
    two = toys.train_student(3, data, preset, seed=2)
    assert len(calls) == 2 and calls[0]["loss_fn"] is toys.kl_loss
    assert one.losses == two.losses and one.losses[-1] < one.losses[0]
    assert one.config.weight_decay == 0 and one.config.grad_clip is None


def test_study_runs_every_part(study, config):
    result, _ = study
    model = result.model
    assert model.geometry.n_layers == 2 and model.lens is not None and model.skip is not None
    assert np.all((model.geometry.step_angle > 0) & (model.geometry.step_angle < 180))
    # the same loss through three paths: the lens's final loss, the skip baseline, HF's labels
    subject = load_model(config.model, device="cpu")
    texts = collect.texts(config)
    assert model.skip.baseline == pytest.approx(model.lens.final_loss, rel=1e-6)
    assert model.skip.baseline == pytest.approx(_hf_loss(subject, texts, 24), rel=1e-5)
    assert model.lens.logit[-1] == pytest.approx(model.lens.final_loss, rel=1e-6)
    assert model.lens.exit_counts.sum() == sum(
        len(subject.tokenizer(t)["input_ids"][:24]) for t in texts
    )
    toy = result.toys
    assert [t.kind for t in toy.teachers] == ["independent", "tied"]
    assert [(s.teacher, s.depth) for s in toy.students] == [
        (k, d) for k in ("independent", "tied") for d in (1, 2, 4)
    ]
    for student in toy.students:
        assert student.steps == 40 and student.per_example.shape == (4096,)
        assert student.test_loss == pytest.approx(student.per_example.mean())
    assert result.scaling.n_runs == 203
    assert any("fewer than 2 middle layers" in n for n in result.notes)


def test_the_chinchilla_refit_agrees_with_the_paper(study):
    # the paper effects themselves are study.CLAIMS, checked over seeds in the claims test
    m = study[0].metrics()
    assert abs(m["chinchilla_alpha_depth"] - 1.2) < 0.3
    assert 0.15 < m["chinchilla_alpha_depth_se"] < 0.35


def test_metrics_block_has_the_issue_keys(study):
    m = study[0].metrics()
    assert tuple(m) == de.METRIC_KEYS
    assert de.METRIC_KEYS[:10] == (
        "step_angle_deg",
        "increment_angle_deg",
        "layer_skip_delta_loss",
        "early_exit_fraction",
        "alpha_independent",
        "alpha_tied",
        "increment_angle_independent_deg",
        "increment_angle_tied_deg",
        "chinchilla_alpha_depth",
        "chinchilla_alpha_depth_se",
    )
    assert len(m["step_angle_deg"]) == 2 and len(m["increment_angle_deg"]) == 1
    assert len(m["layer_skip_delta_loss"]) == 2 and 0 <= m["early_exit_fraction"] <= 1
    assert isinstance(m["alpha_independent"], float) and isinstance(m["alpha_tied"], float)
    json.dumps(m, allow_nan=False)


def test_result_round_trips_and_every_figure_draws(study):
    result, _ = study
    again = de.DepthEnsembleResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.to_dict() == result.to_dict()
    assert result.figure_kinds() == list(de.FIGURES)
    for kind in de.FIGURES:
        fig = result.figure(kind)
        assert fig.layout.title.text and len(fig.data) > 0
    with pytest.raises(InputError, match="unknown figure kind"):
        result.figure("nope")


def test_a_rerun_from_the_cache_loads_and_trains_nothing(
    config, study, monkeypatch, forbid_model_loading
):
    result, cache = study

    def fail(*args, **kwargs):
        raise AssertionError("a cached unit was recomputed")

    monkeypatch.setattr(toys, "train", fail)
    monkeypatch.setattr(toys, "teacher_outputs", fail)
    again = de.run(config, cache_dir=cache, progress=False)
    assert again.to_dict() == result.to_dict()
    # other toy settings are another cache: the toys train again, the model part does not
    with pytest.raises(AssertionError, match="recomputed"):
        de.run(replace(config, toy_steps=41), cache_dir=cache, progress=False)


def test_an_encoder_gets_the_geometry_only(config, study):
    _, cache = study
    result = de.run(
        replace(config, model="minilm", scaling_csv=""), cache_dir=cache, progress=False
    )
    assert result.model.geometry.n_layers == 6
    assert result.model.lens is None and result.model.skip is None and result.scaling is None
    assert any("no language-model head" in n for n in result.notes)
    assert "lens_loss" not in result.figure_kinds()
    m = result.metrics()
    assert m["layer_skip_delta_loss"] is None and len(m["step_angle_deg"]) == 6


def test_bad_inputs_fail_before_anything_loads_or_trains(config, tmp_path, monkeypatch, tiny_dir):
    def fail(*args, **kwargs):
        raise AssertionError("trained or loaded before the bad input was seen")

    monkeypatch.setattr(toys, "train", fail)
    monkeypatch.setattr(toys, "teacher_outputs", fail)
    bad = tmp_path / "runs.csv"
    bad.write_text("d_model,n_layers,loss\n512,8,3.0\n")
    with monkeypatch.context() as m:
        m.setattr(collect, "load_model", fail)
        with pytest.raises(InputError, match=r"lacks column.*num_tokens"):
            de.run(replace(config, scaling_csv=str(bad)), progress=False)
    # a hook file without resid_pre: the model loads, the check fails, no toy trains
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    source = (REPO / "hooks" / "gpt2.toml").read_text()
    section = '[sites.resid_pre]\nmodule = "h.{layer}"\nio = "input"\n'
    assert section in source
    (hooks / "gpt2.toml").write_text(source.replace(section, ""))
    monkeypatch.setenv("WORKBENCH_HOOKS_PATH", str(hooks))
    with pytest.raises(SiteError, match=r"lacks the site.*resid_pre") as info:
        de.run(replace(config, model=str(tiny_dir("gpt2")), scaling_csv=""), progress=False)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_notebook_runs_under_papermill(tiny_lm_dir, tmp_path, html_figures):
    out, record = run_notebook(
        NOTEBOOK,
        {
            "model": str(tiny_lm_dir),
            "n_texts": 8,
            "max_length": 16,
            "toy_depths": "1,2,3",
            "toy_steps": 20,
            "toy_pool": 512,
            "lens_steps": 5,
            "bootstrap": 10,
            "device": "cpu",
        },
        tmp_path,
        cwd=tmp_path,
    )
    assert all(f.endswith(".html") for f in record["figures"])  # html_figures
    assert record["analysis"] == "depth_ensemble" and record["params"]["toy_steps"] == 20
    assert tuple(record["metrics"]) == de.METRIC_KEYS
    assert record["metrics"]["chinchilla_alpha_depth"] == pytest.approx(1.1, abs=0.1)
    names = {Path(f).name for f in record["figures"]}
    for stem in de.FIGURES:
        assert f"{stem}.html" in names
    manifest = json.loads((out / "figures" / "figures.json").read_text())
    assert [f["name"] for f in manifest["figures"]] == list(de.FIGURES)


def test_kl_of_a_student_equals_torchs_kl_div():
    logp = torch.log_softmax(torch.randn(7, 128, generator=torch.Generator().manual_seed(0)), -1)
    student = toys.make_student(2, de.PRESETS["cpu"])
    x = torch.randn(7, 32)
    expected = F.kl_div(
        torch.log_softmax(student(x), -1), logp, log_target=True, reduction="none"
    ).sum(-1)
    np.testing.assert_allclose(
        toys.per_example_kl(student, x, logp),
        expected.detach().double().numpy(),
        rtol=1e-5,
        atol=1e-7,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "toy_depths", "8,4,16"], "toy_depths='8,4,16' is not sorted"),
        (["-p", "toy_depths", "0,4,8"], "below 1"),
        (["-p", "teacher", "shared"], "teacher"),
        (["-p", "scaling_csv", "BAD"], "lacks column(s) num_tokens"),
    ],
)
def test_the_cli_refuses_bad_input_with_exit_2_before_any_kernel(tmp_path, capsys, argv, message):
    from workbench.cli import main

    bad = tmp_path / "runs.csv"
    bad.write_text("d_model,n_layers,loss\n512,8,3.0\n")
    argv = [str(bad) if a == "BAD" else a for a in argv]
    out = tmp_path / "out"
    assert main(["run", "depth_ensemble", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not out.exists()
    assert de.check({"out_dir": "x"}) == de.DepthEnsembleConfig()  # the defaults pass
