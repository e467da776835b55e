"""``probe_sweep``: cross-validated probe accuracy per site, with a control and selectivity.

For each site (layer), ``seeds`` repetitions of ``cv``-fold cross-validation fit a probe on the
task labels and on control labels over the same folds (see :mod:`workbench.probes.folds`);
selectivity is task minus control accuracy (Hewitt & Liang, 2019).

Why it is fast. A sweep fits ``sites x seeds x cv x 2`` probes on overlapping data, so work is
shared along that structure rather than repeated:

* one preconditioner per site (a Cholesky factor of the rows' covariance, see
  :mod:`workbench.probes._solver`), shared by every fold, seed and the control: L-BFGS then needs
  tens of iterations instead of hundreds;
* warm starts: each fit starts from the site's previous fit (another fold or seed: most rows
  are shared), and a site's first fit from the previous site's solution when that beats the
  class-prior start (adjacent layers of a residual stream are similar); task and control apart;
* one permuted copy of a site per seed, so that a fold's training rows are two views of it and no
  fold is copied;
* float32 throughout, on the GPU when there is one; mass-mean probes need one pass per seed (the
  per-fold class sums are subtracted from the totals).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from sklearn.base import clone
from torch import Tensor
from tqdm.auto import tqdm

from workbench.errors import ProbeError, SiteError
from workbench.probes import _data
from workbench.probes._runners import GenericRunner, LinearRunner, MassMeanRunner
from workbench.probes.folds import control_task_labels, cv_folds, shuffled_labels
from workbench.probes.linear import LinearProbe
from workbench.probes.mass_mean import MassMeanProbe
from workbench.probes.results import COLUMNS, ProbeSweepResult, site_layer
from workbench.sites import parse_layers
from workbench.store import ActivationStore

Control = Literal["shuffled", "control_task"]
Pool = Literal["expand", "mean", "last"]
CONTROLS = ("shuffled", "control_task")
POOLS = ("expand", "mean", "last")


class _Source:
    """Sites, layout and rows of an ``Activations``, an ``ActivationStore`` or a mapping."""

    def __init__(self, acts: Any, token_ids: Any) -> None:
        self.acts = acts
        if isinstance(acts, ActivationStore):
            self.sites = acts.sites
            self.n_rows = acts.n_rows
            self.offsets = acts.offsets.numpy().astype(np.int64)
            tokens = acts.token_ids.numpy()
        elif isinstance(acts, Mapping) and hasattr(acts, "offsets"):
            self.sites = list(acts)
            self.offsets = np.asarray(acts.offsets, dtype=np.int64)
            self.n_rows = int(self.offsets[-1])
            tokens = np.asarray(acts.token_ids)
        elif isinstance(acts, Mapping):
            self.sites = list(acts)
            if not self.sites:
                raise ProbeError("no sites to probe: the mapping is empty")
            self.n_rows = len(acts[self.sites[0]])
            self.offsets = np.arange(self.n_rows + 1)
            tokens = None
        else:
            raise ProbeError(
                f"cannot probe a {type(acts).__name__}; pass Activations, an ActivationStore or "
                "a mapping of site name to (n_rows, d) array"
            )
        self.token_ids = tokens if token_ids is None else np.asarray(token_ids)
        if self.token_ids is not None and len(self.token_ids) != self.n_rows:
            raise ProbeError(f"{len(self.token_ids)} token ids for {self.n_rows} rows")

    def load(self, site: str) -> Tensor:
        x = self.acts.read(site) if isinstance(self.acts, ActivationStore) else self.acts[site]
        x = _data.as_float32(x)
        if x.ndim != 2 or len(x) != self.n_rows:
            raise ProbeError(
                f"site {site!r} has shape {tuple(x.shape)}; ({self.n_rows}, d) is expected"
            )
        return x


def select_sites(
    available: Sequence[str],
    sites: str | Sequence[str] | None,
    layers: str | int | Sequence[int] | None,
) -> list[str]:
    """Site names to probe, in the order of ``available``.

    Args:
        available: The captured sites.
        sites: Names (``"resid_post.3"``), kinds (``"resid_post"``, every captured layer of it),
            a comma-separated string of either, or ``None`` for every captured site.
        layers: Keep only these layers of per-layer kinds (``"all"``, ``"0,3,-1"``, ``"2:6"``,
            ints); negative indices count from the last captured layer.

    Raises:
        SiteError: An unknown site or kind, or a layer that was not captured.
    """
    if isinstance(sites, str):
        sites = [s.strip() for s in sites.split(",") if s.strip()]
    kinds: dict[str, list[int]] = {}
    for name in available:
        layer = site_layer(name)
        if layer is not None:
            kinds.setdefault(name.rpartition(".")[0], []).append(layer)
    chosen: set[str] = set()
    for name in available if sites is None else sites:
        if name in available and (sites is not None or layers is None):
            chosen.add(name)
        elif name in kinds and layers is None:
            chosen.update(f"{name}.{layer}" for layer in kinds[name])
        elif name in kinds:
            top = max(kinds[name]) + 1
            wanted = parse_layers(layers, top)
            lost = sorted(set(wanted) - set(kinds[name]))
            if lost:
                have = ", ".join(map(str, sorted(kinds[name])))
                raise SiteError(f"layer {lost[0]} of {name!r} was not captured; captured: {have}")
            chosen.update(f"{name}.{layer}" for layer in wanted)
        elif sites is not None:
            raise SiteError(f"unknown site {name!r}; captured: {', '.join(available)}")
    if sites is None and layers is not None:
        for kind in kinds:
            chosen.update(select_sites(available, [kind], layers))
    if not chosen:
        raise SiteError(f"no site selected; captured: {', '.join(available)}")
    return [name for name in available if name in chosen]


def probe_sweep(
    acts: Any,
    labels: Any,
    *,
    sites: str | Sequence[str] | None = None,
    layers: str | int | Sequence[int] | None = None,
    probe: str | Any = "linear",
    cv: int = 5,
    seeds: int = 3,
    control: Control | None = "shuffled",
    pool: Pool = "expand",
    groups: Literal["text", "row"] = "text",
    token_ids: Any = None,
    random_state: int = 0,
    warm_start: bool = True,
    progress: bool = True,
) -> ProbeSweepResult:
    """Cross-validated probe accuracy for each site, with a control task and selectivity.

    Args:
        acts: ``Activations``, an ``ActivationStore`` (one site in memory at a time), or a mapping
            of site name to ``(n_rows, d)`` array or tensor.
        labels: One label per row (token), or one per text. Per-text labels are repeated over the
            text's rows (``pool="expand"``), or the rows are pooled into one per text
            (``pool="mean"`` or ``"last"``).
        sites: Sites or kinds to probe (see :func:`select_sites`); ``None``: all.
        layers: Layers of per-layer kinds to keep.
        probe: ``"linear"`` (:class:`LinearProbe` defaults), ``"mass_mean"``, a configured
            :class:`LinearProbe` or :class:`MassMeanProbe` (fast paths), or any scikit-learn
            classifier (cloned and fitted per fold).
        cv: Folds per seed.
        seeds: Repetitions with new folds (and new control labels); intervals are over seeds.
        control: ``"shuffled"`` labels, Hewitt & Liang's ``"control_task"`` (a random label per
            token type, from ``acts.token_ids``), or ``None``.
        pool: How per-text labels meet per-token rows (see ``labels``).
        groups: Keep each text within one fold (``"text"``) or split rows freely (``"row"``).
        token_ids: Token id per row, for a mapping input with ``control="control_task"``.
        random_state: Base seed of the folds, the control labels and the preconditioner sample.
        warm_start: Start each linear fit from the best earlier solution (same result, faster).
        progress: Show a progress bar.

    Returns:
        The per-fold scores, with a summary, figure and dict form.

    Raises:
        SiteError: An unknown site or layer.
        ProbeError: Labels that match neither the rows nor the texts, fewer than two classes,
            or a bad option.
    """
    source = _Source(acts, token_ids)
    names = select_sites(source.sites, sites, layers)
    if control is not None and control not in CONTROLS:
        raise ProbeError(f"unknown control {control!r}; use 'shuffled', 'control_task' or None")
    if pool not in POOLS:
        raise ProbeError(f"unknown pool {pool!r}; use 'expand', 'mean' or 'last'")
    if not (isinstance(seeds, int) and seeds >= 1):
        raise ProbeError(f"seeds={seeds!r}; an integer >= 1 is accepted")
    y, given = _data.align_labels(labels, source.n_rows, source.offsets)
    offsets, row_tokens, pooled = source.offsets, source.token_ids, None
    if given == "text" and pool != "expand" and len(offsets) - 1 != source.n_rows:
        pooled = pool
        y = np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels)
        if row_tokens is not None:
            row_tokens = row_tokens[offsets[1:] - 1] if pool == "last" else None
        offsets = np.arange(len(y) + 1)
    _data.check_discrete(y)
    classes, codes = np.unique(y, return_inverse=True)
    _data.check_classes(classes)
    runner = _make_runner(probe, warm_start)
    folds = [
        cv_folds(codes, offsets, cv=cv, seed=s, groups=groups, random_state=random_state)
        for s in range(seeds)
    ]
    tasks = {"probe": [codes] * seeds}
    if control == "control_task":
        if row_tokens is None:
            raise ProbeError(
                "control='control_task' needs token ids: pass Activations or an ActivationStore "
                "captured with positions 'all' or 'last', or token_ids=..."
            )
        tasks["control"] = [
            control_task_labels(row_tokens, codes, seed=s, random_state=random_state)
            for s in range(seeds)
        ]
    elif control == "shuffled":
        tasks["control"] = [
            shuffled_labels(codes, offsets, seed=s, groups=groups, random_state=random_state)
            for s in range(seeds)
        ]
    records: list[tuple[Any, ...]] = []
    warm: dict[tuple[str, int, int], Any] = {}
    for site in tqdm(names, desc="probe sweep", unit="site", disable=not progress):
        x = source.load(site)
        if pooled is not None:
            x = _pool(x, source.offsets, pooled)
        state = runner.prepare(x, len(classes), cv, random_state)
        for s in range(seeds):
            order = np.argsort(folds[s], kind="stable")
            bounds = np.searchsorted(folds[s][order], np.arange(cv + 1))
            xs = state.permute(torch.from_numpy(order))
            for task, task_labels in tasks.items():
                ys = torch.from_numpy(task_labels[s][order].astype(np.int64))
                results = runner.folds(state, xs, ys, bounds, warm, task, s)
                for f, (acc, n_iter) in enumerate(results):
                    n_test = int(bounds[f + 1] - bounds[f])
                    records.append(
                        (site, site_layer(site), s, f, task, acc, len(x) - n_test, n_test, n_iter)
                    )
    scores = pd.DataFrame.from_records(records, columns=list(COLUMNS))
    return ProbeSweepResult(
        scores=scores,
        probe=runner.name,
        cv=cv,
        seeds=seeds,
        control=control,
        chance=float(np.bincount(codes).max() / len(codes)),
        n_rows=len(codes),
        n_classes=len(classes),
        labels=given,
        params={
            "pool": pool if given == "text" else None,
            "groups": groups,
            "random_state": random_state,
            "estimator": repr(runner.estimator),
        },
    )


def _pool(x: Tensor, offsets: np.ndarray, how: str) -> Tensor:
    if how == "last":
        return x[torch.from_numpy(offsets[1:] - 1)]
    index = torch.from_numpy(np.repeat(np.arange(len(offsets) - 1), np.diff(offsets)))
    sums = torch.zeros(len(offsets) - 1, x.shape[1], dtype=torch.float64)
    sums.index_add_(0, index, x.double())
    return (sums / torch.from_numpy(np.diff(offsets))[:, None]).float()


def _make_runner(probe: Any, warm_start: bool) -> Any:
    if isinstance(probe, str):
        if probe == "linear":
            return LinearRunner(LinearProbe(), warm_start)
        if probe == "mass_mean":
            return MassMeanRunner(MassMeanProbe())
        raise ProbeError(
            f"unknown probe {probe!r}; use 'linear', 'mass_mean' or a scikit-learn classifier"
        )
    if type(probe) is LinearProbe:
        return LinearRunner(probe, warm_start)
    if type(probe) is MassMeanProbe:
        return MassMeanRunner(probe)
    if hasattr(probe, "fit") and hasattr(probe, "predict"):
        return GenericRunner(clone(probe))
    raise ProbeError(
        f"probe {probe!r} is not a classifier; use 'linear', 'mass_mean' or an estimator"
    )
