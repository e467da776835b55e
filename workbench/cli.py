"""The ``workbench`` command, thin over the library.

Bad input exits with status 2 and one line ``error: ...`` on stderr (a traceback only with
``--debug``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any


def _add_formats(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--formats",
        default=None,
        help="figure formats: auto (HTML, plus PDF/SVG/PNG when Chromium is found; the default) "
        "or a comma list of pdf,svg,png,html (refused without Chromium)",
    )


def _add_models(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("models", help="list the embedded models and the architectures hooks/ knows")


def _add_capture(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("capture", help="stream activations to an ActivationStore (resumable)")
    p.add_argument("--model", required=True, help="minilm, tiny-lm, a local folder or an HF id")
    p.add_argument("--revision", default=None, help="checkpoint, e.g. step-200 or step1000")
    p.add_argument(
        "--sites", required=True, help="comma list: resid_post, attn_out.3, final_norm, ..."
    )
    p.add_argument("--layers", default="all", help="all, 0,3,-1 or 2:6 (default: all)")
    p.add_argument(
        "--texts", required=True, help="builtin:pydoc, a .txt (one text a line) or .jsonl file"
    )
    p.add_argument("--n-texts", type=int, default=None, help="use only the first N texts")
    p.add_argument("--out", required=True, help="store folder (rerun the same command to resume)")
    p.add_argument("--positions", default="all", choices=["all", "last", "mean"])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=None)
    p.add_argument(
        "--dtype", default=None, help="stored dtype: float32 (default), float16, bfloat16"
    )
    p.add_argument("--device", default="auto")
    p.add_argument("--shard-mb", type=float, default=256.0, help="target shard size in MiB")
    p.add_argument(
        "--device-map",
        default=None,
        help="place the model by blocks: auto, balanced, sequential, or a JSON {module: device}",
    )
    p.add_argument(
        "--max-memory", default=None, help="per device, e.g. cpu=8GiB,cuda:0=70GiB (device map)"
    )
    p.add_argument("--offload-folder", default=None, help="where blocks that fit nowhere go")
    p.add_argument(
        "--model-dtype", default=None, help="the model's dtype: bfloat16, float16, auto, ..."
    )
    p.add_argument(
        "--order",
        default="auto",
        choices=["auto", "batch", "layer"],
        help="layer-major reads offloaded weights once (auto: when blocks are on disk)",
    )


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an embedded model (tiny-lm) with checkpoints")
    p.add_argument("name", choices=["tiny-lm"])
    p.add_argument(
        "--steps", type=int, default=None, help="optimizer steps (default: the default tiny-lm's)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder (default: the cache load_model uses)")


def _add_params(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help=text,
    )


def _add_backend(p: argparse.ArgumentParser) -> None:
    """The options of commands that fan runs out: sweep and replicate."""
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    p.add_argument("--workers", type=int, default=1, help="worker processes / local Ray CPUs")
    p.add_argument("--address", default=None, help="an existing Ray cluster (--backend ray)")
    p.add_argument("--timeout", type=float, default=None, help="per-cell timeout in seconds")
    _add_formats(p)


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute an analysis notebook with papermill")
    p.add_argument("analysis", help="anisotropy, geometric_memory, concept_oscillation, ...")
    _add_params(p, "a notebook parameter; VALUE is plain data: 3, 0.5, true, null, [1, 2], text")
    p.add_argument("--out", required=True, help="run folder: notebook, results.json, figures/")
    p.add_argument("--timeout", type=float, default=None, help="per-cell timeout in seconds")
    p.add_argument(
        "--strict",
        action="store_true",
        help="a training that misses its criterion fails the run (default: a warning, recorded)",
    )
    _add_formats(p)


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="one run per grid point, resumable, then one table")
    p.add_argument("analysis")
    p.add_argument("--grid", required=True, help="YAML: parameter -> list of values (+ fixed:)")
    p.add_argument("--out", required=True, help="sweep folder (rerun the command to resume)")
    _add_backend(p)


def _add_replicate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replicate", help="one run per seed (and CPU kernel level); is each claim robust?"
    )
    p.add_argument("analysis")
    p.add_argument("--seeds", required=True, help="e.g. 0-9, 0,3,5 or 0-2,7")
    _add_params(p, "a parameter fixed in every run (as for workbench run)")
    p.add_argument(
        "--cpu-kernels",
        default=None,
        help="comma list of default, avx2, avx512: run every seed at each level the CPU has "
        "(ATEN_CPU_CAPABILITY); default: the CPU's own level",
    )
    p.add_argument("--out", required=True, help="replication folder (rerun the command to resume)")
    _add_backend(p)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run every analysis notebook on its defaults; figure gallery")
    p.add_argument("--runs", default="runs/demo", help="run folders (default runs/demo)")
    p.add_argument("--figures", default="figures", help="gallery folder (default figures)")
    p.add_argument("--only", default=None, help="comma list of analyses")
    p.add_argument("--timeout", type=float, default=None, help="per-cell timeout in seconds")
    _add_formats(p)


def _add_doctor(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("doctor", help="report versions, devices, Chromium, caches and optional parts")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``workbench`` command."""
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_models,
        _add_capture,
        _add_train,
        _add_run,
        _add_sweep,
        _add_replicate,
        _add_demo,
        _add_doctor,
    ):
        add(sub)
    return parser


