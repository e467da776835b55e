"""Random-walk Node2Vec (p = q = 1), trained by mini-batch skip-gram in torch.

After Grover & Leskovec 2016, "node2vec: Scalable Feature Learning for Networks" (KDD), with the
skip-gram of Mikolov et al. 2013 ("Distributed Representations of Words and Phrases"):

1. **Walks.** From every node, ``walks_per_node`` uniform random walks of ``length`` nodes (the
   ``p = q = 1`` case, where Node2Vec is DeepWalk); all walks advance together, one numpy step per
   position.
2. **Pairs.** Every node of a walk and each node up to ``window`` positions before or after it form
   a (centre, context) pair, with word2vec's dynamic window: each centre draws a reduced window
   ``window - b``, ``b`` uniform in ``0..window-1``, so near contexts weigh more.
3. **Skip-gram with negative sampling.** Two tables, ``W_in`` (returned) and ``W_out``. A pair
   ``(c, x)`` raises ``log σ(W_in[x] · W_out[c])``; a negative node ``j``, drawn from the unigram
   distribution to the power 3/4, lowers ``log σ(W_in[x] · W_out[j])``. Plain SGD, the learning
   rate falling linearly from ``lr`` to ``min_lr`` over the ``epochs`` passes, ``W_in`` initialised
   uniform in ``±0.5 / dim`` and ``W_out`` at zero (gensim's conventions). The updates of one
   mini-batch (the pairs of a few walks) are summed, as gensim's threads do without locks.

**Negatives: far fewer than one per pair.** On the 50 x 50 grid of ``bench/node2vec.py`` (2,500
nodes, 10 walks of 40 per node, window 10, one epoch, dim 64), the Spearman correlation of cosine
distance with hop distance over all node pairs, the measure of a global geometry, was 0.11-0.15
with gensim's 5 negatives per pair, 0.18-0.19 with one, 0.17-0.25 with one per four pairs and
0.23-0.29 with one per ten (seeds 0-2; pecanpy, which trains gensim on the same walk budget:
0.18). Negative sampling pushes random pairs towards orthogonal vectors, and most pairs of a large
graph are far apart, so strong negatives erase the order among distant nodes that the walks'
positive pairs build; with one negative per ten pairs the mean cosine over all pairs is still 0
(no collapse) and edges are the most similar pairs (edge minus non-edge cosine 0.97, against 0.65
with one negative per pair). A larger learning rate (0.05, 0.1), a full (not reduced) window, tying
``W_out`` to ``W_in`` and a smaller initialisation all lowered the correlation. ``negative`` is
therefore the expected number of negatives per positive pair and may be a fraction (default 0.1).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from workbench.devices import torch_threads
from workbench.errors import ConfigError, InputError

__all__ = ["node2vec", "random_walks", "walk_pairs"]

_WALKS_PER_STEP = 32  # walks whose pairs form one SGD mini-batch
_TABLE = 1 << 20  # entries of the negative-sampling table


def _adjacency_lists(adjacency: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(adjacency)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise InputError(f"adjacency has shape {a.shape}; a square (n, n) matrix is accepted")
    linked = (a != 0) | (a.T != 0)  # undirected: edges count both ways
    np.fill_diagonal(linked, False)
    if not linked.any(axis=1).all():
        lonely = int(np.flatnonzero(~linked.any(axis=1))[0])
        raise InputError(f"node {lonely} has no edge; every node needs a neighbour for a walk")
    rows, cols = np.nonzero(linked)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(a)))])
    return indptr, cols


def random_walks(adjacency: Any, *, walks_per_node: int, length: int, seed: int) -> np.ndarray:
    """Uniform random walks from every node, ``(walks_per_node * n, length)`` node indices.

    Each round starts one walk from every node, in a fresh random order.
    """
    if walks_per_node < 1 or length < 2:
        raise ConfigError(f"walks_per_node={walks_per_node}, length={length}: need >= 1 and >= 2")
    indptr, nbrs = _adjacency_lists(adjacency)
    n = len(indptr) - 1
    degree = np.diff(indptr)
    rng = np.random.default_rng(seed)
    starts = np.concatenate([rng.permutation(n) for _ in range(walks_per_node)])
    walks = np.empty((starts.size, length), dtype=np.int64)
    walks[:, 0] = starts
    for t in range(1, length):
        here = walks[:, t - 1]
        walks[:, t] = nbrs[indptr[here] + (rng.random(here.size) * degree[here]).astype(np.int64)]
    return walks


def walk_pairs(
    walks: np.ndarray, window: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(centre, context) pairs of ``walks`` under word2vec's dynamic window, walk by walk."""
    n_walks, length = walks.shape
    reach = window - rng.integers(0, window, size=(n_walks, length))  # per centre
    walk = np.arange(n_walks)[:, None]
    centres, contexts, order = [], [], []
    for off in range(1, min(window, length - 1) + 1):
        for c_sl, x_sl in ((slice(None, -off), slice(off, None)), (slice(off, None), slice(-off))):
            keep = reach[:, c_sl] >= off
            centres.append(walks[:, c_sl][keep])
            contexts.append(walks[:, x_sl][keep])
            order.append(np.broadcast_to(walk, keep.shape)[keep])
    by_walk = np.argsort(np.concatenate(order), kind="stable")
    return np.concatenate(centres)[by_walk], np.concatenate(contexts)[by_walk]


