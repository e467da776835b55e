"""workbench.train: determinism, schedule, clipping, batches, checkpoints, atomicity, errors."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from workbench.errors import ConfigError, FigureKindError
from workbench.train import TrainConfig, load_checkpoint, log_steps, train

N, D_IN, D_OUT = 24, 6, 3


def data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, D_IN, generator=g), torch.randint(0, D_OUT, (N,), generator=g)


def mlp(dropout: float = 0.0) -> nn.Module:
    return nn.Sequential(nn.Linear(D_IN, 16), nn.GELU(), nn.Dropout(dropout), nn.Linear(16, D_OUT))


def xent(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_same_seed_same_weights_bitwise():
    config = TrainConfig(steps=30, lr=1e-2, warmup=3, batch_size=5, seed=3)
    runs = [
        train(lambda: mlp(dropout=0.3), config, data=data(), loss_fn=xent, progress=False)
        for _ in range(2)
    ]
    a, b = (params(r.model) for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert runs[0].losses == runs[1].losses and runs[0].grad_norms == runs[1].grad_norms
    other = train(
        lambda: mlp(dropout=0.3),
        TrainConfig(steps=30, lr=1e-2, warmup=3, batch_size=5, seed=4),
        data=data(),
        loss_fn=xent,
        progress=False,
    )
    assert not torch.equal(params(other.model)["0.weight"], a["0.weight"])
    torch.manual_seed(3)
    with torch.no_grad():
        assert xent(runs[0].model.eval(), data()) < xent(mlp().eval(), data()) - 0.1  # it learns


def test_a_run_leaves_the_callers_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train(lambda: mlp(dropout=0.3), TrainConfig(steps=3, seed=9), data=data(), loss_fn=xent,
          progress=False)  # fmt: skip
    assert torch.equal(torch.rand(3), expected)


def test_lr_schedule_matches_formula_and_is_what_the_optimizer_uses():
    config = TrainConfig(steps=40, lr=2e-3, warmup=6, min_lr_ratio=0.2)
    expected = []
    for s in range(40):
        if s < 6:
            expected.append(2e-3 * (s + 1) / 6)
        else:
            t = (s - 6) / (40 - 6)
            expected.append(2e-3 * (0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * t))))
    assert [config.lr_at(s) for s in range(40)] == pytest.approx(expected, rel=1e-12)
    assert config.lr_at(5) == pytest.approx(2e-3) and config.lr_at(40) == pytest.approx(4e-4)
    assert TrainConfig(steps=10, min_lr_ratio=1.0).lr_at(7) == pytest.approx(1e-3)

    seen: list[float] = []
    handle = register_optimizer_step_pre_hook(
        lambda opt, args, kwargs: seen.append(opt.param_groups[0]["lr"])
    )
    try:
        train(mlp, config, data=data(), loss_fn=xent, progress=False)
    finally:
        handle.remove()
    assert seen == [config.lr_at(s) for s in range(40)]


def test_clipping_clips_the_global_norm():
    x, y = data()

    def huge(model, batch):
        return 1e4 * xent(model, batch)

    after: list[float] = []

    def norm_now(opt, args, kwargs):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        after.append(float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))))

    handle = register_optimizer_step_pre_hook(norm_now)
    try:
        clipped = train(
            mlp, TrainConfig(steps=8, grad_clip=0.5), data=(x, y), loss_fn=huge, progress=False
        )
        n_clipped = len(after)
        free = train(
            mlp, TrainConfig(steps=8, grad_clip=None), data=(x, y), loss_fn=huge, progress=False
        )
    finally:
        handle.remove()
    assert min(clipped.grad_norms) > 0.5  # the raw norms were far above the limit...
    assert max(after[:n_clipped]) <= 0.5 * (1 + 1e-5)  # ...and the optimizer saw clipped ones
    assert after[n_clipped:] == pytest.approx(list(free.grad_norms), rel=1e-5)
    assert max(free.grad_norms) > 0.5


def recorder(seen: list[torch.Tensor]):
    def loss_fn(model, batch):
        x, idx = batch
        seen.append(idx.clone())
        return model(x).sum() * 0.0 + model(x).pow(2).mean()

    return loss_fn


def test_full_batch_and_minibatch_order():
    x = torch.randn(10, D_IN)
    idx = torch.arange(10)
    seen: list[torch.Tensor] = []
    train(mlp, TrainConfig(steps=3), data=(x, idx), loss_fn=recorder(seen), progress=False)
    assert all(torch.equal(s, idx) for s in seen) and len(seen) == 3

    def order(seed: int) -> list[list[int]]:
        seen.clear()
        train(
            mlp,
            TrainConfig(steps=7, batch_size=4, seed=seed),
            data=(x, idx),
            loss_fn=recorder(seen),
            progress=False,
        )
        return [s.tolist() for s in seen]

    got = order(5)
    g = torch.Generator().manual_seed(5)
    expected = [b.tolist() for _ in range(3) for b in torch.randperm(10, generator=g).split(4)]
    assert got == expected[:7]
    assert [len(b) for b in got] == [4, 4, 2, 4, 4, 2, 4]  # the last batch of an epoch is short
    assert sorted(got[0] + got[1] + got[2]) == list(range(10))  # an epoch sees every row once
    assert order(5) == got and order(6) != got


def test_threads_are_set_for_the_run_and_restored():
    before = torch.get_num_threads()
    seen = []

    def loss_fn(model, batch):
        seen.append(torch.get_num_threads())
        return xent(model, batch)

    train(mlp, TrainConfig(steps=2, threads=1), data=data(), loss_fn=loss_fn, progress=False)
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_sample_gets_the_seeded_generator():
    drawn: list[int] = []

    def sample(step, generator):
        drawn.append(int(torch.randint(0, 1000, (1,), generator=generator)))
        return torch.randn(4, D_IN, generator=generator), torch.zeros(4, dtype=torch.long)

    train(mlp, TrainConfig(steps=5, seed=11), sample=sample, loss_fn=xent, progress=False)
    g = torch.Generator().manual_seed(11)
    expected = []
    for _ in range(5):
        expected.append(int(torch.randint(0, 1000, (1,), generator=g)))
        torch.randn(4, D_IN, generator=g)
    assert drawn == expected


def test_checkpoints_at_exactly_the_requested_steps(tmp_path):
    config = TrainConfig(steps=25, batch_size=8, checkpoints=(25, 0, 3, 10), eval_every=20)
    calls: list[tuple[bool, bool]] = []

    def evaluate(model):
        calls.append((model.training, torch.is_grad_enabled()))
        return {"val_loss": xent(model, data(1))}

    result = train(
        mlp,
        config,
        data=data(),
        loss_fn=xent,
        evaluate=evaluate,
        out=tmp_path / "run",
        record={"toy": "mlp"},
        progress=False,
    )
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "step-0",
        "step-10",
        "step-25",
        "step-3",
        "training.json",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary folder left
    assert [c.step for c in result.checkpoints] == [0, 3, 10, 25]
    assert [e.step for e in result.evals] == [0, 3, 10, 20, 25]
    assert set(calls) == {(False, False)} and result.model.training
    record = json.loads((tmp_path / "run" / "training.json").read_text())
    assert record["toy"] == "mlp" and len(record["losses"]) == 25
    assert [c["revision"] for c in record["checkpoints"]] == [
        "step-0",
        "step-3",
        "step-10",
        "step-25",
    ]
    assert all("val_loss" in c for c in record["checkpoints"])
    # the same run in memory: the saved files hold the same tensors
    memory = train(mlp, config, data=data(), loss_fn=xent, progress=False)
    torch.manual_seed(0)
    init = mlp()
    for ckpt, kept in zip(result.checkpoints, memory.checkpoints, strict=True):
        assert ckpt.path == tmp_path / "run" / ckpt.revision and kept.path is None
        loaded = params(load_checkpoint(mlp(), ckpt.path))
        assert all(torch.equal(loaded[k], kept.state[k]) for k in loaded)
    assert all(torch.equal(v, memory.checkpoint(0).state[k]) for k, v in init.state_dict().items())
    assert all(
        torch.equal(v, memory.checkpoint(25).state[k]) for k, v in params(memory.model).items()
    )


def test_stop_when_ends_the_run_at_the_criterion_and_saves_the_end_there(tmp_path):
    config = TrainConfig(steps=400, lr=1e-2, batch_size=8, checkpoints=(0, 5, 400), eval_every=5)
    accuracy = []

    def evaluate(model):
        x, y = data()
        accuracy.append(float((model(x).argmax(-1) == y).float().mean()))
        return {"acc": accuracy[-1], "loss": xent(model, (x, y))}

    result = train(
        mlp,
        config,
        data=data(),
        loss_fn=xent,
        evaluate=evaluate,
        stop_when=lambda v: v["acc"] >= 0.9,
        out=tmp_path / "run",
        progress=False,
    )
    step = result.stopped_at
    assert step is not None and 5 < step < 400 and step % 5 == 0
    # it stopped at the first evaluation past step 0 that met the criterion, not before or after
    assert [e.values["acc"] >= 0.9 for e in result.evals[1:]] == [False] * (step // 5 - 1) + [True]
    assert result.steps == step == len(result.losses) == len(result.grad_norms)
    assert [c.step for c in result.checkpoints] == [0, 5, step] and result.final.step == step
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "step-0", "step-5", f"step-{step}", "training.json"
    ]  # fmt: skip
    record = json.loads((tmp_path / "run" / "training.json").read_text())
    assert record["stopped_at"] == record["steps"] == step and len(record["losses"]) == step
    # the saved end checkpoint is the returned model, and it meets the criterion
    saved = params(load_checkpoint(mlp(), result.final.path))
    assert all(torch.equal(saved[k], v) for k, v in params(result.model).items())
    # the same run without a criterion passes through exactly the same weights up to there
    full = train(mlp, config, data=data(), loss_fn=xent, evaluate=evaluate, progress=False)
    assert full.stopped_at is None and full.steps == 400
    assert full.losses[:step] == result.losses
    # a criterion never met runs to the cap
    capped = train(
        mlp,
        TrainConfig(steps=20, batch_size=8, eval_every=5),
        data=data(),
        loss_fn=xent,
        evaluate=evaluate,
        stop_when=lambda v: False,
        progress=False,
    )
    assert capped.stopped_at is None and len(capped.losses) == 20


def test_a_schedule_then_on_at_its_floor_until_a_criterion():
    """decay_steps + min_steps: the schedule runs whole, then the floor until the criterion."""
    sched = TrainConfig(steps=30, lr=1e-2, warmup=3, batch_size=8, eval_every=5, seed=2)
    long = TrainConfig(steps=90, lr=1e-2, warmup=3, batch_size=8, eval_every=5, seed=2,
                       decay_steps=30, min_steps=30)  # fmt: skip
    # the cosine reaches its floor at decay_steps and stays there
    assert [long.lr_at(s) for s in range(30)] == [sched.lr_at(s) for s in range(30)]
    assert [long.lr_at(s) for s in range(30, 90)] == pytest.approx([1e-3] * 60)
    asked: list[float] = []

    def evaluate(model):
        return {"loss": float(xent(model, data()))}

    def met(values):  # met from the first evaluation on: only min_steps holds the run back
        asked.append(values["loss"])
        return True

    alone = train(mlp, sched, data=data(), loss_fn=xent, evaluate=evaluate, progress=False)
    early = train(mlp, long, data=data(), loss_fn=xent, evaluate=evaluate, stop_when=met,
                  progress=False)  # fmt: skip
    # never asked before step 30; met at the end of the schedule: bitwise the schedule alone
    assert early.stopped_at == 30 and len(asked) == 1
    assert early.losses == alone.losses
    a, b = params(early.model), params(alone.model)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a criterion met only later trains on at the floor and stops at the first check that meets it
    full = train(mlp, long, data=data(), loss_fn=xent, evaluate=evaluate, progress=False)
    target = {e.step: e.values["loss"] for e in full.evals}[60]
    assert alone.evals[-1].values["loss"] > target  # still to be met at the schedule's end
    later = train(mlp, long, data=data(), loss_fn=xent, evaluate=evaluate,
                  stop_when=lambda v: v["loss"] <= target, progress=False)  # fmt: skip
    step = later.stopped_at
    assert step is not None and 30 < step < 90 and step % 5 == 0
    assert later.losses[:30] == alone.losses
    assert [e.values["loss"] <= target for e in later.evals if e.step >= 30] == [False] * (
        (step - 30) // 5
    ) + [True]


def test_exception_mid_run_leaves_no_folder_and_keeps_an_older_one(tmp_path):
    def boom(model, batch):
        if boom.calls == 12:
            raise RuntimeError("interrupted")
        boom.calls += 1
        return xent(model, batch)

    config = TrainConfig(steps=20, checkpoints=log_steps(20))
    boom.calls = 0
    with pytest.raises(RuntimeError, match="interrupted"):
        train(mlp, config, data=data(), loss_fn=boom, out=tmp_path / "run", progress=False)
    assert list(tmp_path.iterdir()) == []
    train(mlp, config, data=data(), loss_fn=xent, out=tmp_path / "run", progress=False)
    before = (tmp_path / "run" / "step-20" / "model.safetensors").read_bytes()
    boom.calls = 0
    with pytest.raises(RuntimeError, match="interrupted"):
        train(mlp, config, data=data(), loss_fn=boom, out=tmp_path / "run", progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert (tmp_path / "run" / "step-20" / "model.safetensors").read_bytes() == before


def test_killed_process_leaves_no_final_folder(tmp_path):
    script = textwrap.dedent(
        f"""
        import time, torch
        from pathlib import Path
        from workbench.train import TrainConfig, train

        def sample(step, generator):
            if step == 5:
                Path({str(tmp_path / "ready")!r}).touch()
                time.sleep(60)
            return torch.randn(4, 3, generator=generator)

        train(torch.nn.Linear(3, 1), TrainConfig(steps=10, checkpoints=(0, 2, 10)),
              sample=sample, loss_fn=lambda m, x: m(x).pow(2).mean(),
              out={str(tmp_path / "run")!r}, progress=False)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.time() + 60
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None and time.time() < deadline, "the training did not start"
            time.sleep(0.05)
        staged = [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]
        assert len(staged) == 1 and (staged[0] / "step-2").is_dir()  # checkpoints went there
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "run").exists()


