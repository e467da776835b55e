"""Benchmark workbench.probes against scikit-learn, measuring every ratio in this one run.

    python bench/probes.py           # 12 layers x 50,000 rows x 768, 10 classes, 5-fold CV
    python bench/probes.py --quick   # 4 layers x 10,000 rows x 256, a few minutes

The data imitate a residual stream (seeded): 10 class means along random directions, a signal that
grows with depth, and anisotropic noise that drifts from layer to layer (each layer keeps most of
the previous layer's noise and adds fresh noise, as residual updates do): per-dimension scales
spread log-normally and a low-rank component shared by all dimensions. Probe accuracy rises from
about 0.6 to 0.9 over the layers. The anisotropy is mild on purpose: scikit-learn must converge
for the accuracies to be comparable, and on stronger anisotropy it needs about a thousand
iterations per fit (the ``rogue dims`` row shows one such fit).

Rows:

* ``sweep``: :func:`workbench.probes.probe_sweep` with ``LinearProbe(C=1)`` (5 folds, one seed, no
  control: the same 60 fits as the peer) against ``sklearn.linear_model.LogisticRegression(C=1,
  solver="lbfgs")`` fitted and scored on the same folds (from ``cv_folds``), one fit at a time as
  a user would. Both minimize ``mean cross-entropy + ||W||^2 / (2 C n_train)`` (scikit-learn's
  ``C * sum CE + ||W||^2 / 2`` divided by ``C n_train``) with an unpenalized intercept, on the same
  float32 arrays; scikit-learn runs with its default ``tol=1e-4`` and ``max_iter=1000`` so that it
  converges. Target: at least 3x faster, mean CV accuracy within 0.5 points at every layer.
* ``no warm starts``: the same sweep starting every fit from the class-prior intercept (shows what
  the warm starts contribute; the preconditioner is still shared per layer).
* ``rogue dims`` (one fold): activations closer to real ones, with log-normal scales of spread 0.5
  and three dimensions with a large mean and variance (as in GPT-2's residual stream), fitted once
  by each side; the penalized objective each reaches shows they solve the same problem.
* ``full sweep``: what a user runs, 3 seeds x 5 folds with a shuffled-label control (6x the fits),
  time only; and the mass-mean probe's sweep, time only.

Threads: both sides get the same number of threads (``--threads``, default 1: torch's intra-op
pool and, through threadpoolctl, scikit-learn's BLAS). On a small machine shared with other jobs,
two-thread pools stall on every operation whose partner thread is descheduled, which says more
about the neighbours than about either library.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from workbench.probes import LinearProbe, cv_folds, probe_sweep

ROWS: list[tuple[str, str, str, str, str, str]] = []
C = 1.0
CV = 5
SIGNAL = (1.8, 3.0)
"""Class-mean separation (in noise units, before anisotropy) at the first and last layer."""


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall time of one call, and its result."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def row(name: str, ours: str, peer: str, ratio: str, detail: str, target: str, ok: bool | None):
    status = "" if ok is None else ("PASS" if ok else "MISS")
    ROWS.append((name, ours, peer, ratio, detail, f"{target} {status}".strip()))


def residual_layers(
    n: int,
    d: int,
    k: int,
    layers: int,
    seed: int = 0,
    signal: tuple[float, float] = SIGNAL,
    spread: float = 0.3,
    rogue: float = 0.0,
    rank: int = 16,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Synthetic residual-stream activations (float32) for ``layers`` layers, and labels.

    Per-dimension noise scales are ``exp(spread * N(0, 1))``; three "rogue" dimensions get a mean
    of ``rogue`` and a scale ``1 + rogue / 4`` times larger; a rank-``rank`` component is shared by
    all dimensions.
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    directions = rng.normal(size=(k, d)).astype(np.float32) / np.sqrt(d)
    scales = np.exp(rng.normal(size=d) * spread).astype(np.float32)
    dims = rng.choice(d, size=3, replace=False)
    scales[dims] *= 1 + rogue / 4
    offset = rng.normal(size=d).astype(np.float32)
    offset[dims] += rogue
    mixing = (rng.normal(size=(rank, d)) / np.sqrt(rank)).astype(np.float32)
    noise = rng.standard_normal((n, d), dtype=np.float32)
    shared = rng.standard_normal((n, rank), dtype=np.float32)
    out = {}
    for layer in range(layers):
        if layer:
            noise *= np.float32(0.8)
            noise += np.float32(0.6) * rng.standard_normal((n, d), dtype=np.float32)
            shared *= np.float32(0.8)
            shared += np.float32(0.6) * rng.standard_normal((n, rank), dtype=np.float32)
        strength = signal[0] + (signal[1] - signal[0]) * layer / max(layers - 1, 1)
        x = noise * scales + shared @ mixing + offset + np.float32(strength) * directions[y]
        out[f"resid_post.{layer}"] = x.astype(np.float32)
    return out, y


def sklearn_sweep(data: dict[str, np.ndarray], y: np.ndarray, folds: np.ndarray) -> tuple:
    """Per-layer mean CV accuracy and mean iterations of LogisticRegression on the given folds."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    accuracy, iterations, unconverged = {}, [], 0
    for site, x in data.items():
        scores = []
        for f in range(CV):
            test = folds == f
            model = LogisticRegression(C=C, solver="lbfgs", max_iter=1000)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                model.fit(x[~test], y[~test])
            unconverged += any(issubclass(w.category, ConvergenceWarning) for w in caught)
            scores.append(model.score(x[test], y[test]))
            iterations.append(int(model.n_iter_[0]))
        accuracy[site] = float(np.mean(scores))
    return accuracy, float(np.mean(iterations)), unconverged


