"""The graphs whose edges the models memorize, their path queries, and the release's file format.

A :class:`GraphTask` holds a connected undirected graph on nodes ``0..n-1`` in a *canonical order*
(the order the figures and heatmaps use: arm by arm for a path-star, row-major for a grid, around
the cycle, breadth-first otherwise), the path queries over it split into fine-tuning and held-out
ones, and the random relabelling that maps each canonical node to its token id. Labels are
randomized per seed, so a model cannot read the graph off the token ids; every measurement is
reported back in canonical order.

Families (:func:`build_graph`):

* ``path_star``: ``degree`` arms of ``path_length`` hops each from one centre (Bachmann &
  Nagarajan, 2024); one query per leaf, from the centre. Nodes ``1 + degree * path_length``.
* ``grid``: ``rows x cols`` with ``rows * cols = n_nodes`` (``rows`` the largest divisor of
  ``n_nodes`` not above its square root).
* ``cycle``: ``n_nodes`` nodes on a ring.
* ``tree``: a balanced tree, branching ``degree``, depth ``path_length``; queries root to leaf.
* ``irregular``: a random connected graph on ``n_nodes`` nodes with ``round(1.25 * n_nodes)``
  edges (a random spanning tree plus random chords), as the release's 16-node, 20-edge graph.
* ``release_grid`` / ``release_irregular``: the release's two 16-node graphs with their own path
  splits, shipped in ``data/`` (see its README).
* a file: an edge list, one edge a line as ``u=v`` (the release's format), ``u v`` or ``u,v``
  (``#`` starts a comment). A file named ``X_pretrain.txt`` brings its release path splits
  ``X_train_*.txt`` and ``X_test_*.txt`` (lines ``target=start,...,target``) when they exist.

Generated families other than the path-star and the tree get up to :data:`STARTS_PER_TARGET`
queries per node as target, from distinct starts at ``path_length`` hops (or the farthest nodes
when none is that far), each along a shortest path. Folds hold out whole targets: a held-out
query's target is never the target of a fine-tuning path, so it can only be reached through the
memorized geometry (one query per target was 25 queries on a 25-node grid, each moving the
accuracy by 0.04, with 19 fine-tuning paths to learn navigation from).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.analyses.geometric_memory.graph_files import RELEASE_GRAPHS, from_file
from workbench.codec import Record
from workbench.errors import ConfigError, InputError

FAMILIES = ("path_star", "grid", "cycle", "tree", "irregular")
"""Generated graph families."""

DIRECTIONS = ("forward", "both", "forward+self", "both+self")
"""Which facts edge memorization sees: edges as listed or both ways, optionally with self-edges."""
Edge = tuple[int, int]
Path_ = tuple[int, ...]


@dataclass(frozen=True)
class GraphTask(Record):
    """A graph, its path queries and its token labelling.

    Attributes:
        name: The family or file the graph came from.
        n_nodes: Number of nodes (canonical ids ``0..n_nodes-1``).
        edges: Undirected edges ``(u, v)`` in their forward orientation (the order a file lists
            them, outward from the centre for a path-star or tree).
        paths: Every path query ``(start, ..., target)``, grouped by target, the targets in a
            seeded random order; fold ``i`` holds out the queries of the ``i``-th ``n_heldout``
            targets (see :meth:`folds`).
        n_heldout: Held-out targets per fold (with all their queries); with ``fixed_split``, the
            number of held-out queries at the end of ``paths``. Their edges are memorized, the
            paths never seen.
        tokens: Token id of each canonical node (a seeded permutation of ``0..n_nodes-1``).
        groups: A category per node for colouring (the arm of a path-star, the centre's subtree
            of a tree, the row of a grid; ``0`` otherwise), ``-1`` for a centre or root.
        depth: Hop distance of each node from the reference node (centre, root or node 0).
        root: The centre or root node, when the family has one.
        notes: What the loader noticed (paths through non-edges, overlapping splits...).
        fixed_split: The split came with the graph (a release file): one fold, the file's.
    """

    name: str
    n_nodes: int
    edges: tuple[Edge, ...]
    paths: tuple[Path_, ...]
    n_heldout: int
    tokens: tuple[int, ...]
    groups: tuple[int, ...]
    depth: tuple[int, ...]
    root: int | None = None
    notes: tuple[str, ...] = field(default=())
    fixed_split: bool = False

    def __post_init__(self) -> None:
        n = self.n_nodes
        edges = tuple((int(u), int(v)) for u, v in self.edges)
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "paths", tuple(tuple(int(x) for x in p) for p in self.paths))
        for name in ("tokens", "groups", "depth", "notes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if n < 2 or not edges:
            raise InputError(
                f"graph {self.name!r} needs at least 2 nodes and 1 edge, got {n} nodes"
            )
        if any(not (0 <= u < n and 0 <= v < n) for u, v in edges):
            raise InputError(f"graph {self.name!r} has an edge outside nodes 0..{n - 1}")
        if sorted(self.tokens) != list(range(n)):
            raise InputError(f"tokens of graph {self.name!r} are not a permutation of 0..{n - 1}")
        if len(self.groups) != n or len(self.depth) != n:
            raise InputError(f"graph {self.name!r}: groups and depth need one entry per node")
        limit = len(self.paths) if self.fixed_split else len(self.targets)
        if not 1 <= self.n_heldout < limit:
            raise ConfigError(
                f"n_heldout={self.n_heldout} held-out targets but the graph has {limit} "
                f"targets; give between 1 and {limit - 1}"
            )
        for p in self.paths:
            if len(p) < 2 or any(not 0 <= x < n for x in p):
                raise InputError(f"graph {self.name!r} has a bad path {p}")

    @property
    def test_paths(self) -> tuple[Path_, ...]:
        """The held-out queries of the first fold."""
        return self.folds()[0][1]

    @property
    def train_paths(self) -> tuple[Path_, ...]:
        """The fine-tuning queries of the first fold."""
        return self.folds()[0][0]

    def folds(self) -> list[tuple[tuple[Path_, ...], tuple[Path_, ...]]]:
        """``(train, held_out)`` per fold: every target is held out once, with all its queries.

        Fold ``i`` holds out the queries of targets ``i * n_heldout`` to ``(i + 1) * n_heldout``
        in order of first appearance, so a held-out query's target is never a fine-tuning target
        (on the path-star, one query per leaf, that is one query per target). A file's own split
        is one fold; the last fold may hold out fewer targets.
        """
        if self.fixed_split:
            k = len(self.paths) - self.n_heldout
            return [(self.paths[:k], self.paths[k:])]
        targets = self.targets
        out = []
        for start in range(0, len(targets), self.n_heldout):
            held = set(targets[start : start + self.n_heldout])
            out.append(
                (
                    tuple(p for p in self.paths if p[-1] not in held),
                    tuple(p for p in self.paths if p[-1] in held),
                )
            )
        return out

    @property
    def targets(self) -> tuple[int, ...]:
        """The queries' targets, each once, in order of first appearance."""
        return tuple(dict.fromkeys(p[-1] for p in self.paths))

    @property
    def adjacency(self) -> np.ndarray:
        """The symmetric 0/1 adjacency matrix, ``(n, n)`` float64 (self-loops dropped)."""
        a = np.zeros((self.n_nodes, self.n_nodes))
        for u, v in self.edges:
            if u != v:
                a[u, v] = a[v, u] = 1.0
        return a

    def directed_edges(self, directions: str) -> list[Edge]:
        """The memorized facts: ``forward`` edges as listed, or ``both`` orientations.

        A ``+self`` suffix (``forward+self``, ``both+self``) adds a self-edge ``u -> u`` for every
        node, as the release's ``add_self_edges`` option does.
        """
        if directions not in DIRECTIONS:
            raise ConfigError(
                f"directions={directions!r} is not accepted; use one of "
                + ", ".join(repr(d) for d in DIRECTIONS)
            )
        base, _, extra = directions.partition("+")
        out = list(dict.fromkeys((u, v) for u, v in self.edges if u != v))
        if base == "both":
            out = list(dict.fromkeys([*out, *((v, u) for u, v in out)]))
        if extra == "self":
            out += [(u, u) for u in range(self.n_nodes)]
        return out

    @property
    def degrees(self) -> np.ndarray:
        """Undirected degree of each node."""
        return self.adjacency.sum(1).astype(np.int64)

    @property
    def order(self) -> tuple[int, ...]:
        """Canonical nodes are already in graph order: ``0..n-1``."""
        return tuple(range(self.n_nodes))


