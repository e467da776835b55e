"""The geometric-memory study on small graphs: the effect, the cache, results, the notebook."""

from __future__ import annotations

import html
import itertools
import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support import run_notebook

from workbench.analyses import geometric_memory as gm
from workbench.analyses.geometric_memory import collect, study, summary
from workbench.errors import ConfigError, CriterionWarning, InputError

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "geometric_memory.ipynb"
TRAINERS = (
    "memorize_edges",
    "finetune_paths",
    "train_tied_node2vec",
    "train_walk_node2vec",
    "train_incontext",
    "umap_coordinates",
)


@pytest.fixture(scope="module")
def star(tmp_path_factory):
    """An 8-arm path-star, 2 hops an arm: the transformer, control, baselines, in-context control.

    Two folds of four held-out arms and short path fine-tuning keep it to seconds; the held-out
    accuracy of the full-size default is in docs/studies/geometric_memory.md (two-hop arms make
    the first step the target's own neighbour, a lookup the associative control can learn too).
    """
    config = gm.GeometricMemoryConfig(
        degree=8,
        path_length=2,
        epochs=400,
        n_heldout=4,
        path_epochs=40,
        incontext_epochs=30,
        ingredients=False,
        umap=False,
        device="cpu",
    )
    cache = tmp_path_factory.mktemp("gm-cache")
    return config, gm.run(config, cache_dir=cache, progress=False), cache


@pytest.fixture
def fixed_steps(monkeypatch):
    """Tests of the plumbing train a few steps, far from converged: the cap is the steps."""
    monkeypatch.setattr(collect, "CAP_FACTOR", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CriterionWarning)
        yield


@pytest.fixture(scope="module")
def release_grid(tmp_path_factory):
    """The release's 4x4 grid with its own split (rows fine-tuned, columns held out)."""
    config = gm.GeometricMemoryConfig(
        graph="release_grid",
        epochs=250,
        path_epochs=10,
        incontext_epochs=0,
        ingredients=False,
        umap=False,
        device="cpu",
    )
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        patch.setattr(collect, "CAP_FACTOR", 1)  # ten fine-tuning steps: no criterion
        warnings.simplefilter("ignore", CriterionWarning)
        return gm.run(config, progress=False)


def _no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a cached unit was recomputed")

    for name in TRAINERS:
        monkeypatch.setattr(collect, name, refuse)


def test_both_memorize_every_edge_and_only_the_transformer_is_geometric(star):
    _, result, _ = star
    m = result.metrics()
    # the centre has 8 successors, only 5 fit in its top 5: 29 of the 32 facts at best
    assert m["edge_recovery_top5_ceiling"] == pytest.approx(29 / 32)
    assert m["edge_recovery_top5"] == m["edge_recovery_top5_ceiling"]
    assert m["edge_recovery_top5_control"] == m["edge_recovery_top5_ceiling"]
    assert m["geometric_level"] > m["geometric_level_control"] + 0.08
    assert m["spectral_top_energy"] > m["spectral_top_energy_control"]
    assert m["spectral_top_energy"] > m["spectral_top_energy_chance"] + 0.1
    assert m["spectral_top_energy_node2vec"] > m["spectral_top_energy_chance"] + 0.2
    assert m["distance_spearman"] > m["distance_spearman_control"] + 0.2
    # the control's embeddings never moved: they are the random initialization
    assert result.control.curve.geometric_level[0] == pytest.approx(m["geometric_level_control"])


def test_held_out_queries_are_scored_per_arm_and_the_incontext_control_stays_near_chance(star):
    _, result, _ = star
    m = result.metrics()
    assert m["chance_accuracy"] == pytest.approx(1 / 8)
    assert len(result.transformer.paths.correct) == 8  # every arm held out once
    assert m["heldout_path_accuracy"] == np.mean(result.transformer.paths.correct)
    assert m["incontext_path_accuracy"] <= m["incontext_chance_accuracy"] + 0.2
    assert m["incontext_chance_accuracy"] == pytest.approx(1 / 8)


def test_training_curve_records_memorization(star):
    _, result, _ = star
    curve = result.transformer.curve
    assert curve.steps[0] == 0 and curve.steps[-1] == 400 and len(curve.steps) == 21
    assert curve.edge_recovery[-1] == result.recovery_ceiling > curve.edge_recovery[0]
    assert np.isnan(curve.loss[0]) and curve.loss[-1] < curve.loss[1]