def cmd_models(_args: argparse.Namespace) -> int:
    """`workbench models`: embedded models and known architecture families."""
    from workbench.models import EMBEDDED
    from workbench.sites import families

    lines = ["embedded models:"]
    lines += [f"  {name:<10} {about}" for name, about in EMBEDDED.items()]
    lines.append("architecture families (hooks/*.toml):")
    for fam in families().values():
        lines.append(f"  {fam.name:<10} model types: {', '.join(fam.model_types)}")
        lines.append(f"  {'':<10} sites: {', '.join(fam.sites)}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    """`workbench capture`: stream activations to an ActivationStore."""
    from workbench import capture, load_model
    from workbench.inputs import read_texts

    texts = read_texts(args.texts, args.n_texts)  # fail on a bad source before loading a model
    placement = _placement_args(args)
    subject = load_model(args.model, revision=args.revision, device=args.device, **placement)
    sys.stdout.write(_capture_plan(subject, texts, args))
    sys.stdout.flush()
    store = capture(
        subject,
        texts,
        sites=args.sites,
        layers=args.layers,
        positions=args.positions,
        batch_size=args.batch_size,
        max_length=args.max_length,
        dtype=args.dtype,
        out=args.out,
        shard_bytes=int(args.shard_mb * 2**20),
        order=args.order,
    )
    sys.stdout.write(f"{store}\n")
    return 0


def _placement_args(args: argparse.Namespace) -> dict[str, Any]:
    """``load_model``'s placement keywords from ``--device-map``, ``--max-memory``, ... flags."""
    from workbench.errors import ConfigError

    kwargs: dict[str, Any] = {}
    if args.model_dtype is not None:
        kwargs["dtype"] = args.model_dtype
    if args.device_map is not None:
        device_map: Any = args.device_map
        if device_map.lstrip().startswith("{"):
            try:
                device_map = json.loads(device_map)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"--device-map is not a JSON object: {exc.msg}") from None
        kwargs["device_map"] = device_map
    if args.max_memory is not None:
        memory = {}
        for item in args.max_memory.split(","):
            device, sep, size = item.partition("=")
            if not sep or not device.strip() or not size.strip():
                raise ConfigError(
                    f"--max-memory item {item!r} is not DEVICE=SIZE (e.g. cpu=8GiB,cuda:0=70GiB)"
                )
            memory[device.strip()] = size.strip()
        kwargs["max_memory"] = memory
    if args.offload_folder is not None:
        kwargs["offload_folder"] = args.offload_folder
    return kwargs


def _capture_plan(subject: Any, texts: Sequence[str], args: argparse.Namespace) -> str:
    """What a capture will do, before it runs: placement by block and the store's size."""
    from workbench.capturing import count_rows, estimate_bytes
    from workbench.devices import format_bytes

    lines = [f"placement: {subject.placement_summary()}"]
    if subject.is_placed:
        for module, where in subject.placement.items():
            offloaded = " (offloaded: read from disk on each use)" if where == "disk" else ""
            lines.append(f"  {module or '(model)'} -> {where}{offloaded}")
    n_rows = count_rows(subject, texts, positions=args.positions, max_length=args.max_length)
    n_sites = len(subject.expand(args.sites, args.layers))
    size = estimate_bytes(subject, n_rows, args.sites, args.layers, args.dtype)
    lines.append(
        f"store: about {format_bytes(size)} ({n_rows} rows x {n_sites} sites, "
        f"{args.dtype or 'float32'}) at {args.out}"
    )
    return "\n".join(lines) + "\n"


def cmd_train(args: argparse.Namespace) -> int:
    """`workbench train tiny-lm`: train the embedded causal LM with checkpoints."""
    from workbench.models.tiny_lm import TinyLMConfig, ensure_tiny_lm, train_tiny_lm

    config = TinyLMConfig(**({} if args.steps is None else {"steps": args.steps}), seed=args.seed)
    # into --out, or into the cache (once: a cached model of the same recipe is reused)
    out = train_tiny_lm(config, out=args.out) if args.out else ensure_tiny_lm(config)
    sys.stdout.write(f"{out}\n")
    return 0


def _raw_params(pairs: Sequence[Sequence[str]]) -> dict[str, str]:
    from workbench.runner.errors import ParameterError

    raw: dict[str, str] = {}
    for name, value in pairs:
        if name in raw:
            raise ParameterError(f"parameter {name!r} given twice")
        raw[name] = value
    return raw


