"""The only part of the geometric-memory study that trains models (all through ``workbench.train``).

* :func:`memorize_edges`: the transformer (or its frozen-embedding control) learns ``[EDGE] u -> v``
  for every memorized fact, full batch; an evaluation every ``epochs / 20`` steps records top-5
  edge recovery and the geometric level of the node embeddings. Training runs to a criterion, the
  facts memorized: the loss within :data:`EDGE_TOLERANCE` nats of its floor (the mean log
  out-degree: a node's successors can only share its probability). If ``epochs`` steps do not get
  there, it goes on through warm restarts of its schedule up to :data:`CAP_FACTOR` times
  ``epochs`` (the trainer's ``stop_when``); a run that reaches the cap first is kept, and the
  study reports its shortfall (:mod:`workbench.criteria`).
* :func:`finetune_paths`: the edge-memorized model continues on the fine-tuning path queries
  (mixed with the facts, so the memory is kept; node embeddings frozen), then answers the held-out
  queries. It trains until the fine-tuning queries are fitted (every first step one hop nearer
  the target), with the same cap.

Every run trains and evaluates on :data:`THREADS` CPU thread: the thread count changes how float
sums are split, so the toys' weights would otherwise change with the machine's cores.
* :func:`train_tied_node2vec`: the paper's tied Node2Vec, full batch.
* :func:`train_walk_node2vec`: classic random-walk Node2Vec (Grover & Leskovec, 2016) with
  ``p = q = 1``: uniform random walks fed to gensim's skip-gram Word2Vec.
* :func:`train_incontext`: the in-context control, a transformer of the same shape trained on
  freshly relabelled copies of the graph written into its prompt.
* :func:`umap_coordinates`: 2-D UMAP (McInnes et al., 2018) of a set of embeddings.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch

from workbench.analyses.geometric_memory import compute, sequences
from workbench.analyses.geometric_memory.graphs import GraphTask
from workbench.analyses.geometric_memory.models import (
    TiedNode2Vec,
    TransformerSpec,
    build_transformer,
    lm_loss,
    neighbour_targets,
)
from workbench.analyses.geometric_memory.results import PathAccuracy, TrainingCurve
from workbench.analyses.geometric_memory.summary import EDGE_TOLERANCE
from workbench.seeds import stream_seed
from workbench.train import TrainConfig, train

CURVE_POINTS = 20
"""Evaluations along edge memorization (plus step 0 and the end)."""
THREADS = 1
"""CPU threads of every training run (and of the study's evaluations, see ``study.run``)."""
CAP_FACTOR = 4
"""A training to a criterion goes on past its configured steps up to this many times them."""


Criterion = Literal["floor", "recovery"] | None
CRITERIA: tuple[Criterion, ...] = ("floor", "recovery", None)
"""Convergence criteria of :func:`memorize_edges`."""


def capped(steps: int, converge: bool = True) -> dict[str, int]:
    """The step fields of a training to a criterion: ``steps`` on its schedule, then more cycles.

    With ``converge``, the cosine schedule runs its ``steps`` whole (``decay_steps``), the
    criterion is first asked there (``min_steps``), and training goes on through warm restarts of
    the same schedule (``restarts``) until it holds, up to :data:`CAP_FACTOR` times ``steps`` (the
    trainer's ``stop_when``). A run that meets its criterion at the end of its schedule is bitwise
    the run of ``steps``.
    """
    if not converge:
        return {"steps": steps}
    return {
        "steps": CAP_FACTOR * steps,
        "decay_steps": steps,
        "min_steps": steps,
        "restarts": True,
    }


def loss_floor(graph: GraphTask, directions: str) -> float:
    """The least mean edge-memorization loss: ``mean over facts u -> v of log outdeg(u)``."""
    facts = graph.directed_edges(directions)
    out = np.bincount([u for u, _ in facts], minlength=graph.n_nodes)
    return float(np.mean([math.log(out[u]) for u, _ in facts]))


@dataclass(frozen=True)
class EdgeRun:
    """A finished edge memorization: the model, its node embeddings, curve and recovery.

    Attributes:
        model: The trained model (eval mode).
        embeddings: ``(n_nodes, d)`` input-embedding rows of the node tokens, canonical order.
        curve: Recovery and geometric level along training (its last step: the steps trained).
        recovery: Final top-5 recovery of the memorized facts.
        excess_loss: Final training loss minus its floor (:func:`loss_floor`), nats.
    """

    model: torch.nn.Module
    embeddings: np.ndarray
    curve: TrainingCurve
    recovery: float
    excess_loss: float = float("nan")


def node_embeddings(model: torch.nn.Module, graph: GraphTask) -> np.ndarray:
    """The input-embedding rows of the node tokens in canonical order, float64."""
    table = model.get_input_embeddings().weight.detach()
    return table[torch.tensor(graph.tokens)].double().cpu().numpy()


@torch.no_grad()
def edge_top5(model: torch.nn.Module, graph: GraphTask) -> np.ndarray:
    """The model's top-5 next tokens after ``[EDGE] u``, as canonical nodes (``-1``: special)."""
    device = next(model.parameters()).device
    logits = model(input_ids=sequences.edge_prompts(graph).to(device)).logits[:, -1]
    top = logits.topk(min(5, logits.shape[-1]), dim=-1).indices.cpu().numpy()
    node_of = np.full(logits.shape[-1], -1)
    node_of[np.asarray(graph.tokens)] = np.arange(graph.n_nodes)
    return node_of[top]


def _train_config(lr: float, weight_decay: float, seed: int, device: str, **kw: Any) -> TrainConfig:
    return TrainConfig(
        lr=lr,
        weight_decay=weight_decay,
        grad_clip=None,
        min_lr_ratio=0.1,
        warmup=0,
        seed=seed,
        device=device,
        threads=THREADS,
        **kw,
    )


def memorize_edges(
    graph: GraphTask,
    spec: TransformerSpec,
    *,
    directions: str,
    epochs: int,
    lr: float,
    weight_decay: float,
    seed: int,
    device: str = "cpu",
    progress: bool = False,
    desc: str = "edges",
    criterion: Criterion = "floor",
) -> EdgeRun:
    """Trains the transformer (or, with ``spec.frozen``, its control) on the edge facts.

    Trains ``epochs`` full-batch steps, then on through warm restarts of that schedule until the
    criterion holds, up to :data:`CAP_FACTOR` times ``epochs`` (:func:`capped`): ``floor``, the
    last loss within :data:`EDGE_TOLERANCE` of :func:`loss_floor` (a model that can move its
    embeddings);
    ``recovery``, every fact among the top 5 as far as the top 5 can hold them (the control:
    frozen random tied embeddings cannot reach the floor); ``None``, ``epochs`` steps whatever
    the result (the ingredient rows, whose weight decay keeps the loss off its floor). A run that
    reaches the cap first is returned as it is: its ``excess_loss`` and ``recovery`` say by how
    much it missed (the study reports it as a shortfall).
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    data = sequences.edge_data(graph, directions)
    facts = graph.directed_edges(directions)
    adjacency = graph.adjacency
    floor = loss_floor(graph, directions)
    ceiling = compute.recovery_ceiling(facts, 5)
    last_loss: list[float] = []

    def loss_fn(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        value = lm_loss(model, batch)
        last_loss[:] = [float(value.detach())]
        return value

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        return {
            "recovery": compute.edge_recovery(edge_top5(model, graph), facts),
            "level": compute.geometric_level(node_embeddings(model, graph), adjacency),
        }

    def memorized(values: Mapping[str, float]) -> bool:
        if criterion == "floor":  # the last update's loss, as the run's final loss is read
            return bool(last_loss) and last_loss[0] - floor <= EDGE_TOLERANCE
        return values["recovery"] >= ceiling

    config = _train_config(
        lr,
        weight_decay,
        seed,
        device,
        eval_every=max(1, epochs // CURVE_POINTS),
        **capped(epochs, criterion is not None),
    )
    result = train(
        lambda: build_transformer(spec),
        config,
        data=data,
        loss_fn=loss_fn,
        evaluate=evaluate,
        stop_when=None if criterion is None else memorized,
        progress=progress,
        desc=desc,
    )
    model = result.model.eval()
    losses = [float("nan"), *result.losses]
    curve = TrainingCurve(
        tuple(e.step for e in result.evals),
        tuple(e.values["recovery"] for e in result.evals),
        tuple(e.values["level"] for e in result.evals),
        tuple(losses[e.step] for e in result.evals),
    )
    return EdgeRun(
        model,
        node_embeddings(model, graph),
        curve,
        curve.edge_recovery[-1],
        result.losses[-1] - floor,
    )


@torch.no_grad()
def first_steps(
    model: torch.nn.Module, graph: GraphTask, paths: Sequence[Sequence[int]]
) -> PathAccuracy:
    """Whether the model's first step after ``[PATH] target start`` is a shortest-path step.

    On a tree (the path-star) the query's own step is the only one; on a grid several neighbours
    of the start can be one hop nearer the target, the query's path names one of them, and each
    is right (:func:`compute.first_step_scores`, whose chance level counts them too).
    """
    device = next(model.parameters()).device
    prompts, _ = sequences.query_prompts(graph, paths)
    pred = model(input_ids=prompts.to(device)).logits[:, -1].argmax(-1).cpu().tolist()
    node_of = {tok: node for node, tok in enumerate(graph.tokens)}
    correct, chance = compute.first_step_scores(
        graph.adjacency, [(p[0], p[-1]) for p in paths], [node_of.get(t, -1) for t in pred]
    )
    return PathAccuracy(tuple(correct), tuple(chance))


def finetune_paths(
    run: EdgeRun,
    graph: GraphTask,
    spec: TransformerSpec,
    *,
    directions: str,
    epochs: int,
    lr: float,
    seed: int,
    device: str = "cpu",
    progress: bool = False,
    converge: bool = True,
    desc: str = "paths",
) -> PathAccuracy:
    """Fine-tunes a copy of the edge-memorized model on the training paths (with the facts).

    The node embeddings stay frozen (for the transformer as for its control): fine-tuning learns
    the circuit that reads a target and steps towards it, not new positions for the tokens of the
    fine-tuning paths.

    Trains ``epochs`` full-batch steps, then on through warm restarts of that schedule (checked
    every ``epochs`` steps) until every fine-tuning path's first step is one hop nearer its target
    (:func:`first_steps`: the path's own step on a tree; any shortest-path step on a grid, whose
    paths break ties one way), up to :data:`CAP_FACTOR` times ``epochs`` (:func:`capped`); with
    ``converge=False``, ``epochs`` steps whatever the result.

    Returns:
        First-step accuracy on the held-out paths, with the training paths' accuracy (below 1:
        the cap came first) and the steps trained recorded.
    """
    state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
    p_ids, p_labels = sequences.path_data(graph, graph.train_paths)
    e_ids, e_labels = sequences.edge_data(graph, directions)
    pad = sequences.specials(graph.n_nodes)[2]
    e_ids, e_labels = sequences.pad_to(e_ids, e_labels, p_ids.shape[1], pad)
    data = (torch.cat([p_ids, e_ids]), torch.cat([p_labels, e_labels]))

    def build() -> torch.nn.Module:
        model = build_transformer(replace(spec, frozen=False))
        model.load_state_dict(state)
        # the memorized node embeddings stay fixed: a held-out query cannot be fitted by moving
        # its own tokens, only answered by navigating the geometry edge memorization left
        model.transformer.wte.weight.requires_grad_(False)
        return model

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        return {"fitted": first_steps(model, graph, graph.train_paths).accuracy}

    result = train(
        build,
        _train_config(lr, 0.0, seed, device, eval_every=epochs, **capped(epochs, converge)),
        data=data,
        loss_fn=lm_loss,
        evaluate=evaluate if converge else None,
        stop_when=(lambda values: values["fitted"] == 1.0) if converge else None,
        progress=progress,
        desc=desc,
    )
    model = result.model.eval()
    train_acc, steps = first_steps(model, graph, graph.train_paths), result.steps
    held = first_steps(model, graph, graph.test_paths)
    return replace(held, train_accuracy=train_acc.accuracy, steps=steps)


def train_tied_node2vec(
    graph: GraphTask,
    dim: int,
    *,
    steps: int = 500,
    lr: float = 0.05,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = False,
) -> np.ndarray:
    """The paper's tied Node2Vec embeddings, ``(n_nodes, dim)`` in canonical order."""
    targets = neighbour_targets(torch.as_tensor(graph.adjacency))
    config = TrainConfig(
        steps=steps,
        lr=lr,
        weight_decay=0.0,
        grad_clip=None,
        seed=seed,
        device=device,
        threads=THREADS,
    )
    result = train(
        lambda: TiedNode2Vec(graph.n_nodes, dim),
        config,
        data=targets,
        loss_fn=lambda model, batch: model(batch),
        progress=progress,
        desc="node2vec",
    )
    return result.model.weight.detach().double().cpu().numpy()


