"""Geometric-memory pure parts: metrics against brute force, networkx, scipy; graphs; sequences."""

from __future__ import annotations

import itertools
import json

import networkx as nx
import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from workbench.analyses import geometric_memory as gm
from workbench.analyses.geometric_memory import compute, graphs, sequences
from workbench.analyses.geometric_memory.models import TiedNode2Vec, neighbour_targets
from workbench.errors import ConfigError, InputError


def _graph(seed: int = 0) -> nx.Graph:
    g = nx.connected_watts_strogatz_graph(14, 4, 0.3, seed=seed)
    return nx.convert_node_labels_to_integers(g)


def _adj(g: nx.Graph) -> np.ndarray:
    return nx.to_numpy_array(g, nodelist=range(g.number_of_nodes()))


def test_laplacian_spectrum_matches_networkx():
    g = _graph()
    values, vectors = gm.laplacian_spectrum(_adj(g))
    reference = np.linalg.eigvalsh(nx.normalized_laplacian_matrix(g, nodelist=range(14)).toarray())
    np.testing.assert_allclose(values, reference, atol=1e-10)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(14), atol=1e-10)
    deg = _adj(g).sum(1)
    trivial = np.sqrt(deg) / np.linalg.norm(np.sqrt(deg))
    assert abs(abs(vectors[:, 0] @ trivial) - 1) < 1e-10  # D^1/2 1 is the trivial eigenvector


def test_spectral_energy_is_the_brute_force_projection():
    g = _graph(1)
    a = _adj(g)
    _, u = gm.laplacian_spectrum(a)
    e = np.random.default_rng(0).normal(size=(14, 6)) + 3.0  # an offset that centring removes
    energy = gm.spectral_energy(e, u)
    c = e - e.mean(0)
    brute = np.array([sum((u[:, i] @ c[:, j]) ** 2 for j in range(6)) for i in range(1, 14)])
    np.testing.assert_allclose(energy, brute / brute.sum(), rtol=1e-12)
    assert energy.sum() == pytest.approx(1.0)
    assert gm.top_energy(energy, 3) == pytest.approx(energy[:3].sum())
    with pytest.raises(InputError, match="outside"):
        gm.top_energy(energy, 0)


def test_eigenmap_puts_all_its_energy_on_the_top_eigenvectors():
    g = nx.cycle_graph(12)  # regular: D^-1/2 scaling keeps the eigenvector span
    a = _adj(g)
    k = gm.top_k(12)
    eig = gm.laplacian_eigenmap(a, k)
    assert eig.shape == (12, k)
    _, u = gm.laplacian_spectrum(a)
    assert gm.top_energy(gm.spectral_energy(eig, u), k) == pytest.approx(1.0, abs=1e-9)
    # random embeddings spread their energy: top share near k / (n - 1)
    rng = np.random.default_rng(0)
    shares = [gm.top_energy(gm.spectral_energy(rng.normal(size=(12, 64)), u), k) for _ in range(20)]
    assert abs(np.mean(shares) - k / 11) < 0.05


def test_geometric_level_and_spearman_match_brute_force():
    g = _graph(2)
    a = _adj(g)
    e = np.random.default_rng(3).normal(size=(14, 5))
    cos = lambda i, j: e[i] @ e[j] / np.linalg.norm(e[i]) / np.linalg.norm(e[j])  # noqa: E731
    pairs = [(i, j) for i in range(14) for j in range(i + 1, 14)]
    on = [cos(i, j) for i, j in pairs if g.has_edge(i, j)]
    off = [cos(i, j) for i, j in pairs if not g.has_edge(i, j)]
    assert gm.geometric_level(e, a) == pytest.approx(np.mean(on) - np.mean(off), rel=1e-12)
    hops = dict(nx.all_pairs_shortest_path_length(g))
    d = gm.shortest_paths(a)
    assert all(d[i, j] == hops[i][j] for i in range(14) for j in range(14))
    ref = spearmanr([1 - cos(i, j) for i, j in pairs], [hops[i][j] for i, j in pairs]).statistic
    assert gm.distance_spearman(e, d) == pytest.approx(ref, rel=1e-12)
    np.testing.assert_allclose(gm.cosine_matrix(e)[2, 5], cos(2, 5), rtol=1e-12)