def bench_sweep(n: int, d: int, k: int, layers: int) -> None:
    t_data, (data, y) = timed(lambda: residual_layers(n, d, k, layers))
    print(f"data: {layers} layers x {n} x {d}, {k} classes, generated in {t_data:.1f}s", flush=True)
    folds = cv_folds(y, cv=CV, seed=0)
    probe = LinearProbe(C=C, device="cpu")

    def ours(warm_start: bool = True):
        return probe_sweep(
            data, y, cv=CV, seeds=1, control=None, probe=probe, warm_start=warm_start,
            progress=False,
        )  # fmt: skip

    small = {"resid_post.0": data["resid_post.0"][:2000]}
    probe_sweep(small, y[:2000], cv=2, seeds=1, control=None, probe=probe, progress=False)
    t_ours, result = timed(ours)
    print(f"ours: {t_ours:.1f}s", flush=True)
    t_peer, (peer_acc, peer_iter, unconverged) = timed(lambda: sklearn_sweep(data, y, folds))
    print(f"scikit-learn: {t_peer:.1f}s", flush=True)
    summary = result.summary().set_index("site")
    diffs = {s: 100 * (summary.loc[s, "accuracy"] - peer_acc[s]) for s in data}
    worst = max(abs(v) for v in diffs.values())
    ratio = t_peer / t_ours
    ours_iter = float(result.scores["n_iter"].mean())
    accs = summary["accuracy"]
    row(
        f"sweep {layers} layers x {CV} folds, {n}x{d}, {k} classes",
        f"{t_ours:.1f}s",
        f"{t_peer:.1f}s",
        f"{ratio:.1f}x",
        f"acc {accs.iloc[0]:.3f}..{accs.iloc[-1]:.3f}, max |diff| {worst:.2f} pts; "
        f"iters {ours_iter:.0f} vs {peer_iter:.0f} ({unconverged} peer fits unconverged)",
        ">=3x, |acc diff| <= 0.5 pts",
        ratio >= 3 and worst <= 0.5,
    )
    print("\nper layer: mean CV accuracy (ours, scikit-learn, difference in points)")
    for site in data:
        print(f"  {site:<14} {summary.loc[site, 'accuracy']:.4f}  {peer_acc[site]:.4f}  "
              f"{diffs[site]:+.2f}")  # fmt: skip
    print(flush=True)

    t_cold, cold = timed(lambda: ours(warm_start=False))
    row(
        "  same, no warm starts",
        f"{t_cold:.1f}s",
        "-",
        f"{t_cold / t_ours:.2f}x ours",
        f"iters {cold.scores['n_iter'].mean():.0f}",
        "time only",
        None,
    )
    t_full, full = timed(
        lambda: probe_sweep(data, y, cv=CV, seeds=3, control="shuffled", probe=probe,
                            progress=False)
    )  # fmt: skip
    sel = full.summary()["selectivity"]
    row(
        f"full sweep: 3 seeds x {CV} folds + shuffled control ({len(full.scores)} fits)",
        f"{t_full:.1f}s",
        "-",
        "-",
        f"selectivity {sel.iloc[0]:.3f}..{sel.iloc[-1]:.3f}",
        "time only",
        None,
    )
    t_mm, mm = timed(
        lambda: probe_sweep(data, y, cv=CV, seeds=3, control="shuffled", probe="mass_mean",
                            progress=False)
    )  # fmt: skip
    acc = mm.summary()["accuracy"]
    row(
        "  same, mass-mean probe",
        f"{t_mm:.1f}s",
        "-",
        "-",
        f"acc {acc.iloc[0]:.3f}..{acc.iloc[-1]:.3f}",
        "time only",
        None,
    )


