"""Token frequency against distance to the centroid: is the geometry organised by frequency?

Frequent and rare tokens sit in different regions of embedding space: in trained input
embeddings rare tokens drift away from (or collapse towards) the origin depending on the model
(Gao et al. 2019, "Representation degeneration problem in training natural language generation
models"), and frequency organises contextual representations too (Puccetti et al. 2022, "Outlier
dimensions that disrupt transformers are driven by frequency"). The anisotropy paper
(arXiv 2604.08764) plots log frequency against distance to the centroid; we summarise that plot by
a Pearson correlation.

**Per occurrence, then per type.** For contextual activations each row is one occurrence of a token.
We measure every occurrence's Euclidean distance to the centroid of all rows, and average those
distances over the occurrences of each token type. Averaging the vectors first and measuring the
mean vector's distance would be wrong: the mean of many scattered vectors lies closer to the
centroid the more occurrences it averages, so frequent types would look central for a purely
statistical reason.

For an input embedding table each row already is one type: we use its distance to the table's
centroid, for the tokens seen at least once in the corpus counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.arrays import frozen_or_none
from workbench.errors import InputError
from workbench.geometry._input import as_matrix, as_vector, check_positive_int

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["FrequencyDistance", "embedding_frequency_correlation", "frequency_distance_correlation"]


@dataclass(frozen=True, eq=False)
class FrequencyDistance:
    """Pearson correlation of log corpus frequency with distance to the centroid, per token type.

    Attributes:
        r: Pearson correlation between ``log_frequency`` and ``distance``.
        n_types: Number of token types in the correlation.
        token_ids: Their ids, shape (n_types,).
        log_frequency: Natural log of their corpus counts.
        distance: Their distance to the centroid (mean over occurrences for activations).
        occurrences: Occurrences of each type among the rows (``None`` for an embedding table).
    """

    r: float
    n_types: int
    token_ids: np.ndarray = field(repr=False)
    log_frequency: np.ndarray = field(repr=False)
    distance: np.ndarray = field(repr=False)
    occurrences: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_ids", frozen_or_none(self.token_ids, np.int64))
        object.__setattr__(self, "log_frequency", frozen_or_none(self.log_frequency, np.float64))
        object.__setattr__(self, "distance", frozen_or_none(self.distance, np.float64))
        object.__setattr__(self, "occurrences", frozen_or_none(self.occurrences, np.int64))
        shapes = {a.shape for a in (self.token_ids, self.log_frequency, self.distance)}
        if self.occurrences is not None:
            shapes.add(self.occurrences.shape)
        if shapes != {(self.n_types,)}:
            raise InputError(
                f"per-type arrays have shapes {sorted(shapes)}; ({self.n_types},) needed"
            )

    def to_dict(self, *, points: bool = False) -> dict[str, Any]:
        """Plain-Python form: the scalars, and with ``points=True`` the per-type arrays too.

        ``points=True`` is lossless: :meth:`from_dict` rebuilds an equal object from it.
        """
        out: dict[str, Any] = {"r": self.r, "n_types": self.n_types}
        if points:
            out["token_ids"] = self.token_ids.tolist()
            out["log_frequency"] = self.log_frequency.tolist()
            out["distance"] = self.distance.tolist()
            out["occurrences"] = None if self.occurrences is None else self.occurrences.tolist()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrequencyDistance:
        """Rebuilds the object from ``to_dict(points=True)``."""
        return cls(
            r=float(data["r"]),
            n_types=int(data["n_types"]),
            token_ids=np.asarray(data["token_ids"], dtype=np.int64),
            log_frequency=np.asarray(data["log_frequency"], dtype=np.float64),
            distance=np.asarray(data["distance"], dtype=np.float64),
            occurrences=None
            if data.get("occurrences") is None
            else np.asarray(data["occurrences"], dtype=np.int64),
        )

    def figure(self) -> go.Figure:
        """Scatter of distance to the centroid against log frequency, one point per type."""
        import plotly.graph_objects as go

        from workbench.figures import style

        hover = [f"token {t}" for t in self.token_ids.tolist()]
        if self.occurrences is not None:
            hover = [
                f"{h}, {o} occurrences"
                for h, o in zip(hover, self.occurrences.tolist(), strict=True)
            ]
        fig = go.Figure(
            go.Scatter(
                x=self.log_frequency,
                y=self.distance,
                mode="markers",
                marker={"size": 4, "opacity": 0.6},
                text=hover,
                hoverinfo="text+x+y",
            )
        )
        fig.update_layout(
            xaxis_title="log corpus frequency",
            yaxis_title="distance to centroid",
        )
        return style(
            fig, title=f"Frequency vs distance to centroid (r = {self.r:.3f}, {self.n_types} types)"
        )


def _lookup_counts(counts: Any, ids: np.ndarray) -> np.ndarray:
    """Corpus counts of ``ids`` (0 where unknown) from a mapping or an array indexed by id."""
    if isinstance(counts, Mapping):
        return np.array([float(counts.get(int(t), 0)) for t in ids], dtype=np.float64)
    table = as_vector(counts, "counts").astype(np.float64)
    out = np.zeros(ids.shape, dtype=np.float64)
    inside = ids < table.size
    out[inside] = table[ids[inside]]
    return out


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    denom = float(np.sqrt((a @ a) * (b @ b)))
    if denom == 0.0:
        raise InputError(
            "log frequency or distance is constant over the token types; r is undefined"
        )
    return float(a @ b) / denom


def _result(ids: np.ndarray, freq: np.ndarray, dist: np.ndarray, occ: np.ndarray | None):
    if ids.size < 3:
        raise InputError(
            f"only {ids.size} token types qualify; at least 3 are needed for a correlation"
        )
    log_f = np.log(freq)
    return FrequencyDistance(
        r=_pearson(log_f, dist),
        n_types=int(ids.size),
        token_ids=ids,
        log_frequency=log_f,
        distance=dist,
        occurrences=occ,
    )


def _token_ids(token_ids: Any, n: int) -> np.ndarray:
    ids = as_vector(token_ids, "token_ids", length=n)
    if not np.issubdtype(ids.dtype, np.integer):
        if not np.all(np.mod(ids, 1) == 0):
            raise InputError(
                f"token_ids has dtype {ids.dtype} with fractions; integer ids are accepted"
            )
        ids = ids.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise InputError(f"token_ids contains {int(ids.min())}; non-negative ids are accepted")
    return ids.astype(np.int64)


def frequency_distance_correlation(
    x: Any, token_ids: Any, counts: Any, min_occurrences: int = 2
) -> FrequencyDistance:
    """Pearson r between log corpus frequency and mean per-occurrence distance to the centroid.

    Args:
        x: Activations, shape (n, d): one row per token occurrence.
        token_ids: The token id of each row, shape (n,).
        counts: Corpus count per token id: a mapping ``id -> count`` or an array indexed by id.
            Types with no (or zero) count are left out, as their log frequency is undefined.
        min_occurrences: Types occurring fewer times among the rows are left out.

    Returns:
        A :class:`FrequencyDistance` with one entry per qualifying type, ordered by id.

    Raises:
        ConfigError: ``min_occurrences`` is not a positive integer.
        InputError: Bad shapes or values, or fewer than 3 qualifying types.
    """
    min_occurrences = check_positive_int(min_occurrences, "min_occurrences")
    xm = as_matrix(x, min_rows=2)
    ids = _token_ids(token_ids, xm.shape[0])
    dist = np.linalg.norm(xm - xm.mean(axis=0), axis=1)
    types, inverse, occ = np.unique(ids, return_inverse=True, return_counts=True)
    mean_dist = np.bincount(inverse, weights=dist, minlength=types.size) / occ
    freq = _lookup_counts(counts, types)
    keep = (occ >= min_occurrences) & (freq > 0)
    return _result(types[keep], freq[keep], mean_dist[keep], occ[keep])


def embedding_frequency_correlation(embeddings: Any, counts: Any) -> FrequencyDistance:
    """Pearson r between log corpus frequency and each embedding's distance to the table centroid.

    Args:
        embeddings: An input embedding table, shape (vocab, d); row ``t`` is token id ``t``.
        counts: Corpus count per token id (mapping or array). Only tokens with count > 0 are used;
            the centroid is that of the whole table.

    Returns:
        A :class:`FrequencyDistance` over the seen tokens (``occurrences`` is ``None``).

    Raises:
        InputError: Bad shapes or values, or fewer than 3 seen tokens.
    """
    table = as_matrix(embeddings, "embeddings", min_rows=3)
    dist = np.linalg.norm(table - table.mean(axis=0), axis=1)
    ids = np.arange(table.shape[0])
    freq = _lookup_counts(counts, ids)
    keep = freq > 0
    return _result(ids[keep], freq[keep], dist[keep], None)