def test_frozen_parameters_stay_bitwise_unchanged():
    def build():
        model = mlp()
        model[0].weight.requires_grad_(False)  # e.g. a frozen random embedding table
        return model

    config = TrainConfig(steps=20, lr=1e-2, weight_decay=0.5)
    torch.manual_seed(config.seed)
    init = params(build())
    result = train(build, config, data=data(), loss_fn=xent, progress=False)
    after = params(result.model)
    assert torch.equal(after["0.weight"], init["0.weight"])
    assert not torch.equal(after["0.bias"], init["0.bias"])
    assert not torch.equal(after["3.weight"], init["3.weight"])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("steps", 0, "steps must be an integer of at least 1, got 0"),
        ("steps", 2.5, "steps must be an integer"),
        ("lr", -1.0, "lr must be a positive number, got -1.0"),
        ("lr", float("nan"), "lr must be a positive number"),
        ("weight_decay", -0.1, "weight_decay must be a number of at least 0"),
        ("betas", (0.9, 1.0), r"betas must be two numbers in \[0, 1\)"),
        ("betas", (0.9,), "betas must be two numbers"),
        ("warmup", -1, "warmup must be an integer of at least 0"),
        ("min_lr_ratio", 1.5, r"min_lr_ratio must be a number in \[0, 1\]"),
        ("decay_steps", 11, r"decay_steps must be an integer in \[1, steps=10\] or None"),
        ("decay_steps", 0, r"decay_steps must be an integer in \[1, steps=10\]"),
        ("min_steps", -1, r"min_steps must be an integer in \[0, steps=10\]"),
        ("min_steps", 11, r"min_steps must be an integer in \[0, steps=10\]"),
        ("grad_clip", 0.0, "grad_clip must be a positive number or None"),
        ("batch_size", 0, "batch_size must be an integer of at least 1 or None"),
        ("eval_every", 0, "eval_every must be an integer of at least 1 or None"),
        ("checkpoints", (0, 11), r"checkpoint step 11 is outside \[0, steps=10\]"),
        ("checkpoints", "log", "checkpoints must be a sequence of steps"),
        ("device", "", "device must be"),
        ("threads", 0, "threads must be an integer of at least 1 or None"),
    ],
)
def test_bad_config_values_raise_one_line_errors(field, value, message):
    with pytest.raises(ConfigError, match=message) as info:
        TrainConfig(**{"steps": 10, field: value})
    assert "\n" not in str(info.value)