@contextmanager
def _one_thread() -> Iterator[None]:
    """Many small sparse updates: one thread is faster and leaves the caller's setting alone."""
    with torch_threads(1):
        yield


def node2vec(
    adjacency: Any,
    dim: int = 64,
    *,
    walks_per_node: int = 10,
    length: int = 40,
    window: int = 10,
    epochs: int = 1,
    negative: float = 0.1,
    lr: float = 0.025,
    min_lr: float = 1e-4,
    seed: int = 0,
) -> np.ndarray:
    """Node2Vec embeddings (p = q = 1) of a graph, ``(n_nodes, dim)`` float64.

    Args:
        adjacency: ``(n, n)`` adjacency; nonzero entries are edges, taken both ways.
        dim: Embedding dimension.
        walks_per_node: Walks started from every node.
        length: Nodes per walk.
        window: Largest distance along a walk between a centre and its context.
        epochs: Passes over the walks' pairs.
        negative: Expected negative samples per positive pair (a fraction is allowed; see the
            module docstring for why the default is 0.1).
        lr: Starting learning rate, decayed linearly to ``min_lr``.
        min_lr: Final learning rate.
        seed: Seeds the walks, the windows, the initialisation and the negatives (the caller's
            random state is left alone).

    Returns:
        The input table ``W_in``, one row per node.

    Raises:
        ConfigError: A non-positive size, a negative ``negative`` or learning rate.
        InputError: A non-square adjacency or a node without an edge.
    """
    for name, value in (("dim", dim), ("window", window), ("epochs", epochs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an integer of at least 1, got {value!r}")
    if negative < 0 or not 0 <= min_lr <= lr:
        raise ConfigError(f"need negative >= 0, 0 <= min_lr <= lr; got {negative}, {min_lr}, {lr}")
    walks = random_walks(adjacency, walks_per_node=walks_per_node, length=length, seed=seed)
    n = len(np.asarray(adjacency))
    rng = np.random.default_rng([seed, 1])
    gen = torch.Generator().manual_seed(seed)
    with _one_thread():
        w_in = (torch.rand(n, dim, generator=gen) - 0.5) / dim
        w_out = torch.zeros(n, dim)
        counts = torch.as_tensor(np.bincount(walks.ravel(), minlength=n), dtype=torch.float64)
        table = torch.multinomial(counts**0.75, _TABLE, replacement=True, generator=gen)
        steps = [
            walk_pairs(walks[i : i + _WALKS_PER_STEP], window, rng)
            for _ in range(epochs)
            for i in range(0, len(walks), _WALKS_PER_STEP)
        ]
        total = sum(len(c) for c, _ in steps)
        done = 0
        for centres, contexts in steps:
            rate = lr - (lr - min_lr) * done / total
            done += len(centres)
            c = torch.from_numpy(centres)
            x = torch.from_numpy(contexts)
            u = w_in[x]
            v = w_out[c]
            pos = (1.0 - torch.sigmoid(torch.einsum("bd,bd->b", u, v))) * rate
            grad_u = pos[:, None] * v
            k = round(negative * len(c))  # negatives, each for a random pair of the batch
            if k:
                which = torch.randint(0, len(c), (k,), generator=gen)
                neg = table[torch.randint(0, _TABLE, (k,), generator=gen)]
                un = u[which]
                vn = w_out[neg]
                push = -torch.sigmoid(torch.einsum("bd,bd->b", un, vn)) * rate
                grad_u.index_add_(0, which, push[:, None] * vn)
                w_out.index_add_(0, neg, push[:, None] * un)
            w_out.index_add_(0, c, pos[:, None] * u)
            w_in.index_add_(0, x, grad_u)
    return w_in.double().numpy()