def test_geometric_level_needs_both_kinds_of_pair():
    with pytest.raises(InputError, match="both edges and non-edges"):
        gm.geometric_level(np.eye(3) + 1, np.ones((3, 3)) - np.eye(3))
    with pytest.raises(InputError, match="shape"):
        gm.spectral_energy(np.ones((3, 2)), np.eye(4))


def test_edge_recovery_counts_directed_edges_in_the_top_rows():
    top = np.array([[1, 2], [0, 3], [3, 0], [2, 1]])
    edges = [(0, 1), (1, 2), (2, 3), (3, 1)]
    assert gm.edge_recovery(top, edges) == pytest.approx(3 / 4)


def test_recovery_ceiling_is_what_a_perfect_top5_memory_reaches():
    graph = gm.build_graph("path_star", degree=8, path_length=2)
    facts = graph.directed_edges("both")
    # a perfect memory: each node's top five are (up to five of) its true successors
    successors = {u: [v for a, v in facts if a == u] for u in range(graph.n_nodes)}
    top = np.array([(successors[u] + [-1] * 5)[:5] for u in range(graph.n_nodes)])
    assert compute.edge_recovery(top, facts) == pytest.approx(compute.recovery_ceiling(facts))
    assert compute.recovery_ceiling(facts) == pytest.approx((32 - 3) / 32)  # centre: 5 of 8
    # forward edges run outward from the centre: it keeps its 8 successors
    assert compute.recovery_ceiling(graph.directed_edges("forward")) == pytest.approx(13 / 16)
    cycle = gm.build_graph("cycle", n_nodes=9)
    assert compute.recovery_ceiling(cycle.directed_edges("both")) == 1.0


def test_first_steps_count_every_shortest_path_as_networkx_lists_them():
    g = _graph(seed=3)
    a = _adj(g)
    np.fill_diagonal(a, 1)  # a self-edge is no step
    rng = np.random.default_rng(0)
    queries = [(int(s), int(t)) for s, t in rng.integers(0, 14, (60, 2)) if s != t]
    steps = [int(rng.choice([*g.neighbors(s), s, 14])) for s, _ in queries]
    correct, chance = gm.first_step_scores(a, queries, steps)
    for (s, t), step, ok, level in zip(queries, steps, correct, chance, strict=True):
        right = {p[1] for p in nx.all_shortest_paths(g, s, t)}
        assert ok == (step in right)
        assert level == pytest.approx(len(right) / g.degree(s))
    assert 0 < sum(correct) < len(correct) and max(chance) > min(chance)
    # a tree has one right step, chance 1 / degree; facts listed one way are the same graph
    star = nx.star_graph(4)
    one_way = np.triu(_adj(star))
    assert gm.first_step_scores(one_way, [(1, 2), (0, 3)], [0, 3]) == ([True, True], [1.0, 0.25])
    with pytest.raises(InputError, match="no first step"):
        gm.first_step_scores(one_way, [(2, 2)], [0])
    with pytest.raises(InputError, match="2 queries but 1"):
        gm.first_step_scores(one_way, [(1, 2), (0, 3)], [0])


def test_pca2_matches_sklearn_up_to_sign():
    from sklearn.decomposition import PCA

    e = np.random.default_rng(0).normal(size=(30, 7))
    got = compute.pca2(e)
    ref = PCA(2).fit_transform(e)
    np.testing.assert_allclose(np.abs(got), np.abs(ref), atol=1e-10)


def test_tied_node2vec_loss_is_the_hand_written_neighbour_softmax():
    g = _graph(4)
    a = torch.as_tensor(_adj(g))
    torch.manual_seed(0)
    model = TiedNode2Vec(14, 5)
    loss = model(neighbour_targets(a))
    w = model.weight.detach().double()
    total = 0.0
    for u in range(14):
        logits = w[u] @ w.T
        logp = logits - torch.logsumexp(logits, 0)
        total -= np.mean([float(logp[v]) for v in g.neighbors(u)])
    assert float(loss.detach()) == pytest.approx(total / 14, rel=1e-5)


# graphs -----------------------------------------------------------------------------------------


