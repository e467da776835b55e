"""Where sweep points run: local worker processes, or Ray tasks on a local or existing cluster.

Both backends run the same task, :func:`run_point`: claim the point's folder, skip it if another
sweep finished it meanwhile, else execute the notebook. The local backend pins one GPU per worker
process (``CUDA_VISIBLE_DEVICES``) when there are GPUs; Ray does the same for tasks that ask for
``num_gpus``.

Both also stop on demand (:meth:`LocalBackend.abort`, :meth:`RayBackend.abort`) when a sweep is
interrupted, and a local worker ends by itself when its sweep process dies
(:mod:`workbench.runner.lifecycle`): no worker, kernel or Ray process outlives the sweep.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workbench.runner.claim import claim
from workbench.runner.errors import BackendError
from workbench.runner.lifecycle import (
    descendants,
    guard_worker,
    helpers,
    kernel_files,
    kernels_stopped_on_interrupt,
    remove_kernel_files,
    stop_processes,
)
from workbench.runner.results import read_results

logger = logging.getLogger(__name__)

Status = Literal["ok", "failed", "busy", "done"]


@dataclass(frozen=True)
class PointTask:
    """One sweep point to run.

    Attributes:
        run_id: The point's id (its folder name under ``runs/``).
        analysis: The analysis.
        params: The checked parameter values.
        run_dir: The point's folder.
        notebooks_dir: Where the notebooks are.
        timeout: Per-cell timeout in seconds.
        formats: Figure formats (see :func:`~workbench.runner.run.run_analysis`).
        env: Environment variables of the point's kernel (e.g. ``ATEN_CPU_CAPABILITY`` for a
            replication at another CPU kernel level).
    """

    run_id: str
    analysis: str
    params: dict[str, Any]
    run_dir: str
    notebooks_dir: str
    timeout: float | None = None
    formats: str | None = None
    env: dict[str, str] | None = None


@dataclass(frozen=True)
class PointOutcome:
    """What happened to a point: ``ok``, ``failed``, ``busy`` (claimed elsewhere) or ``done``."""

    run_id: str
    status: Status
    message: str = ""


def run_point(task: PointTask) -> PointOutcome:
    """Claims and runs one point (the body of a worker process or Ray task).

    Interrupted (a Ray task cancelled), it stops the point's kernel before it gives up the claim.
    """
    from workbench.runner.run import run_analysis

    with kernels_stopped_on_interrupt(), claim(task.run_dir) as mine:
        if not mine:
            return PointOutcome(task.run_id, "busy")
        if read_results(task.run_dir) is not None:
            return PointOutcome(task.run_id, "done")
        result = run_analysis(
            task.analysis,
            task.params,
            task.run_dir,
            notebooks_dir=task.notebooks_dir,
            timeout=task.timeout,
            formats=task.formats,
            env=task.env,
        )
    if result.ok:
        return PointOutcome(task.run_id, "ok")
    return PointOutcome(task.run_id, "failed", result.failure.describe())


def _outcome(get: Any) -> PointOutcome:
    """The outcome a worker returned, or a failure if the worker itself broke."""
    try:
        return get()
    except Exception as exc:  # a crashed worker process or Ray task fails its point, not the sweep
        text = str(exc).splitlines()[0] if str(exc) else ""
        return PointOutcome("", "failed", f"worker error: {type(exc).__name__}: {text}")


def visible_gpus() -> list[str]:
    """The GPU ids this process may use (``CUDA_VISIBLE_DEVICES`` or all that torch sees)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # no usable CUDA: run on CPU
        return []


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Thread-pool sizes that kernels inherit from their worker (torch reads ``OMP_NUM_THREADS``)."""


def _init_worker(counter: Any, gpus: list[str], threads: int, parent: int | None = None) -> None:
    if parent is not None:
        guard_worker(parent)  # ends this worker (and its kernel) when the sweep process dies
    with counter.get_lock():
        slot = counter.value
        counter.value += 1
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    # N workers each running a kernel whose torch uses every core would oversubscribe the CPU;
    # give each its share, unless the user has set the sizes.
    for name in THREAD_VARS:
        os.environ.setdefault(name, str(threads))


class LocalBackend:
    """Worker processes on this machine, one GPU each when there are GPUs, the CPUs shared out."""

    def __init__(self, workers: int = 1) -> None:
        """Starts ``workers`` processes (spawned, so no state leaks from the parent)."""
        if workers < 1:
            raise BackendError(f"--workers must be at least 1, got {workers}")
        self.workers = workers
        ctx = mp.get_context("spawn")
        self._pool = cf.ProcessPoolExecutor(
            workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(
                ctx.Value("i", 0),
                visible_gpus(),
                max(1, (os.cpu_count() or 1) // workers),
                os.getpid(),
            ),
        )

    def submit(self, task: PointTask) -> cf.Future:
        """Queues ``task``; returns its handle."""
        return self._pool.submit(run_point, task)

    def wait(self, handles: Iterable[Any], timeout: float) -> list[tuple[Any, PointOutcome]]:
        """Waits up to ``timeout`` s for some handles; returns the finished ones with outcomes."""
        done, _ = cf.wait(list(handles), timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return [(h, _outcome(h.result)) for h in done]

    def close(self) -> None:
        """Stops the worker processes."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def abort(self, handles: Iterable[Any] = (), grace: float = 5.0) -> None:
        """Stops now: each worker gets SIGTERM, stops its kernel and exits; no point finishes.

        A worker still alive after ``grace`` seconds is killed with its kernel.
        """
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        # No handle is cancelled here: the pool fails every pending one itself once its workers
        # are gone (cancelling first trips Python 3.11's pool over the cancelled futures).
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + grace
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in procs:
            if proc.is_alive():
                stop_processes([*descendants(proc.pid), proc.pid], grace=0.0)
        manager = getattr(self._pool, "_executor_manager_thread", None)
        if manager is not None:
            manager.join(grace)
        self._pool.shutdown(wait=False)