def random_walks(
    graph: GraphTask, *, walks_per_node: int, length: int, seed: int
) -> list[list[str]]:
    """Uniform random walks (Node2Vec with ``p = q = 1``) from every node, as string tokens."""
    rng = np.random.default_rng(seed)
    nbrs: list[list[int]] = [[] for _ in range(graph.n_nodes)]
    for u, v in graph.edges:
        nbrs[u].append(v)
        nbrs[v].append(u)
    walks = []
    for _ in range(walks_per_node):
        for start in rng.permutation(graph.n_nodes):
            walk = [int(start)]
            for _ in range(length - 1):
                walk.append(nbrs[walk[-1]][rng.integers(len(nbrs[walk[-1]]))])
            walks.append([str(x) for x in walk])
    return walks


def _stable_hash(text: str) -> int:
    """Gensim's vector seeding hash, made independent of ``PYTHONHASHSEED``."""
    return zlib.crc32(text.encode())


def train_walk_node2vec(
    graph: GraphTask,
    dim: int,
    *,
    walks_per_node: int = 10,
    length: int = 40,
    window: int = 5,
    epochs: int = 5,
    seed: int = 0,
) -> np.ndarray:
    """Classic Node2Vec (p = q = 1) through gensim: ``(n_nodes, dim)`` in canonical order.

    One worker thread and a stable hash make it deterministic for a seed.
    """
    from gensim.models import Word2Vec

    walks = random_walks(graph, walks_per_node=walks_per_node, length=length, seed=seed)
    quiet = logging.getLogger("gensim")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:  # sample=0: frequent-word downsampling would drop most walks of a tiny vocabulary
        model = Word2Vec(
            walks,
            vector_size=dim,
            window=window,
            min_count=0,
            sg=1,
            negative=5,
            workers=1,
            epochs=epochs,
            seed=seed,
            hashfxn=_stable_hash,
            sample=0,
        )
    finally:
        quiet.setLevel(level)
    return np.stack([model.wv[str(u)] for u in range(graph.n_nodes)]).astype(np.float64)