def test_the_release_grid_is_memorized_geometrically(release_grid):
    m = release_grid.metrics()
    assert m["n_nodes"] == 16 and m["n_edges"] == 24
    assert m["edge_recovery_top5"] == 1.0 and m["edge_recovery_top5_control"] == 1.0
    assert m["geometric_level"] > m["geometric_level_control"] + 0.15
    assert m["spectral_top_energy"] > m["spectral_top_energy_chance"] + 0.2
    assert m["spectral_top_energy_control"] < m["spectral_top_energy_chance"] + 0.1
    assert m["distance_spearman"] > 0.4 > 0.1 > m["distance_spearman_control"]
    assert len(release_grid.transformer.paths.correct) == 4  # the file's four held-out columns


def test_the_release_irregular_graph_runs_and_says_what_it_noticed(fixed_steps):
    config = gm.GeometricMemoryConfig(
        graph="release_irregular",
        epochs=150,
        path_epochs=5,
        incontext_epochs=0,
        ingredients=False,
        umap=False,
        device="cpu",
    )
    result = gm.run(config, progress=False)
    m = result.metrics()
    assert m["edge_recovery_top5"] == 1.0 and m["geometric_level"] > m["geometric_level_control"]
    assert any("not held out" in n for n in result.notes)
    assert any("2 connected components" in n for n in result.notes)


def test_a_rerun_from_the_cache_trains_nothing(star, monkeypatch):
    config, result, cache = star
    _no_training(monkeypatch)
    again = gm.run(config, cache_dir=cache, progress=False)
    assert again.to_dict() == result.to_dict()
    with pytest.raises(AssertionError, match="recomputed"):
        gm.run(replace(config, epochs=401), cache_dir=cache, progress=False)


def test_ingredient_rows_change_one_setting_and_reuse_the_main_run(monkeypatch, fixed_steps):
    calls = []
    real = collect.memorize_edges

    def fast(graph, spec, **kw):
        calls.append((spec.tied, spec.n_layers, kw["directions"], kw["weight_decay"], spec.frozen))
        return real(graph, spec, **{**kw, "epochs": 5})

    monkeypatch.setattr(collect, "memorize_edges", fast)
    monkeypatch.setattr(
        collect, "finetune_paths", lambda *a, **k: gm.PathAccuracy((True,), (0.5,), 1.0)
    )
    config = gm.GeometricMemoryConfig(
        degree=2, path_length=2, incontext_epochs=0, umap=False, device="cpu"
    )
    result = gm.run(config, progress=False)
    names = [r.name for r in result.ingredients]
    assert names == [n for n, _ in gm.ingredient_settings(config)]
    # main transformer, control, then four rows; "both directions" is the main run itself
    assert calls == [
        (True, 1, "both", 0.0, False),
        (True, 1, "both", 0.0, True),
        (True, 1, "forward", 0.0, False),
        (False, 1, "forward", 0.0, False),
        (True, 1, "forward", 0.1, False),
        (True, 2, "forward", 0.0, False),
    ]
    both = result.ingredients[names.index("both directions")]
    assert both.geometric_level == result.transformer.geometry.geometric_level
    assert "setting" in result.ingredient_table() and result.figure("ingredients").data
    assert set(result.metrics()["ingredients"]) == set(names)


def test_results_round_trip_and_metric_keys(star):
    _, result, _ = star
    again = gm.GeometricMemoryResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.to_dict() == result.to_dict()
    m = result.metrics()
    assert tuple(m) == gm.METRIC_KEYS
    json.dumps(m, allow_nan=False)


def test_every_figure_kind_draws(star):
    _, result, _ = star
    assert result.figure_kinds() == [k for k in gm.FIGURES if k != "ingredients"]
    for kind in result.figure_kinds():
        fig = result.figure(kind)
        assert fig.data and fig.layout.title.text
    with pytest.raises(InputError, match="not available"):
        result.figure("ingredients")
    with pytest.raises(InputError, match="unknown figure kind"):
        result.figure("nope")
    # with UMAP coordinates the projections get a second row
    geo = result.transformer.geometry
    umap = replace(geo, umap=np.zeros((geo.embeddings.shape[0], 2)))
    with_umap = replace(result, transformer=replace(result.transformer, geometry=umap))
    assert len(with_umap.figure("projections").data) > len(result.figure("projections").data)


def test_results_check_their_shapes(star):
    _, result, _ = star
    geo = result.transformer.geometry
    with pytest.raises(InputError, match="spectral energy"):
        replace(geo, spectral_energy=np.ones(3))
    with pytest.raises(InputError, match="eigenvalues"):
        replace(result, eigenvalues=np.ones(2))
    with pytest.raises(InputError, match="one chance level per query"):
        gm.PathAccuracy((True, False), (0.5,))
    assert geo.embeddings.flags.writeable is False


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"degree": 0}, "degree must be an integer of at least 1"),
        ({"path_length": 0}, "path_length must be an integer of at least 1"),
        ({"edges": "sideways"}, "edges='sideways' is not accepted"),
        ({"n_heldout": 9, "degree": 4}, "n_heldout=9 held-out targets but the graph has 4 targets"),
        ({"graph": "nope"}, "neither a family"),
        ({"umap": "yes"}, "umap must be True or False"),
    ],
)
def test_bad_parameters_fail_in_one_line_before_any_training(params, match, monkeypatch):
    _no_training(monkeypatch)
    with pytest.raises(ConfigError, match=match) as info:
        gm.GeometricMemoryConfig(**params)
    assert "\n" not in str(info.value)