def hop_distances(n: int, edges: Sequence[Edge], source: int) -> np.ndarray:
    """Breadth-first hop distance from ``source`` to every node (``-1`` where unreachable)."""
    nbrs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        nbrs[u].append(v)
        nbrs[v].append(u)
    dist = np.full(n, -1, dtype=np.int64)
    dist[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in nbrs[u]:
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def _bfs_order(n: int, edges: Sequence[Edge], source: int = 0) -> list[int]:
    dist = hop_distances(n, edges, source)
    return sorted(range(n), key=lambda i: (dist[i] if dist[i] >= 0 else n, i))


def _relabel(n: int, edges, paths, order: Sequence[int]):
    """Renames nodes so that ``order`` becomes ``0..n-1``."""
    new = {old: i for i, old in enumerate(order)}
    return (
        [(new[u], new[v]) for u, v in edges],
        [tuple(new[x] for x in p) for p in paths],
        new,
    )


def _shortest_path(n: int, edges: Sequence[Edge], start: int, target: int) -> tuple[int, ...]:
    dist = hop_distances(n, edges, target)
    nbrs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        nbrs[u].append(v)
        nbrs[v].append(u)
    path = [start]
    while path[-1] != target:
        here = path[-1]
        path.append(min(v for v in nbrs[here] if dist[v] == dist[here] - 1))
    return tuple(path)


STARTS_PER_TARGET = 4
"""Queries per target node on generated families other than the path-star and the tree (fewer
where fewer nodes lie ``path_length`` hops away)."""


def _node_queries(n: int, edges, hops: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Queries grouped by target: up to :data:`STARTS_PER_TARGET` per node, distinct starts.

    The starts lie ``hops`` away from the target (or as far as any node does).
    """
    paths = []
    for target in range(n):
        dist = hop_distances(n, edges, target)
        want = min(hops, int(dist.max()))
        starts = rng.permutation(np.flatnonzero(dist == want))[:STARTS_PER_TARGET]
        paths += [_shortest_path(n, edges, int(start), target) for start in sorted(starts)]
    return paths


def _check_paths(name: str, n: int, edges, paths, notes: list[str]) -> None:
    """Every query's start must reach its target; a disconnected graph is noted, not refused."""
    components = 0
    seen = np.zeros(n, dtype=bool)
    for s in range(n):
        if not seen[s]:
            components += 1
            seen |= hop_distances(n, edges, s) >= 0
    if components > 1:
        notes.append(f"graph {name!r} has {components} connected components")
    for p in paths:
        if hop_distances(n, edges, p[0])[p[-1]] < 0:
            raise InputError(
                f"graph {name!r} is not connected between {p[0]} and {p[-1]}, a path query's "
                "start and target; give a graph whose queries stay inside one component"
            )


def _path_star(degree: int, hops: int):
    edges, paths, node = [], [], 1
    groups, depth = [-1], [0]
    for arm in range(degree):
        path = [0]
        for step in range(hops):
            path.append(node)
            groups.append(arm)
            depth.append(step + 1)
            node += 1
        edges += list(itertools.pairwise(path))
        paths.append(tuple(path))
    return 1 + degree * hops, edges, paths, groups, depth, 0


def _tree(degree: int, hops: int):
    edges, groups, depth = [], [-1], [0]
    frontier, node = [0], 1
    for level in range(1, hops + 1):
        nxt = []
        for parent in frontier:
            for _ in range(degree):
                edges.append((parent, node))
                groups.append(groups[parent] if level > 1 else len(nxt))
                depth.append(level)
                nxt.append(node)
                node += 1
        frontier = nxt
    parent_of = {v: u for u, v in edges}
    paths = []
    for leaf in frontier:
        path = [leaf]
        while path[-1] != 0:
            path.append(parent_of[path[-1]])
        paths.append(tuple(reversed(path)))
    return node, edges, paths, groups, depth, 0


def grid_shape(n_nodes: int) -> tuple[int, int]:
    """``(rows, cols)`` of the grid family: ``rows`` the largest divisor not above the root."""
    rows = max(r for r in range(1, math.isqrt(n_nodes) + 1) if n_nodes % r == 0)
    if rows < 2:
        raise ConfigError(
            f"n_nodes={n_nodes} has no grid shape rows x cols with both at least 2; "
            "use a composite number such as 16 or 20"
        )
    return rows, n_nodes // rows


def _irregular(n: int, rng: np.random.Generator) -> list[Edge]:
    order = rng.permutation(n)
    edges = {tuple(sorted((int(order[i]), int(order[rng.integers(0, i)])))) for i in range(1, n)}
    target = max(len(edges), round(1.25 * n))
    while len(edges) < min(target, n * (n - 1) // 2):
        u, v = (int(x) for x in rng.choice(n, 2, replace=False))
        edges.add((min(u, v), max(u, v)))
    return sorted(edges)


def build_graph(
    graph: str,
    *,
    degree: int = 5,
    path_length: int = 5,
    n_nodes: int = 16,
    n_heldout: int | None = None,
    seed: int = 0,
) -> GraphTask:
    """Builds the graph task the study trains on.

    Args:
        graph: A family in :data:`FAMILIES`, a name in :data:`RELEASE_GRAPHS`, or an edge-list
            file (see the module docstring).
        degree: Arms of a path-star, branching of a tree.
        path_length: Hops of each arm or query (the depth of a tree).
        n_nodes: Nodes of a grid, cycle or irregular graph.
        n_heldout: Held-out queries (default: a quarter of them, at least one); ignored when a
            file brings its own split.
        seed: Seeds the token relabelling, the irregular graph, the query starts and the split.

    Raises:
        ConfigError: A size below what the family accepts, or more held-out queries than there
            are queries (targets).
        InputError: An unreadable or malformed file (the line is named), or a disconnected graph.
    """
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    split: tuple[list, list] | None = None
    root = None
    if graph == "path_star":
        n, edges, paths, groups, depth, root = _path_star(degree, path_length)
    elif graph == "tree":
        n, edges, paths, groups, depth, root = _tree(degree, path_length)
    elif graph in ("grid", "cycle", "irregular"):
        n = n_nodes
        if graph == "grid":
            rows, cols = grid_shape(n)
            edges = [(r * cols + c, r * cols + c + 1) for r in range(rows) for c in range(cols - 1)]
            edges += [
                (r * cols + c, (r + 1) * cols + c) for r in range(rows - 1) for c in range(cols)
            ]
            groups = [i // cols for i in range(n)]
        elif graph == "cycle":
            edges = [(i, (i + 1) % n) for i in range(n)]
            groups = [0] * n
        else:
            raw = _irregular(n, rng)
            order = _bfs_order(n, raw)
            edges, _, _ = _relabel(n, raw, [], order)
            groups = [0] * n
        depth = hop_distances(n, edges, 0).tolist()
        paths = _node_queries(n, edges, path_length, rng)
    else:
        n, edges, paths, split, notes = from_file(graph, FAMILIES)
        groups = [0] * n
        depth = hop_distances(n, edges, 0).tolist()
        if not paths:
            if (hop_distances(n, edges, 0) < 0).any():
                raise InputError(
                    f"graph {Path(graph).name!r} is not connected; its path queries are drawn over "
                    "the whole graph, so give one connected component (or a release split)"
                )
            paths = _node_queries(n, edges, path_length, rng)
    name = graph if graph in (*FAMILIES, *RELEASE_GRAPHS) else Path(graph).name
    _check_paths(name, n, edges, paths, notes)
    if split is not None:
        train, test = split
        paths, held = [*train, *test], len(test)
    else:
        by_target: dict[int, list[tuple[int, ...]]] = {}
        for p in paths:
            by_target.setdefault(p[-1], []).append(p)
        groups_ = list(by_target.values())
        held = max(1, len(groups_) // 4) if n_heldout is None else n_heldout
        if not 1 <= held < len(groups_):
            raise ConfigError(
                f"n_heldout={held} held-out targets but the graph has {len(groups_)} targets; "
                f"give between 1 and {len(groups_) - 1}"
            )
        paths = [p for i in rng.permutation(len(groups_)) for p in groups_[i]]
    tokens = rng.permutation(n).tolist()
    return GraphTask(
        name,
        n,
        tuple(edges),
        tuple(paths),
        held,
        tokens,
        groups,
        depth,
        root,
        tuple(notes),
        split is not None,
    )