def cmd_run(args: argparse.Namespace) -> int:
    """`workbench run`: execute one analysis notebook."""
    from workbench.criteria import STRICT_ENV
    from workbench.runner.run import run_analysis

    raw = _raw_params(args.param)
    result = run_analysis(
        args.analysis,
        {},
        args.out,
        raw=raw,
        timeout=args.timeout,
        formats=args.formats,
        env={STRICT_ENV: "1"} if args.strict else None,  # a missed criterion fails the run
    )
    if not result.ok:
        sys.stderr.write(
            f"error: {args.analysis} failed: {result.failure.describe()}; "
            f"partial notebook: {result.notebook}\n"
        )
        return 1
    sys.stdout.write(f"{result.results} ({result.seconds:.1f} s)\n")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """`workbench sweep`: one run per grid point, then one table."""
    from workbench.runner.grid import load_grid
    from workbench.runner.sweep import run_sweep

    grid = load_grid(args.grid)
    result = run_sweep(
        args.analysis,
        grid,
        args.out,
        backend=args.backend,
        workers=args.workers,
        address=args.address,
        timeout=args.timeout,
        formats=args.formats,
    )
    lines = [
        f"{len(result.ran)} ran, {len(result.skipped)} already done, {len(result.failed)} failed",
        *(f"  failed {pid}: {msg}" for pid, msg in result.failed.items()),
        *(f"  {path}" for path in result.tables),
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 1 if result.failed else 0


def cmd_replicate(args: argparse.Namespace) -> int:
    """`workbench replicate`: one run per seed (and kernel level), then each claim's verdict."""
    from workbench.runner.replicate import parse_seeds, replicate

    result = replicate(
        args.analysis,
        parse_seeds(args.seeds),
        args.out,
        raw=_raw_params(args.param),
        cpu_kernels=args.cpu_kernels,
        backend=args.backend,
        workers=args.workers,
        address=args.address,
        timeout=args.timeout,
        formats=args.formats,
    )
    sys.stdout.write("\n".join(result.lines()) + "\n")
    return 1 if result.failed else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """`workbench demo`: every analysis on its defaults, then the gallery."""
    import time

    from workbench.runner.demo import DemoProgress, run_demo

    t0 = time.perf_counter()
    only = [a.strip() for a in args.only.split(",") if a.strip()] if args.only else None
    result = run_demo(
        args.runs,
        args.figures,
        only=only,
        timeout=args.timeout,
        formats=args.formats,
        progress=DemoProgress(sys.stdout),  # each notebook's lines as they happen, flushed
    )
    lines = []
    if result.failed:
        lines.append(f"failed: {', '.join(result.failed)}")
    from workbench.figures import static_export_problem

    problem = static_export_problem()
    if problem and args.formats in (None, "auto"):
        lines.append(f"figures are interactive HTML only: {problem}")
    lines.append(f"{result.index} ({time.perf_counter() - t0:.0f} s in all)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 1 if result.failed else 0


def cmd_doctor(_args: argparse.Namespace) -> int:
    """`workbench doctor`: the environment report (always exits 0)."""
    from workbench.doctor import format_table, rows

    sys.stdout.write(format_table(rows()) + "\n")
    return 0


COMMANDS = {
    "models": cmd_models,
    "capture": cmd_capture,
    "train": cmd_train,
    "run": cmd_run,
    "sweep": cmd_sweep,
    "replicate": cmd_replicate,
    "demo": cmd_demo,
    "doctor": cmd_doctor,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` console script.

    SIGINT and SIGTERM stop the command and everything it started (workers, kernels, a local Ray
    cluster; see :mod:`workbench.runner.lifecycle`), print one line naming the command to rerun,
    and exit with 130 (SIGINT) or 143 (SIGTERM).
    """
    from workbench.errors import WorkbenchError
    from workbench.runner.lifecycle import Interrupted, interrupts, stop_children

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from workbench.models.loading import quiet_transformers

    quiet_transformers()
    with interrupts():  # a second signal while stopping is ignored: the stopping is bounded
        try:
            return COMMANDS[args.command](args)
        except WorkbenchError as exc:
            if args.debug:
                raise
            sys.stderr.write(f"error: {exc}\n")
            return 2
        except KeyboardInterrupt as exc:
            stop_children()  # whatever is left (a Chromium exporting a figure, a kernel)
            sys.stderr.write(f"{interrupted_line(args.command, argv)}\n")
            return exc.exit_code if isinstance(exc, Interrupted) else 130


RESUMABLE = frozenset({"sweep", "replicate", "capture"})
"""Commands whose rerun skips what is finished (the others start over)."""


def interrupted_line(command: str, argv: Sequence[str]) -> str:
    """The line an interrupted command prints: how to resume (or redo) it."""
    import shlex

    again = shlex.join(["workbench", *argv])
    if command in RESUMABLE:
        return f"interrupted: rerun the same command to resume: {again}"
    return f"interrupted: rerun the same command to start again: {again}"


if __name__ == "__main__":
    sys.exit(main())