def train_incontext(
    graph: GraphTask,
    spec: TransformerSpec,
    *,
    directions: str,
    steps: int,
    batch: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    n_test: int = 256,
    device: str = "cpu",
    progress: bool = False,
) -> PathAccuracy:
    """The in-context control: the graph in the prompt, relabelled afresh for every example.

    Trains on random relabellings of every path query and tests on ``n_test`` fresh ones (drawn
    from another generator) of the held-out queries; returns their first-step accuracy.
    """
    paths = [*graph.train_paths, *graph.test_paths]

    def sample(step: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return sequences.incontext_batch(graph, paths, directions, batch, generator)

    config = TrainConfig(
        steps=steps,
        lr=lr,
        weight_decay=0.0,
        grad_clip=1.0,
        seed=seed,
        device=device,
        threads=THREADS,
    )
    result = train(
        lambda: build_transformer(spec),
        config,
        sample=sample,
        loss_fn=lm_loss,
        progress=progress,
        desc="in-context",
    )
    model = result.model.eval()
    generator = torch.Generator().manual_seed(stream_seed(seed, "in-context test"))
    ids, labels = sequences.incontext_batch(graph, graph.test_paths, directions, n_test, generator)
    first = (labels != sequences.IGNORE).int().argmax(1)  # column of the first step
    with torch.no_grad():
        logits = model(input_ids=ids.to(next(model.parameters()).device)).logits.cpu()
    rows = torch.arange(len(ids))
    pred = logits[rows, first - 1].argmax(-1)
    # score on each row's own relabelled graph, read off its facts: any neighbour of the start
    # one hop nearer the target is right, as for the memorizing models (see first_steps)
    n_facts = len(graph.directed_edges(directions))
    facts = ids[:, : 3 * n_facts].reshape(len(ids), -1, 3)
    correct, chance = [], []
    for r in range(len(ids)):
        adjacency = np.zeros((graph.n_nodes, graph.n_nodes))
        adjacency[facts[r, :, 1], facts[r, :, 2]] = 1
        query = (int(ids[r, first[r] - 1]), int(ids[r, first[r] - 2]))  # (start, target)
        ok, level = compute.first_step_scores(adjacency, [query], [int(pred[r])])
        correct += ok
        chance += level
    return PathAccuracy(tuple(bool(c) for c in correct), tuple(chance))


def umap_coordinates(embeddings: np.ndarray, *, seed: int) -> np.ndarray:
    """2-D UMAP of the rows (cosine metric, ``n_neighbors = min(8, n - 1)``), seeded."""
    import warnings

    import umap

    n = len(embeddings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=min(8, n - 1),
            metric="cosine",
            random_state=seed,
            init="random",
            n_jobs=1,
        )
        return np.asarray(
            reducer.fit_transform(np.asarray(embeddings, dtype=np.float32)), dtype=np.float64
        )