def test_bad_arguments_raise_one_line_errors(tmp_path):
    config = TrainConfig(steps=2)
    with pytest.raises(ConfigError, match="exactly one of data="):
        train(mlp, config, loss_fn=xent)
    with pytest.raises(ConfigError, match="needs out="):
        train(mlp, config, data=data(), loss_fn=xent, save=lambda m, f, r: None)
    with pytest.raises(ConfigError, match="stop_when= judges evaluations and needs evaluate="):
        train(mlp, config, data=data(), loss_fn=xent, stop_when=lambda v: True)
    frozen = mlp().requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameters"):
        train(frozen, config, data=data(), loss_fn=xent)
    with pytest.raises(ConfigError, match=r"scalar tensor, got \(24, 3\)"):
        train(mlp, config, data=data(), loss_fn=lambda m, b: m(b[0]), progress=False)
    with pytest.raises(ConfigError, match="share a nonzero first dimension"):
        train(
            mlp,
            TrainConfig(steps=2, batch_size=4),
            data=(torch.ones(4, D_IN), torch.ones(5)),
            loss_fn=xent,
        )
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="'cuda:1' asked for, but CUDA is not available"):
            train(mlp, TrainConfig(steps=2, device="cuda:1"), data=data(), loss_fn=xent)
    with pytest.raises(ConfigError, match="unknown device 'gpu7'"):
        train(mlp, TrainConfig(steps=2, device="gpu7"), data=data(), loss_fn=xent)


