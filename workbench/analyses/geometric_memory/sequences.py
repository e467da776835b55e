"""Token sequences of the graph tasks, as the release writes them (without its pause token).

Vocabulary: the ``n`` node tokens (a node's token is its seeded label, ``graph.tokens[node]``),
then ``[EDGE]``, ``[PATH]`` and ``[PAD]``.

* An edge fact ``u -> v`` is ``[EDGE] u v``; the loss is on ``v`` only.
* A path query from ``start`` to ``target`` along ``start, p1, ..., target`` is
  ``[PATH] target start p1 ... target``; the loss is on ``p1 ... target`` (the release's full-path
  recipe, with the start in the prefix). The first step ``p1`` is the hard token: everything
  after it is one memorized edge away from the token before it.
* The in-context control writes a freshly relabelled copy of the graph's facts into the prompt,
  ``[EDGE] u v`` for every fact in random order, then the path query.

Labels are ``-100`` wherever no loss is taken (prefix, padding), as ``cross_entropy`` ignores.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from workbench.analyses.geometric_memory.graphs import GraphTask

IGNORE = -100


def specials(n_nodes: int) -> tuple[int, int, int]:
    """Token ids of ``[EDGE]``, ``[PATH]`` and ``[PAD]``."""
    return n_nodes, n_nodes + 1, n_nodes + 2


def vocab_size(n_nodes: int) -> int:
    """Node tokens plus the three special tokens."""
    return n_nodes + 3


def edge_data(graph: GraphTask, directions: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, labels)``, both ``(n_facts, 3)``: one ``[EDGE] u v`` row per directed fact."""
    edge, _, _ = specials(graph.n_nodes)
    tok = graph.tokens
    ids = torch.tensor([[edge, tok[u], tok[v]] for u, v in graph.directed_edges(directions)])
    labels = torch.full_like(ids, IGNORE)
    labels[:, 2] = ids[:, 2]
    return ids, labels


def edge_prompts(graph: GraphTask) -> torch.Tensor:
    """``(n_nodes, 2)``: ``[EDGE] u`` for every canonical node ``u``."""
    edge, _, _ = specials(graph.n_nodes)
    return torch.tensor([[edge, graph.tokens[u]] for u in range(graph.n_nodes)])


def path_data(
    graph: GraphTask, paths: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, labels)`` of the path queries, padded to the longest with ``[PAD]``."""
    _, path, pad = specials(graph.n_nodes)
    tok = graph.tokens
    rows = [[path, tok[p[-1]], *(tok[x] for x in p)] for p in paths]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    labels = ids.clone()
    labels[:, :3] = IGNORE
    labels[ids == pad] = IGNORE
    return ids, labels


def pad_to(
    ids: torch.Tensor, labels: torch.Tensor, width: int, pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pads ``ids`` with ``pad`` and ``labels`` with ``IGNORE`` to ``width`` columns."""
    extra = width - ids.shape[1]
    if extra <= 0:
        return ids, labels
    return (
        torch.cat([ids, torch.full((len(ids), extra), pad, dtype=ids.dtype)], 1),
        torch.cat([labels, torch.full((len(ids), extra), IGNORE, dtype=labels.dtype)], 1),
    )


def query_prompts(
    graph: GraphTask, paths: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([PATH] target start`` prompts ``(m, 3)``, the first step's token ``(m,))``."""
    _, path, _ = specials(graph.n_nodes)
    tok = graph.tokens
    prompts = torch.tensor([[path, tok[p[-1]], tok[p[0]]] for p in paths])
    return prompts, torch.tensor([tok[p[1]] for p in paths])


def incontext_batch(
    graph: GraphTask,
    paths: Sequence[Sequence[int]],
    directions: str,
    batch: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of in-context examples on freshly relabelled copies of the graph.

    Each row draws a random relabelling of the node tokens and a random order of the facts, writes
    every fact as ``[EDGE] u v``, then one path query (drawn from ``paths``) with its full path.
    The loss is on the path after the start, as in :func:`path_data`.

    Returns:
        ``(ids, labels)``, both ``(batch, 3 * n_facts + longest path + 2)``.
    """
    n = graph.n_nodes
    edge, path, pad = specials(n)
    facts = torch.tensor(graph.directed_edges(directions))
    longest = max(len(p) for p in paths)
    width = 3 * len(facts) + longest + 2
    ids = torch.full((batch, width), pad, dtype=torch.long)
    labels = torch.full((batch, width), IGNORE, dtype=torch.long)
    picks = torch.randint(0, len(paths), (batch,), generator=generator)
    for row in range(batch):
        relabel = torch.randperm(n, generator=generator)
        order = torch.randperm(len(facts), generator=generator)
        pairs = relabel[facts[order]]
        block = torch.cat([torch.full((len(pairs), 1), edge), pairs], 1).flatten()
        p = relabel[torch.tensor(paths[int(picks[row])])]
        query = torch.cat([torch.tensor([path, int(p[-1])]), p])
        seq = torch.cat([block, query])
        ids[row, : len(seq)] = seq
        labels[row, len(block) + 3 : len(seq)] = seq[len(block) + 3 :]
    return ids, labels