def test_path_star_structure_labels_and_folds():
    task = gm.build_graph("path_star", degree=4, path_length=3, seed=1)
    g = nx.Graph(task.edges)
    assert task.n_nodes == 13 and len(task.edges) == 12 and nx.is_tree(g)
    assert (
        task.root == 0
        and g.degree(0) == 4
        and sorted(task.groups) == [-1, *sorted([0, 1, 2, 3] * 3)]
    )
    assert all(p[0] == 0 and len(p) == 4 and g.degree(p[-1]) == 1 for p in task.paths)
    assert all(g.has_edge(a, b) for p in task.paths for a, b in itertools.pairwise(p))
    assert sorted(task.tokens) == list(range(13))
    assert task.tokens != gm.build_graph("path_star", degree=4, path_length=3, seed=2).tokens
    folds = task.folds()
    assert len(folds) == 4 and all(len(test) == 1 and len(train) == 3 for train, test in folds)
    assert sorted(p for _, test in folds for p in test) == sorted(task.paths)
    assert gm.GraphTask.from_dict(json.loads(json.dumps(task.to_dict()))) == task


@pytest.mark.parametrize(
    ("family", "reference"),
    [
        ("grid", lambda: nx.grid_2d_graph(4, 5)),
        ("cycle", lambda: nx.cycle_graph(20)),
        ("tree", lambda: nx.balanced_tree(2, 3)),
    ],
)
def test_families_are_the_networkx_graphs(family, reference):
    task = gm.build_graph(family, degree=2, path_length=3, n_nodes=20, seed=0)
    assert nx.is_isomorphic(nx.Graph(task.edges), reference())
    assert all(len(p) >= 2 for p in task.paths)
    g = nx.Graph(task.edges)
    for p in task.paths:  # shortest paths along edges
        assert len(p) - 1 == nx.shortest_path_length(g, p[0], p[-1])


def test_irregular_graph_is_connected_with_a_quarter_more_edges_than_nodes():
    task = gm.build_graph("irregular", n_nodes=16, seed=3)
    g = nx.Graph(task.edges)
    assert nx.is_connected(g) and g.number_of_nodes() == 16 and len(task.edges) == 20
    assert sorted(task.targets) == list(range(16))


