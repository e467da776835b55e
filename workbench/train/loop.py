"""The training loop: AdamW, warm-up and cosine decay, clipping, batches, checkpoints."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from workbench.errors import ConfigError
from workbench.train.checkpoints import Staging, cpu_state, save_state_dict
from workbench.train.config import TrainConfig
from workbench.train.result import Checkpoint, EvalRecord, TrainResult

Batch = Any
"""A tensor, or a tuple, list or dict of tensors (nested freely): what ``loss_fn`` receives."""
LossFn = Callable[[torch.nn.Module, Batch], torch.Tensor]
SampleFn = Callable[[int, torch.Generator], Batch]
EvalFn = Callable[[torch.nn.Module], Mapping[str, float]]
StopFn = Callable[[Mapping[str, float]], bool]
SaveFn = Callable[[torch.nn.Module, Path, dict[str, Any]], None]


def train(
    model: torch.nn.Module | Callable[[], torch.nn.Module],
    config: TrainConfig,
    *,
    loss_fn: LossFn,
    data: Batch | None = None,
    sample: SampleFn | None = None,
    evaluate: EvalFn | None = None,
    stop_when: StopFn | None = None,
    out: str | Path | None = None,
    save: SaveFn | None = None,
    record: Mapping[str, Any] | None = None,
    progress: bool = True,
    desc: str = "train",
) -> TrainResult:
    """Trains ``model`` with AdamW on the trainable parameters; deterministic on CPU.

    Step ``s`` (0-based) draws a batch, sets the learning rate to ``config.lr_at(s)``, computes
    ``loss_fn(model, batch)``, back-propagates, clips the global gradient norm and updates. The
    weights "at step ``s``" are those after ``s`` updates: checkpoint 0 is the initialization.
    Only parameters with ``requires_grad`` are optimized (freeze one with
    ``p.requires_grad_(False)`` before the call and it stays bitwise unchanged).

    Args:
        model: The model, or a zero-argument factory called after ``torch.manual_seed(config.seed)``
            (so the initialization is part of the seeded run). The global torch RNG is seeded in
            both cases (dropout draws from it), inside ``torch.random.fork_rng``: the caller's
            random state is the same after the call as before it.
        config: Hyperparameters.
        loss_fn: ``(model, batch) -> scalar tensor``.
        data: Training tensors (one tensor, or a tuple/list/dict of tensors sharing their first
            dimension): the whole of it every step if ``config.batch_size`` is ``None``, else
            minibatches of rows, a fresh seeded permutation per epoch (the last batch of an epoch
            may be smaller).
        sample: Instead of ``data``, ``(step, generator) -> batch`` for streams; ``generator`` is
            a CPU ``torch.Generator`` seeded with ``config.seed``, the only source of randomness it
            should use.
        evaluate: ``model -> {name: number}``, called in eval mode under ``torch.no_grad`` at
            step 0, every ``config.eval_every`` steps, at every checkpoint and at the end.
        stop_when: Train to a criterion: ``evaluation values -> bool``, asked after every
            evaluation past step 0 and at or past ``config.min_steps`` (evaluated there too);
            the first ``True`` ends the run there (``config.steps`` is then a cap, and
            ``result.stopped_at`` the step).
            The end checkpoint, when ``config.checkpoints`` asks for one at ``config.steps``, is
            saved at that step instead; later checkpoints are not saved. Needs ``evaluate``.
            Reaching the cap first is not an error here: ``result.stopped_at`` is ``None`` and
            the caller decides (say, raise naming its criterion).
        out: Folder for the checkpoints (``step-N`` subfolders) and ``training.json``. It is
            written under a temporary name and renamed into place when the run finishes, replacing
            an older folder of that name. Without ``out``, checkpoints are kept in memory
            (``Checkpoint.state``).
        save: ``(model, folder, record) -> None`` writing one checkpoint into the existing
            ``folder`` (default: :func:`~workbench.train.checkpoints.save_state_dict`, safetensors
            plus JSON); tiny-lm passes one that calls ``save_pretrained``. Needs ``out``.
        record: Extra JSON-ready entries for ``training.json`` (the caller's own config...).
        progress: Show a progress bar with the loss.
        desc: The progress bar's label.

    Returns:
        The losses, gradient norms, evaluations and checkpoints; ``result.model`` is the model.

    Raises:
        ConfigError: Neither or both of ``data`` and ``sample``, ``save`` without ``out``, a model
            without trainable parameters, a ``loss_fn`` that returns no scalar tensor, or
            ``stop_when`` without ``evaluate``.
    """
    if (data is None) == (sample is None):
        raise ConfigError("give exactly one of data= (tensors) or sample= (a batch function)")
    if stop_when is not None and evaluate is None:
        raise ConfigError("stop_when= judges evaluations and needs evaluate= (a metrics function)")
    if save is not None and out is None:
        raise ConfigError("save= writes checkpoint folders and needs out= (a folder)")
    from workbench.devices import resolve_device, torch_threads

    device = resolve_device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {config.device!r} asked for, but CUDA is not available; use cpu")
    cuda = [device.index or 0] if device.type == "cuda" else []
    # the run seeds the global RNG (initialization, dropout); the caller's state comes back after
    with torch_threads(config.threads), torch.random.fork_rng(devices=cuda):
        return _run(model, config, device, loss_fn, data, sample, evaluate, stop_when, out, save,
                    record, progress, desc)  # fmt: skip


def _run(
    model: torch.nn.Module | Callable[[], torch.nn.Module],
    config: TrainConfig,
    device: torch.device,
    loss_fn: LossFn,
    data: Batch | None,
    sample: SampleFn | None,
    evaluate: EvalFn | None,
    stop_when: StopFn | None,
    out: str | Path | None,
    save: SaveFn | None,
    record: Mapping[str, Any] | None,
    progress: bool,
    desc: str,
) -> TrainResult:
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    if not isinstance(model, torch.nn.Module):
        model = model()
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("the model has no trainable parameters (all have requires_grad=False)")
    if config.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            params, lr=config.lr, weight_decay=config.weight_decay
        )
    else:
        opt = torch.optim.AdamW(
            params,
            lr=config.lr,
            betas=config.betas,
            eps=config.eps,
            weight_decay=config.weight_decay,
        )
    generator = torch.Generator().manual_seed(config.seed)
    if sample is not None:
        next_batch: Callable[[int], Batch] = lambda step: _to(sample(step, generator), device)  # noqa: E731
    else:
        batches = _batches(_to(data, device), config.batch_size, generator)
        next_batch = lambda step: next(batches)  # noqa: E731
    save_at = set(config.checkpoints)
    eval_at = {0, config.steps} | save_at
    if stop_when is not None:
        eval_at.add(config.min_steps)  # the first step the criterion is asked at
    if config.eval_every:
        eval_at |= set(range(0, config.steps + 1, config.eval_every))
    if evaluate is None:
        eval_at = set()
    staging = Staging(out) if out is not None else None
    losses: list[torch.Tensor] = []
    norms: list[torch.Tensor] = []
    evals: list[EvalRecord] = []
    saved: list[Checkpoint] = []
    show_every = max(1, config.steps // 200)
    stopped_at: int | None = None
    try:
        with tqdm(total=config.steps, desc=desc, disable=not progress) as bar:
            for step in range(config.steps + 1):
                values: dict[str, float] = {}
                if step in eval_at:
                    values = _evaluate(model, evaluate)
                    evals.append(EvalRecord(step, values))
                    if (
                        stop_when is not None
                        and max(0, config.min_steps - 1) < step < config.steps
                        and stop_when(values)
                    ):
                        stopped_at = step
                if step in save_at or (stopped_at is not None and config.steps in save_at):
                    saved.append(_checkpoint(model, step, values, staging, save or save_state_dict))
                if step == config.steps or stopped_at is not None:
                    break
                batch = next_batch(step)
                for group in opt.param_groups:
                    group["lr"] = config.lr_at(step)
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model, batch)
                if step == 0 and (not isinstance(loss, torch.Tensor) or loss.ndim != 0):
                    shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss)
                    raise ConfigError(f"loss_fn must return a scalar tensor, got {shape}")
                loss.backward()
                if config.grad_clip is not None:
                    norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
                else:
                    norm = torch.nn.utils.get_total_norm(_grads(params))
                opt.step()
                losses.append(loss.detach())
                norms.append(norm.detach())
                bar.update(1)
                if progress and (step % show_every == 0 or step == config.steps - 1):
                    bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        result = TrainResult(
            config,
            tuple(torch.stack(losses).double().cpu().tolist()),
            tuple(torch.stack(norms).double().cpu().tolist()),
            tuple(evals),
            tuple(saved),
            time.perf_counter() - started,
            None,
            model,
            stopped_at,
        )
        if staging is None:
            return result
        body = {**(record or {}), **result.to_dict()}
        (staging.tmp / "training.json").write_text(json.dumps(body, indent=2))
        return _moved(result, staging.commit())
    finally:
        if staging is not None:
            staging.discard()


def _grads(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    return [p.grad for p in params if p.grad is not None]


def _moved(result: TrainResult, out: Path) -> TrainResult:
    from dataclasses import replace

    checkpoints = tuple(replace(c, path=out / c.revision) for c in result.checkpoints)
    return replace(result, checkpoints=checkpoints, out=out)


def _evaluate(model: torch.nn.Module, evaluate: EvalFn | None) -> dict[str, float]:
    assert evaluate is not None
    model.eval()
    try:
        with torch.no_grad():
            values = dict(evaluate(model))
    finally:
        model.train()
    return {str(k): float(v) for k, v in values.items()}


def _checkpoint(
    model: torch.nn.Module,
    step: int,
    values: dict[str, float],
    staging: Staging | None,
    save: SaveFn,
) -> Checkpoint:
    if staging is None:
        return Checkpoint(step, values=values, state=cpu_state(model))
    folder = staging.tmp / f"step-{step}"
    folder.mkdir()
    save(model, folder, {"step": step, "revision": folder.name, **values})
    return Checkpoint(step, path=folder, values=values)


def _batches(data: Batch, batch_size: int | None, generator: torch.Generator) -> Iterator[Batch]:
    """Full batch forever, or minibatches over a fresh permutation per epoch."""
    if batch_size is None:
        while True:
            yield data
    n = _rows(data)
    while True:
        order = torch.randperm(n, generator=generator)
        for idx in order.split(batch_size):
            yield _index(data, idx)


def _rows(data: Batch) -> int:
    leaves = _leaves(data)
    if not leaves:
        raise ConfigError("data= holds no tensors; give a tensor or a tuple/list/dict of tensors")
    sizes = {int(t.shape[0]) if t.ndim else -1 for t in leaves}
    if len(sizes) != 1 or -1 in sizes or 0 in sizes:
        raise ConfigError(
            "data= tensors must share a nonzero first dimension for minibatches, "
            f"got first dimensions {sorted(sizes)}"
        )
    return sizes.pop()


def _leaves(data: Batch) -> list[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, Mapping):
        return [t for v in data.values() for t in _leaves(v)]
    if isinstance(data, tuple | list):
        return [t for v in data for t in _leaves(v)]
    return []


def _index(data: Batch, idx: torch.Tensor) -> Batch:
    if isinstance(data, torch.Tensor):
        return data[idx.to(data.device)]
    if isinstance(data, Mapping):
        return {k: _index(v, idx) for k, v in data.items()}
    if isinstance(data, tuple):
        return tuple(_index(v, idx) for v in data)
    if isinstance(data, list):
        return [_index(v, idx) for v in data]
    return data


def _to(data: Batch, device: torch.device) -> Batch:
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, Mapping):
        return {k: _to(v, device) for k, v in data.items()}
    if isinstance(data, tuple):
        return tuple(_to(v, device) for v in data)
    if isinstance(data, list):
        return [_to(v, device) for v in data]
    return data