class RayBackend:
    """Each point a Ray task; a local cluster by default, or an existing one at ``address``."""

    def __init__(
        self, workers: int = 1, address: str | None = None, gpus_per_run: float | None = None
    ) -> None:
        """Connects to (or starts) a Ray cluster.

        Args:
            workers: CPUs of a local cluster (ignored with ``address``).
            address: An existing cluster (``ray://host:10001`` or ``auto``).
            gpus_per_run: GPUs each task asks for (default: 1 when the cluster has GPUs, else 0).
        """
        try:
            import ray
        except ImportError:
            raise BackendError("the ray backend needs Ray: pip install 'workbench[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        self._address = address
        self._before = set(descendants())  # processes that are not the cluster's
        # On a loaded 2-core machine Ray's dashboard agent can take 20 s or more to import and
        # write its port file; the raylet gives up on it after about 15 s by default and exits
        # ("Timed out waiting for file .../metrics_agent_port"), failing the start. Let it wait.
        os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
        if self._started:
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    self._start_local(ray, workers)
            except BaseException:  # interrupted while starting: stop what has started
                ray.shutdown()
                raise
        if gpus_per_run is None:
            gpus_per_run = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        self._task = ray.remote(num_cpus=1, num_gpus=gpus_per_run, max_retries=0)(run_point)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", workers)))

    @staticmethod
    def _start_local(ray: Any, workers: int, attempts: int = 3) -> None:
        """Starts a local cluster, retrying when the raylet misses Ray's fixed 30 s start window.

        On a busy 2-core machine the first start can miss it (Ray hard-codes the wait); the
        retry finds the imports warm and usually starts in seconds.
        """
        for attempt in range(1, attempts + 1):
            try:
                ray.init(
                    num_cpus=workers,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
                return
            except Exception as exc:
                if "timed out during startup" not in str(exc) or attempt == attempts:
                    raise
                logger.warning("Ray's local cluster did not start in time (try %d); again", attempt)
                ray.shutdown()

    def submit(self, task: PointTask) -> Any:
        """Submits ``task`` as a Ray task; returns its object ref."""
        return self._task.remote(task)

    def wait(self, handles: Iterable[Any], timeout: float) -> list[tuple[Any, PointOutcome]]:
        """Waits up to ``timeout`` s for some refs; returns the finished ones with outcomes."""
        refs = list(handles)
        done, _ = self._ray.wait(refs, num_returns=1, timeout=timeout)
        return [(ref, _outcome(lambda ref=ref: self._ray.get(ref))) for ref in done]

    def close(self) -> None:
        """Shuts down the cluster if this backend started it."""
        if self._started:
            self._ray.shutdown()

    def abort(self, handles: Iterable[Any] = (), grace: float = 3.0) -> None:
        """Stops now: cancels the tasks, then stops the local cluster if this backend started it.

        A cancelled task stops its kernel (:func:`run_point`) within ``grace`` seconds, else Ray
        kills its worker. A cluster given with ``--address`` keeps running; a local one is shut
        down, and any of its processes (Ray's, kernels) still alive afterwards is killed.
        """
        ray, refs = self._ray, list(handles)
        local = self._started and not self._address
        spare = helpers() | self._before
        cluster = [p for p in descendants() if p not in spare] if local else []
        files = kernel_files(cluster)  # read now: a kernel may die with its Ray worker first
        for force in (False, True):
            for ref in refs:
                try:
                    ray.cancel(ref, force=force)
                except Exception as exc:  # finished already, or the cluster is gone
                    logger.debug("cancelling %s: %s", ref, exc)
            if not force and refs:
                try:
                    ray.wait(refs, num_returns=len(refs), timeout=grace)
                except Exception as exc:
                    logger.debug("waiting for cancelled tasks: %s", exc)
        if self._started:
            ray.shutdown()
        if cluster:
            stop_processes(cluster, grace=grace)
            remove_kernel_files(files)


def make_backend(
    name: str, workers: int = 1, address: str | None = None
) -> LocalBackend | RayBackend:
    """The backend called ``name`` (``local`` or ``ray``)."""
    if name == "local":
        if address:
            raise BackendError("--address only applies to --backend ray")
        return LocalBackend(workers)
    if name == "ray":
        return RayBackend(workers, address)
    raise BackendError(f"unknown backend {name!r}; use local or ray")


def as_path(value: str | Path) -> str:
    """An absolute path string (tasks may run with another working directory)."""
    return str(Path(value).resolve())
