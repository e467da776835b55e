"""How often the studies' trainings meet their criteria, beyond the defaults.

Every toy a study trains to a criterion (geometric memory's edge memorization, its control and its
path fine-tuning; the AcMAS agent LM; the concept-oscillation decoder) reports a missed criterion
as a shortfall (:mod:`workbench.criteria`) instead of failing the run. This benchmark counts the
shortfalls over graphs, sizes and seeds other than the defaults and prints, per setting, how many
runs met every criterion, with the trainings that missed and by how much.

Usage: ``python bench/convergence.py [--studies geometric_memory,acmas,concept_oscillation]
[--seeds 0-4] [--out convergence.json]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from workbench.errors import CriterionWarning
from workbench.runner.replicate import parse_seeds

GRAPHS: tuple[dict[str, Any], ...] = (
    {"graph": "path_star"},  # the default: 8 arms of 3 hops
    {"graph": "path_star", "degree": 12, "path_length": 4},
    {"graph": "tree", "degree": 3, "path_length": 3},
    {"graph": "grid", "n_nodes": 25},
    {"graph": "cycle", "n_nodes": 25},
    {"graph": "irregular", "n_nodes": 25},
)
"""Geometric-memory graphs: the default and five others (sizes and shapes)."""


def geometric_memory(seed: int, graph: dict[str, Any]) -> list[dict[str, Any]]:
    """The study's trainings on one graph (no UMAP, ingredients or in-context control)."""
    from workbench.analyses import geometric_memory as gm

    config = gm.GeometricMemoryConfig(
        seed=seed, incontext_epochs=0, ingredients=False, umap=False, device="cpu", **graph
    )
    result = gm.run(config, progress=False)
    return [s.to_dict() for s in result.shortfalls()]


def acmas(seed: int, setting: dict[str, Any]) -> list[dict[str, Any]]:
    """The toy agent LM trained to its criterion (no detection)."""
    from workbench.analyses.acmas import toy

    with tempfile.TemporaryDirectory() as tmp:
        toy.train_toy(toy.ToyConfig(seed=seed, **setting), Path(tmp) / "t", progress=False)
        record = json.loads((Path(tmp) / "t" / "training.json").read_text())
    if record["learned"]:
        return []
    return [{"training": "toy agent LM", "steps": record["steps"], "reached": record["accuracy"]}]


def concept_oscillation(seed: int, setting: dict[str, Any]) -> list[dict[str, Any]]:
    """The toy decoder trained to its KL criterion (no readouts)."""
    from workbench.analyses import concept_oscillation as co
    from workbench.analyses.concept_oscillation import study

    config = co.ConceptOscillationConfig(seed=seed, device="cpu", **setting)
    with tempfile.TemporaryDirectory() as tmp:
        _, summary = study.toy_model(config, Path(tmp), progress=False)
    if summary["converged"] is not False:
        return []
    return [
        {"training": "toy decoder", "steps": summary["steps"], "excess_kl": summary["excess_kl"]}
    ]


SETTINGS: dict[str, tuple[Any, tuple[dict[str, Any], ...]]] = {
    "geometric_memory": (geometric_memory, GRAPHS),
    "acmas": (acmas, ({}, {"lr": 1e-3}, {"n_layers": 2})),
    "concept_oscillation": (concept_oscillation, ({}, {"toy_steps": 1000})),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", default=",".join(SETTINGS))
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--out", default=None, help="write every run's shortfalls as JSON")
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    rows = []
    for name in args.studies.split(","):
        fn, settings = SETTINGS[name]
        for setting in settings:
            met, missed, t0 = 0, [], time.perf_counter()
            for seed in seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", CriterionWarning)
                    shortfalls = fn(seed, setting)
                met += not shortfalls
                missed += [{"seed": seed, **s} for s in shortfalls]
            seconds = time.perf_counter() - t0
            rows.append({"study": name, "setting": setting, "met": met, "runs": len(seeds),
                         "missed": missed, "seconds": round(seconds, 1)})  # fmt: skip
            trainings = sorted({m["training"] for m in missed})
            print(
                f"{name:<20} {json.dumps(setting):<50} {met}/{len(seeds)} met every criterion"
                + (f" (missed: {', '.join(trainings)})" if trainings else "")
                + f"  [{seconds:.0f} s]",
                flush=True,
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