def test_log_steps_and_config_checkpoints():
    assert log_steps(500) == (0, 10, 20, 50, 100, 200, 500)
    assert log_steps(2000) == (0, 10, 20, 50, 100, 200, 500, 1000, 2000)
    assert log_steps(30) == (0, 10, 20, 30) and log_steps(5) == (0, 5)
    assert log_steps(100, first=1) == (0, 1, 2, 5, 10, 20, 50, 100)
    config = TrainConfig(steps=10, checkpoints=[10, 0, 5, 5])
    assert config.checkpoints == (0, 5, 10) and hash(config)


def test_result_to_dict_and_figures():
    result = train(
        mlp,
        TrainConfig(steps=6, checkpoints=(0, 6)),
        data=data(),
        loss_fn=xent,
        evaluate=lambda m: {"val_loss": xent(m, data(1)), "acc": 0.5},
        progress=False,
    )
    body = json.loads(json.dumps(result.to_dict()))
    assert body["train_config"]["steps"] == 6 and len(body["losses"]) == 6
    assert body["checkpoints"][1]["revision"] == "step-6" and "val_loss" in body["evals"][0]
    loss = result.figure()
    assert [t.name for t in loss.data] == ["training loss", "acc", "val_loss"]
    assert len(result.figure("grad_norm").data) == 1
    assert [len(result.figure(k).data) > 0 for k in result.figure_kinds()] == [True, True]
    with pytest.raises(FigureKindError, match=r"^unknown figure kind 'nope'; use one of loss"):
        result.figure("nope")
    with pytest.raises(KeyError, match="no checkpoint at step 3; saved: 0, 6"):
        result.checkpoint(3)


