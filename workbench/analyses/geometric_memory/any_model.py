"""The same geometry on any model's input embeddings, against a graph over its tokens.

The toy study trains its own embeddings; a pretrained model's embedding table can be asked the same
question: do tokens that are adjacent in some graph point the same way, does the table's energy sit
on the graph's smooth Laplacian eigenvectors, does embedding distance follow graph distance?

:func:`cooccurrence_graph` builds one such graph from text: the ``top`` most frequent tokens of a
text source, linked when they occur within ``window`` positions of each other at least
``min_count`` times (its largest connected component is kept). :func:`embedding_geometry` measures
the rows of the input-embedding table of a loaded model (:func:`workbench.load_model`) on any graph
over its token ids.

Example::

    from workbench import load_model
    from workbench.analyses import geometric_memory as gm
    subject = load_model("tiny-lm")
    graph = gm.cooccurrence_graph(subject.tokenizer, "builtin:pydoc", top=150)
    gm.embedding_geometry(subject, graph).geometric_level
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.analyses.geometric_memory import compute
from workbench.analyses.geometric_memory.graphs import hop_distances
from workbench.analyses.geometric_memory.results import EmbeddingGeometry
from workbench.errors import InputError


@dataclass(frozen=True)
class TokenGraph:
    """A graph over a model's token ids.

    Attributes:
        token_ids: The token id of each node.
        edges: Undirected edges between node indices.
        labels: A readable label per node (the decoded token).
    """

    token_ids: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        object.__setattr__(self, "token_ids", tuple(int(t) for t in self.token_ids))
        object.__setattr__(self, "edges", tuple((int(u), int(v)) for u, v in self.edges))
        object.__setattr__(self, "labels", tuple(self.labels))
        if len(set(self.token_ids)) != n:
            raise InputError("a token graph names a token twice")
        if any(not (0 <= u < n and 0 <= v < n) or u == v for u, v in self.edges):
            raise InputError(f"token graph edges must join two distinct nodes of 0..{n - 1}")
        if self.labels and len(self.labels) != n:
            raise InputError(f"{len(self.labels)} labels for {n} tokens")

    @property
    def adjacency(self) -> np.ndarray:
        """Symmetric 0/1 adjacency, ``(n, n)``."""
        n = len(self.token_ids)
        a = np.zeros((n, n))
        for u, v in self.edges:
            a[u, v] = a[v, u] = 1.0
        return a


def cooccurrence_graph(
    tokenizer: Any,
    texts: str | Sequence[str],
    *,
    top: int = 100,
    window: int = 1,
    min_count: int = 2,
    n_texts: int | None = 2000,
) -> TokenGraph:
    """Tokens linked when they co-occur nearby in text (the largest connected component).

    Args:
        tokenizer: A Hugging Face tokenizer (``subject.tokenizer``).
        texts: A text source for :func:`workbench.inputs.read_texts` (``builtin:pydoc``, a file),
            or the texts themselves.
        top: Keep the ``top`` most frequent tokens.
        window: Link tokens at most this many positions apart.
        min_count: Co-occurrences needed for an edge.
        n_texts: Texts read from a source (``None``: all).

    Raises:
        InputError: Fewer than three tokens left connected.
    """
    from workbench.inputs import read_texts

    docs = read_texts(texts, n_texts) if isinstance(texts, str) else list(texts)
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in docs]
    freq = Counter(t for ids in encoded for t in ids)
    keep = [t for t, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]
    index = {t: i for i, t in enumerate(keep)}
    pairs: Counter[tuple[int, int]] = Counter()
    for ids in encoded:
        for i, a in enumerate(ids):
            for b in ids[i + 1 : i + 1 + window]:
                if a in index and b in index and a != b:
                    u, v = sorted((index[a], index[b]))
                    pairs[(u, v)] += 1
    edges = [e for e, c in pairs.items() if c >= min_count]
    if not edges:
        raise InputError(f"no token pair co-occurs {min_count} times; lower min_count or add text")
    # the largest connected component
    n = len(keep)
    seen = np.full(n, -1)
    for s in range(n):
        if seen[s] < 0:
            seen[hop_distances(n, edges, s) >= 0] = s
    component = Counter(seen.tolist()).most_common(1)[0][0]
    nodes = [i for i in range(n) if seen[i] == component]
    if len(nodes) < 3:
        raise InputError(f"the co-occurrence graph's largest component has {len(nodes)} tokens")
    renum = {old: new for new, old in enumerate(nodes)}
    sub = sorted((renum[u], renum[v]) for u, v in edges if u in renum and v in renum)
    ids = [keep[i] for i in nodes]
    labels = [tokenizer.decode([t]) for t in ids]
    return TokenGraph(tuple(ids), tuple(sub), tuple(labels))


def embedding_geometry(
    subject: Any, graph: TokenGraph, *, name: str | None = None
) -> EmbeddingGeometry:
    """The geometry of a model's input-embedding rows for the graph's tokens.

    Args:
        subject: A :class:`workbench.Subject` (from :func:`workbench.load_model`) or a model with
            ``get_input_embeddings()``.
        graph: The token graph (connected, every node with an edge).
        name: Label of the result (default: the subject's name).

    Raises:
        InputError: A token id outside the embedding table, or a graph with an isolated node.
    """
    model = getattr(subject, "model", subject)
    table = model.get_input_embeddings().weight.detach()
    ids = np.asarray(graph.token_ids)
    if ids.max() >= table.shape[0] or ids.min() < 0:
        raise InputError(
            f"token id {int(ids.max())} outside the embedding table of {table.shape[0]} rows"
        )
    rows = table[ids].double().cpu().numpy()
    label = name or getattr(subject, "name", type(model).__name__)
    return compute.measure_embeddings(label, rows, graph.adjacency)