def penalized_loss(coef: np.ndarray, intercept: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """The shared objective ``mean CE + ||W||^2 / (2 C n)`` in float64 (two classes: one logit)."""
    logits = x.astype(np.float64) @ coef.T + intercept
    if logits.shape[1] == 1:
        logits = np.hstack([np.zeros_like(logits), logits])
    top = logits.max(1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(1)) + top[:, 0]
    ce = float(np.mean(lse - logits[np.arange(len(y)), y]))
    return ce + float((coef**2).sum()) / (2 * C * len(y))


def bench_rogue_fold(n: int, d: int, k: int) -> None:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    data, y = residual_layers(n, d, k, 1, signal=(SIGNAL[0],) * 2, spread=0.5, rogue=5.0)
    x = data["resid_post.0"]
    test = cv_folds(y, cv=CV, seed=0) == 0
    t_ours, ours = timed(lambda: LinearProbe(C=C, device="cpu").fit(x[~test], y[~test]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t_peer, peer = timed(lambda: LogisticRegression(C=C, max_iter=1000).fit(x[~test], y[~test]))
    gap = penalized_loss(ours.coef_, ours.intercept_, x[~test], y[~test]) - penalized_loss(
        peer.coef_, peer.intercept_, x[~test], y[~test]
    )
    diff = 100 * (ours.score(x[test], y[test]) - peer.score(x[test], y[test]))
    row(
        f"rogue dims, one fold, {int(test.sum() * (CV - 1))}x{d}",
        f"{t_ours:.1f}s",
        f"{t_peer:.1f}s",
        f"{t_peer / t_ours:.1f}x",
        f"acc diff {diff:+.2f} pts, objective ours - peer {gap:+.1e}; "
        f"iters {ours.n_iter_[0]} vs {peer.n_iter_[0]}",
        "time only",
        None,
    )


def print_table() -> None:
    head = ("benchmark", "ours", "peer", "peer/ours", "detail", "target")
    widths = [max(len(r[i]) for r in [head, *ROWS]) for i in range(len(head))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*head))
    print("  ".join("-" * w for w in widths))
    for r in ROWS:
        print(line.format(*r))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes)")
    parser.add_argument("--threads", type=int, default=1, help="threads for each side")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    print(
        f"cpus: {os.cpu_count()}, threads per side: {args.threads}, "
        f"load average: {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    started = time.perf_counter()
    with threadpool_limits(limits=args.threads):
        if args.quick:
            bench_sweep(10_000, 256, 10, 4)
            bench_rogue_fold(10_000, 256, 10)
        else:
            bench_sweep(50_000, 768, 10, 12)
            bench_rogue_fold(50_000, 768, 10)
    print()
    print_table()
    print(
        f"\ntotal {time.perf_counter() - started:.0f}s, "
        f"load average now {os.getloadavg()[0]:.1f} (peer/ours is a same-run ratio)"
    )


if __name__ == "__main__":
    main()