def test_a_malformed_or_disconnected_file_fails_before_training(tmp_path, monkeypatch):
    _no_training(monkeypatch)
    bad = tmp_path / "bad.txt"
    bad.write_text("0=1\n1=x\n")
    with pytest.raises(InputError, match=r"bad\.txt line 2"):
        gm.GeometricMemoryConfig(graph=str(bad))
    apart = tmp_path / "apart.txt"
    apart.write_text("0=1\n2=3\n")
    with pytest.raises(InputError, match="not connected"):
        gm.GeometricMemoryConfig(graph=str(apart))


def test_any_model_embeddings_against_a_token_graph(tiny_dir):
    from workbench import load_model

    subject = load_model(tiny_dir("gpt2"), device="cpu")
    texts = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 3
    graph = gm.cooccurrence_graph(subject.tokenizer, texts, top=30, window=1, min_count=2)
    # brute force: adjacent token pairs among the kept tokens, counted over the texts
    ids = [subject.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    pairs = {}
    for row in ids:
        for a, b in itertools.pairwise(row):
            if a != b:
                key = frozenset((a, b))
                pairs[key] = pairs.get(key, 0) + 1
    got = {frozenset((graph.token_ids[u], graph.token_ids[v])) for u, v in graph.edges}
    assert got and all(pairs[e] >= 2 for e in got)
    geo = gm.embedding_geometry(subject, graph)
    table = subject.model.get_input_embeddings().weight.detach().double().numpy()
    rows = table[list(graph.token_ids)]
    np.testing.assert_allclose(geo.embeddings, rows)
    assert geo.geometric_level == pytest.approx(
        gm.geometric_level(rows, graph.adjacency), rel=1e-12
    )
    assert geo.edge_recovery is None and geo.name == subject.name


@pytest.mark.slow
def test_notebook_runs_under_papermill(tmp_path, html_figures):
    _, record = run_notebook(
        NOTEBOOK,
        {
            "degree": 3,
            "path_length": 2,
            "epochs": 150,
            "path_epochs": 40,
            "incontext_epochs": 20,
            "umap": False,  # umap-learn JIT-compiles for a minute; the panel has its own test
            "device": "cpu",
        },
        tmp_path,
    )
    assert all(f.endswith(".html") for f in record["figures"])  # html_figures
    assert record["analysis"] == "geometric_memory"
    assert tuple(record["metrics"]) == gm.METRIC_KEYS
    assert record["metrics"]["edge_recovery_top5"] == 1.0
    assert len(record["metrics"]["ingredients"]) == 5
    assert any(f.endswith("projections.html") for f in record["figures"])


def test_self_edges_run_through_every_step(fixed_steps):
    config = gm.GeometricMemoryConfig(
        degree=2,
        path_length=2,
        edges="both+self",
        epochs=10,
        path_epochs=2,
        incontext_epochs=2,
        ingredients=False,
        umap=False,
        device="cpu",
    )
    result = gm.run(config, progress=False)
    m = result.metrics()
    assert m["edge_recovery_top5_ceiling"] == 1.0  # 5 nodes: every successor fits in a top 5
    assert 0.0 <= m["edge_recovery_top5"] <= 1.0
    # a self-edge is no step: chance stays one over the start's neighbours
    assert m["incontext_chance_accuracy"] == pytest.approx(1 / 2)


def test_training_runs_to_its_criterion_and_past_the_cap_keeps_the_run():
    config = gm.GeometricMemoryConfig(degree=2, path_length=2, umap=False, device="cpu")
    graph = config.graph_task()
    spec = study._spec(config, graph)
    configs = []
    real = collect.train

    def counted(*args, **kwargs):
        configs.append(args[1])
        assert args[1].threads == 1  # the toys never depend on the machine's core count
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collect, "train", counted)
        run = collect.memorize_edges(
            graph, spec, directions="both", epochs=2, lr=0.01, weight_decay=0.0, seed=0
        )
    # one run through the trainer's stop_when: its schedule, then on up to CAP_FACTOR times it
    (used,) = configs
    assert (used.steps, used.decay_steps, used.min_steps, used.restarts) == (
        2 * collect.CAP_FACTOR,
        2,
        2,
        True,
    )
    assert run.curve.steps[-1] == 2 * collect.CAP_FACTOR  # the cap came first: kept, not raised
    assert run.excess_loss > collect.EDGE_TOLERANCE
    # 8 facts; the centre and both hop-1 nodes have 2 successors (6 facts), the leaves 1
    assert collect.loss_floor(graph, "both") == pytest.approx(6 / 8 * np.log(2))