def test_sgd_is_plain_gradient_descent():
    torch.manual_seed(0)
    w0 = torch.randn(4, 3)
    x = torch.randn(16, 4)
    model = torch.nn.Linear(4, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(w0.T)
    config = TrainConfig(
        steps=3, lr=0.1, weight_decay=0.0, optimizer="sgd", grad_clip=None, min_lr_ratio=1.0
    )
    result = train(model, config, data=x, loss_fn=lambda m, b: (m(b) ** 2).mean(), progress=False)
    w = w0.T.clone().requires_grad_(True)
    for _ in range(3):  # by hand: w -= lr * grad
        (grad,) = torch.autograd.grad(((x @ w.T) ** 2).mean(), w)
        w = (w - 0.1 * grad).detach().requires_grad_(True)
    torch.testing.assert_close(result.model.weight.detach(), w.detach(), rtol=1e-6, atol=1e-7)
    with pytest.raises(ConfigError, match="optimizer must be 'adamw' or 'sgd'"):
        TrainConfig(steps=1, optimizer="adam")


def test_warm_restarts_repeat_the_schedule_in_cycles_twice_as_long():
    sched = TrainConfig(steps=30, lr=1e-2, warmup=3, decay_steps=30)
    again = TrainConfig(steps=120, lr=1e-2, warmup=3, decay_steps=30, min_steps=30, restarts=True)
    first = [again.lr_at(s) for s in range(30)]
    assert first == [sched.lr_at(s) for s in range(30)]  # the schedule itself, warm-up included
    # SGDR with T_mult = 2: the cosine part (27 steps), then 54, then 108, each from the peak
    assert again.lr_at(30) == pytest.approx(1e-2)
    longer = TrainConfig(steps=54, lr=1e-2, min_lr_ratio=0.1)
    for s in range(30, 84):
        assert again.lr_at(s) == pytest.approx(longer.lr_at(s - 30))
    assert again.lr_at(84) == pytest.approx(1e-2)  # the third cycle starts
    assert TrainConfig(steps=90, decay_steps=30).lr_at(60) == pytest.approx(1e-4)  # no restarts
