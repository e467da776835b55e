"""Graphs from files: the release's text format and plain edge lists.

The release (``Shahriarnz14/Geometric_Memory``) writes a graph as ``X_pretrain.txt``, one edge a
line as ``u=v``, and its path splits as ``X_train_*.txt`` and ``X_test_*.txt``, one query a line as
``target=start,...,target``. :func:`read_edge_file` also accepts ``u v`` and ``u,v`` lines and
``#`` comments; every malformed line is named in a one-line :class:`~workbench.errors.InputError`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from pathlib import Path

from workbench.errors import ConfigError, InputError

Edge = tuple[int, int]

RELEASE_GRAPHS = {
    "release_grid": "grid_rows_4_cols_4_nodes_16_sd_00_fb_11_pretrain.txt",
    "release_irregular": "irregular_graph_nodes_16_edges_30_sd_00_fb_11_pretrain.txt",
}
"""The release's two tiny graphs shipped with the package (``data/README.md``)."""
DATA = Path(__file__).parent / "data"


_LINE = re.compile(r"^\s*(-?\d+)\s*(?:=|,|\s)\s*(-?\d+)\s*$")


def _resolve_file(graph: str, families: Sequence[str]) -> Path:
    if graph in RELEASE_GRAPHS:
        return DATA / RELEASE_GRAPHS[graph]
    path = Path(graph).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"graph={graph!r} is neither a family ({', '.join(families)}), a release graph "
            f"({', '.join(RELEASE_GRAPHS)}) nor a readable edge-list file"
        )
    return path


def read_edge_file(path: str | Path) -> list[Edge]:
    """The edges of a ``u=v`` (or ``u v``, ``u,v``) file, in file order, as written.

    Raises:
        InputError: A line that is not an edge (its number and text are named).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read graph file {path}: {exc}") from None
    edges = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        match = _LINE.match(body)
        if match is None:
            raise InputError(
                f"{path.name} line {number}: {line.strip()!r} is not an edge; "
                "write one edge a line as u=v (or 'u v')"
            )
        edges.append((int(match.group(1)), int(match.group(2))))
    if not edges:
        raise InputError(f"graph file {path} holds no edge")
    return edges


def read_path_file(path: str | Path) -> list[tuple[int, ...]]:
    """Paths of a release split file, lines ``target=start,...,target``.

    Raises:
        InputError: A malformed line, or one whose path does not end at its target.
    """
    path = Path(path)
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        body = line.strip()
        if not body:
            continue
        head, sep, tail = body.partition("=")
        try:
            target = int(head)
            nodes = tuple(int(x) for x in tail.split(","))
        except ValueError:
            nodes, target = (), None
        if not sep or len(nodes) < 2 or nodes[-1] != target:
            raise InputError(
                f"{path.name} line {number}: {body!r} is not a path; write target=start,...,target"
            )
        out.append(nodes)
    return out


def from_file(graph: str, families: Sequence[str] = ()):
    """Reads a graph file (or a name in :data:`RELEASE_GRAPHS`) with its release split.

    Returns:
        ``(n_nodes, edges, paths, split, notes)``: nodes renumbered ``0..n-1`` in sorted label
        order, undirected edges without self-loops or repeats, the split's paths (empty without
        one), ``(train, test)`` or ``None``, and what the reader noticed.
    """
    path = _resolve_file(graph, families)
    raw = read_edge_file(path)
    labels = sorted({x for e in raw for x in e})
    index = {x: i for i, x in enumerate(labels)}
    seen: dict[frozenset, Edge] = {}
    for u, v in raw:
        if u != v:
            seen.setdefault(frozenset((u, v)), (index[u], index[v]))
    edges = list(seen.values())
    n = len(labels)
    notes, split = [], None
    stem = path.name.removesuffix("_pretrain.txt")
    paths: list[tuple[int, ...]] = []
    if stem != path.name:
        trains = sorted(path.parent.glob(f"{stem}_train_*.txt"))
        tests = sorted(path.parent.glob(f"{stem}_test_*.txt"))
        if trains and tests:

            def load(p: Path) -> list[tuple[int, ...]]:
                rows = read_path_file(p)
                unknown = {x for r in rows for x in r} - set(index)
                if unknown:
                    raise InputError(
                        f"{p.name} names nodes {sorted(unknown)} absent from {path.name}"
                    )
                return [tuple(index[x] for x in r) for r in rows]

            train, test = load(trains[0]), load(tests[0])
            overlap = set(train) & set(test)
            if overlap:
                notes.append(
                    f"{len(overlap)} of the {len(test)} held-out paths of {tests[0].name} are "
                    f"also in {trains[0].name}: they are not held out"
                )
            undirected = set(seen)
            for p in (*train, *test):
                bad = [
                    (labels[a], labels[b])
                    for a, b in itertools.pairwise(p)
                    if frozenset((labels[a], labels[b])) not in undirected
                ]
                if bad:
                    notes.append(f"path {[labels[x] for x in p]} steps along non-edges {bad}")
            split = (train, test)
            paths = train + test
    return n, edges, paths, split, notes