def test_a_run_that_meets_its_criterion_at_the_schedule_end_is_the_run_of_its_steps():
    config = gm.GeometricMemoryConfig(degree=2, path_length=2, umap=False, device="cpu")
    graph = config.graph_task()
    spec = study._spec(config, graph)
    kw = dict(directions="both", lr=0.01, weight_decay=0.0, seed=0)
    capped = collect.memorize_edges(graph, spec, epochs=300, **kw)
    plain = collect.memorize_edges(graph, spec, epochs=300, criterion=None, **kw)
    assert capped.excess_loss <= collect.EDGE_TOLERANCE and capped.curve.steps[-1] == 300
    assert np.array_equal(capped.embeddings, plain.embeddings)  # bitwise: same schedule
    assert capped.curve.steps == plain.curve.steps
    assert capped.curve.edge_recovery == plain.curve.edge_recovery
    assert np.array_equal(capped.curve.loss, plain.curve.loss, equal_nan=True)


def test_a_missed_criterion_warns_records_and_makes_dependent_claims_not_evaluable(tmp_path):
    config = gm.GeometricMemoryConfig(
        degree=4, path_length=3, epochs=200, n_heldout=2, path_epochs=1, incontext_epochs=0,
        ingredients=False, umap=False, device="cpu",
    )  # fmt: skip
    with pytest.warns(CriterionWarning, match=r"path fine-tuning .* in 4 steps: .* fitted"):
        result = gm.run(config, progress=False)
    (short,) = result.shortfalls()
    assert short.training == "path fine-tuning (transformer)" and short.steps == 4
    table = {r.claim.name: r for r in result.claims()}
    for name in summary.PATH_CLAIMS:
        assert table[name].holds is None and "not evaluable" in table[name].not_evaluable
    others = [r for n, r in table.items() if n not in summary.PATH_CLAIMS]
    assert others and all(r.not_evaluable is None and r.holds is not None for r in others)
    record = json.loads(result.save(config, tmp_path).read_text())
    (saved,) = record["provenance"]["shortfalls"]
    assert saved["training"] == short.training and saved["claims"] == list(summary.PATH_CLAIMS)
    assert [c["holds"] for c in record["claims"]] == [table[c.name].holds for c in gm.CLAIMS]
    assert "warning: path fine-tuning (transformer) missed its criterion" in repr(result)
    assert html.escape(short.message()) in result._repr_mimebundle_()["text/html"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CriterionWarning)  # strictness: the user's choice
        with pytest.raises(CriterionWarning, match="path fine-tuning"):
            gm.run(config, progress=False)


def test_steps_used_and_convergence_are_metrics(star):
    _, result, _ = star
    m = result.metrics()
    assert m["edge_steps"] == m["edge_steps_control"] == 400 and m["path_steps"] == 40
    assert m["edge_excess_loss"] <= collect.EDGE_TOLERANCE < m["edge_excess_loss_control"]
    assert m["train_path_accuracy"] == 1.0 and m["n_heldout_queries"] == 8


@pytest.mark.slow
def test_a_missed_criterion_is_recorded_and_fails_the_cli_run_only_when_strict(tmp_path, capsys):
    from workbench.cli import main
    from workbench.runner.results import read_results

    small = {"degree": 4, "path_length": 3, "epochs": 200, "n_heldout": 2, "path_epochs": 1,
             "incontext_epochs": 0, "ingredients": "false", "umap": "false"}  # fmt: skip
    args = [a for k, v in small.items() for a in ("-p", k, str(v))] + ["--formats", "html"]
    assert main(["run", "geometric_memory", *args, "--out", str(tmp_path / "lax")]) == 0
    record = read_results(tmp_path / "lax" / "results.json")
    (short,) = record["provenance"]["shortfalls"]  # one path fine-tuning fell short
    assert short["training"] == "path fine-tuning (transformer)" and short["steps"] == 4
    held = {c["name"]: c for c in record["claims"]}
    assert all(held[n]["holds"] is None and held[n]["not_evaluable"] for n in short["claims"])
    strict = ["run", "geometric_memory", *args, "--strict", "--out", str(tmp_path / "strict")]
    assert main(strict) == 1
    err = capsys.readouterr().err
    assert "CriterionWarning" in err and "path fine-tuning (transformer) missed" in err
    assert not (tmp_path / "strict" / "results.json").exists()