def test_grid_queries_come_from_several_starts_and_folds_hold_out_whole_targets():
    task = gm.build_graph("grid", n_nodes=25, path_length=3, seed=4)
    g = nx.grid_2d_graph(5, 5)
    g = nx.relabel_nodes(g, {(r, c): 5 * r + c for r, c in g.nodes})
    for target in task.targets:
        queries = [p for p in task.paths if p[-1] == target]
        starts = [p[0] for p in queries]
        at3 = [v for v, d in nx.single_source_shortest_path_length(g, target).items() if d == 3]
        assert len(set(starts)) == len(starts) == min(graphs.STARTS_PER_TARGET, len(at3))
        assert set(starts) <= set(at3)
        for p in queries:  # a shortest path, edge by edge
            assert len(p) == 4 and all(g.has_edge(u, v) for u, v in itertools.pairwise(p))
    folds = task.folds()
    assert len(task.paths) > 2 * len(task.targets) and len(folds) == -(-25 // task.n_heldout)
    held_out = [p for _, held in folds for p in held]
    assert sorted(held_out) == sorted(task.paths)  # every query held out once
    for train, held in folds:
        assert not {p[-1] for p in train} & {p[-1] for p in held}
        assert len({p[-1] for p in held}) == task.n_heldout or held is folds[-1][1]


def test_release_grid_is_a_4x4_grid_with_its_own_split():
    task = gm.build_graph("release_grid", seed=0)
    assert task.n_nodes == 16 and len(task.edges) == 24
    assert nx.is_isomorphic(nx.Graph(task.edges), nx.grid_2d_graph(4, 4))
    assert task.fixed_split and len(task.folds()) == 1
    train, test = task.folds()[0]
    assert len(train) == 4 and len(test) == 4 and not set(train) & set(test)
    assert task.notes == ()


def test_release_irregular_notes_its_overlapping_split_and_a_non_edge():
    task = gm.build_graph("release_irregular", seed=0)
    assert task.n_nodes == 16 and len(task.edges) == 20
    assert nx.number_connected_components(nx.Graph(task.edges)) == 2  # a K4 apart: 12..15
    assert any("2 connected components" in n for n in task.notes)
    assert any("not held out" in n for n in task.notes)
    assert any("non-edges [(10, 1)]" in n for n in task.notes)


def test_edge_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "g.txt"
    bad.write_text("0=1\n1=2\n# a comment\n2-3\n")
    with pytest.raises(InputError, match=r"g.txt line 4: '2-3' is not an edge") as info:
        gm.build_graph(str(bad))
    assert "\n" not in str(info.value)
    split = tmp_path / "h.txt"
    split.write_text("0=1\n2 3\n")
    with pytest.raises(InputError, match="not connected"):
        gm.build_graph(str(split))
    good = tmp_path / "k_pretrain.txt"
    good.write_text("5=6\n6=7\n7=5\n7=8\n")
    (tmp_path / "k_train_1.txt").write_text("8=5,7,8\n")
    (tmp_path / "k_test_1.txt").write_text("5=8,7\n")  # ends at 7, not at its target 5
    with pytest.raises(InputError, match=r"k_test_1\.txt line 1"):
        gm.build_graph(str(good))
    (tmp_path / "k_test_1.txt").write_text("5=8,7,5\n")
    task = gm.build_graph(str(good))
    assert task.n_nodes == 4 and task.paths == ((0, 2, 3), (3, 2, 0))  # labels 5..8 -> 0..3
    with pytest.raises(ConfigError, match="neither a family"):
        gm.build_graph(str(tmp_path / "missing.txt"))


def test_bad_sizes_and_held_out_counts_are_one_line_config_errors():
    with pytest.raises(ConfigError, match="n_heldout=4 held-out targets but the graph has 4 "):
        gm.build_graph("path_star", degree=4, path_length=2, n_heldout=4)
    with pytest.raises(ConfigError, match="no grid shape"):
        gm.build_graph("grid", n_nodes=17)


# sequences --------------------------------------------------------------------------------------


def test_edge_and_path_sequences_carry_the_labels():
    task = gm.build_graph("path_star", degree=3, path_length=2, seed=0)
    edge, path, _ = sequences.specials(task.n_nodes)
    ids, labels = sequences.edge_data(task, "both")
    assert ids.shape == (12, 3) and (ids[:, 0] == edge).all()
    facts = {(task.tokens[u], task.tokens[v]) for u, v in task.directed_edges("both")}
    assert {tuple(r) for r in ids[:, 1:].tolist()} == facts
    assert (labels[:, :2] == sequences.IGNORE).all() and (labels[:, 2] == ids[:, 2]).all()
    assert len(task.directed_edges("forward")) == 6
    ids, labels = sequences.path_data(task, task.paths)
    p = task.paths[0]
    assert ids[0].tolist() == [path, task.tokens[p[-1]], *(task.tokens[x] for x in p)]
    assert labels[0].tolist() == [sequences.IGNORE] * 3 + [task.tokens[x] for x in p[1:]]


def test_incontext_examples_are_relabelled_copies_of_the_graph():
    task = gm.build_graph("path_star", degree=3, path_length=2, seed=0)
    gen = torch.Generator().manual_seed(0)
    ids, labels = sequences.incontext_batch(task, task.paths, "both", 8, gen)
    n_facts = len(task.directed_edges("both"))
    assert ids.shape == (8, 3 * n_facts + 3 + 2)
    firsts = set()
    for row, lab in zip(ids.tolist(), labels.tolist(), strict=True):
        facts = {(row[3 * i + 1], row[3 * i + 2]) for i in range(n_facts)}
        query = row[3 * n_facts :]
        assert query[0] == sequences.specials(task.n_nodes)[1]
        walk = query[2:]
        assert walk[-1] == query[1]  # the path ends at its target
        assert all((a, b) in facts for a, b in itertools.pairwise(walk))
        assert [x for x in lab if x != sequences.IGNORE] == walk[1:]
        firsts.add(walk[0])
    assert len(firsts) > 1  # the centre gets a fresh label per example


def test_self_edges_are_an_option_of_the_memorized_facts():
    graph = gm.build_graph("cycle", n_nodes=5)
    both = graph.directed_edges("both")
    with_self = graph.directed_edges("both+self")
    assert with_self == [*both, *((u, u) for u in range(5))]
    assert len(graph.directed_edges("forward+self")) == 5 + 5
    ids, labels = sequences.edge_data(graph, "both+self")
    assert ids.shape == (15, 3) and (ids[10:, 1] == ids[10:, 2]).all()
    assert (labels[:, 2] == ids[:, 2]).all()
    with pytest.raises(ConfigError, match="directions='sideways' is not accepted"):
        graph.directed_edges("sideways")
