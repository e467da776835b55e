"""How the runner's processes end: all together, however the command ends.

The processes of a local sweep::

    workbench sweep                 the command (the parent)
    ├─ resource tracker             multiprocessing's: exits when its pipe has no writer left
    ├─ pool worker × N              (the parent and the workers hold it)
    │  └─ kernel                    papermill's ipykernel, in a session (process group) of its own
    │     └─ ...                    whatever the notebook started, in the kernel's group
    └─ (Ray: gcs_server, raylet, Ray workers, each with its kernel, when the sweep started Ray)

Three ways they end:

- **The parent is killed outright** (SIGKILL, the OOM killer, a preempted node): nothing runs in
  it, so each worker watches it (:func:`guard_worker`): Linux delivers ``PR_SET_PDEATHSIG`` the
  moment it dies, and a daemon thread polls the parent pid everywhere (and covers the instant
  between the worker's start and its ``prctl``). The worker then stops its kernel (the kernel's
  whole process group, SIGTERM, then SIGKILL after a grace) and exits at once, so the point it was
  running stays unfinished (no complete ``results.json``) and the resumed sweep runs it again.
  With the workers gone, the resource tracker sees its pipe close and exits too. A local Ray
  cluster's processes are started by Ray itself to die with the driver (``fate_share``); a Ray
  worker's kernel then exits by the poll below.
- **The command is interrupted** (SIGINT, SIGTERM): :func:`interrupts` turns the signal into
  :class:`Interrupted`, which unwinds the command: a sweep stops its workers with SIGTERM (the same
  path as above) or cancels its Ray tasks and stops the local Ray cluster it started, a
  ``workbench run`` stops its kernel; nothing after the interrupt is written (no table, no
  ``failure.json`` for the interrupted point). The CLI prints one line naming the command that
  resumes and exits 130 (SIGINT) or 143 (SIGTERM).
- **A kernel outlives its worker anyway**: ipykernel polls its own parent (``JPY_PARENT_PID``)
  once a second and exits; what it started in its group is what the worker's group kill is for.

Processes are found by parentage (psutil when installed, else ``/proc``), never by name.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
"""Exit status of a command stopped by each signal (128 + the signal number, as shells report)."""

PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal a process receives when its parent dies (Linux)."""

POLL = 0.5
"""Seconds between a worker's checks that its parent is alive."""


class Interrupted(KeyboardInterrupt):
    """The command received SIGINT or SIGTERM; it unwinds, stopping what it started.

    A ``KeyboardInterrupt``, so ``except Exception`` blocks (a run's failure handling, a point's
    retry) never take it for a failure.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """130 for SIGINT, 143 for SIGTERM."""
        return EXIT_CODES.get(self.signum, 128 + self.signum)


_on_interrupt: list[Callable[[], object]] = []
"""What the signal handler runs before it raises (innermost last): see :func:`on_interrupt`."""


@contextlib.contextmanager
def on_interrupt(stop: Callable[[], object]) -> Iterator[None]:
    """Runs ``stop`` in the signal handler, before :class:`Interrupted` unwinds the block.

    For what must die before the code it interrupts cleans up: a kernel that papermill, unwinding,
    would otherwise ask to shut down mid-cell (it answers with a traceback on the terminal).
    """
    _on_interrupt.append(stop)
    try:
        yield
    finally:
        _on_interrupt.remove(stop)


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """Turns SIGINT and SIGTERM into :class:`Interrupted` in the main thread for the block.

    Only the first signal raises: a second one while the command is stopping its workers is
    ignored (the stopping is bounded), so cleanup is never cut short half-way. The previous
    handlers are restored after the block. Outside the main thread this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if seen:
            return
        seen.append(signum)
        for stop in reversed(_on_interrupt):
            with contextlib.suppress(Exception):
                stop()
        raise Interrupted(signum)

    saved = {sig: signal.signal(sig, handler) for sig in EXIT_CODES}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


# -- finding and stopping processes ----------------------------------------------------------


def _proc_children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from ``/proc`` (Linux without psutil)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int | None = None) -> list[int]:
    """Pids of every living descendant of ``pid`` (default: this process), parents first."""
    pid = os.getpid() if pid is None else pid
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    if not os.path.isdir("/proc"):
        return []
    tree, found, queue = _proc_children(), [], [pid]
    while queue:
        for child in tree.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): the signal check is all there is
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def helpers() -> set[int]:
    """Pids of multiprocessing's own helpers (resource tracker, forkserver) in this process.

    They are not ours to kill: each exits when its pipe closes, after cleaning up what it tracks.
    """
    pids = set()
    with contextlib.suppress(Exception):
        from multiprocessing import resource_tracker

        pid = getattr(resource_tracker._resource_tracker, "_pid", None)
        if pid:
            pids.add(pid)
    with contextlib.suppress(Exception):
        from multiprocessing import forkserver

        pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
        if pid:
            pids.add(pid)
    return pids


def _signal(pid: int, sig: int) -> None:
    """Sends ``sig`` to ``pid``'s process group when it leads one (a kernel), else to ``pid``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "getpgid") and os.getpgid(pid) == pid and pid != os.getpgrp():
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _connection_file(pid: int) -> Path | None:
    """The Jupyter connection file on a kernel's command line (``-f FILE``), if any."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    for flag, value in itertools.pairwise(argv):
        if flag == "-f" and value.endswith(".json"):
            return Path(value)
    return None


def kernel_files(pids: Iterable[int]) -> list[Path]:
    """The connection files of those of ``pids`` that are Jupyter kernels (read while they run)."""
    return [path for path in map(_connection_file, pids) if path is not None]


def remove_kernel_files(paths: Iterable[Path]) -> None:
    """Removes dead kernels' connection files and IPC sockets (what their managers would)."""
    for path in paths:
        _remove_kernel_files(path)


def _remove_kernel_files(connection: Path) -> None:
    """Removes a dead kernel's connection file and its IPC sockets (what its manager would)."""
    with contextlib.suppress(OSError, ValueError):
        info = json.loads(connection.read_text())
        if info.get("transport") == "ipc":
            for key, port in info.items():
                if key.endswith("_port") and port:
                    Path(f"{info['ip']}-{port}").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        connection.unlink(missing_ok=True)


def stop_processes(pids: Iterable[int], grace: float = 2.0) -> list[int]:
    """Stops ``pids`` with their process groups: SIGTERM, then SIGKILL after ``grace`` seconds.

    Returns:
        The pids still alive at the end (none, unless they are not ours to signal).
    """
    pids = [p for p in dict.fromkeys(pids) if p != os.getpid() and alive(p)]
    if not pids:
        return []
    files = kernel_files(pids)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    remove_kernel_files(files)
    return [p for p in pids if alive(p)]


def stop_children(grace: float = 2.0, *, keep: Iterable[int] = ()) -> list[int]:
    """Stops every process this one started (kernels and what they run), but its helpers.

    Args:
        grace: Seconds between SIGTERM and SIGKILL.
        keep: Pids to leave alone (what ran before the code that is being stopped).

    Returns:
        The pids still alive at the end.
    """
    spare = helpers() | set(keep)
    return stop_processes([p for p in descendants() if p not in spare], grace)


# -- pool workers ----------------------------------------------------------------------------

_stopping = threading.Lock()


def _die(code: int) -> None:
    """Stops this worker's kernels and ends the worker at once (no cleanup that could write)."""
    if not _stopping.acquire(blocking=False):
        return  # the other watcher is already at it
    try:
        stop_children(grace=1.0)
    finally:
        os._exit(code)


def _on_term(signum: int, _frame: object) -> None:
    _die(EXIT_CODES.get(signum, 128 + signum))


def _set_pdeathsig(sig: int) -> bool:
    """Asks Linux to send ``sig`` to this process when its parent dies; whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL)
    _die(EXIT_CODES[signal.SIGTERM])


def guard_worker(parent: int) -> None:
    """Ties this worker process to ``parent``: it stops its kernel and exits when the parent ends.

    Call it first thing in the worker. SIGTERM (from the parent stopping the sweep, or from Linux
    when the parent dies) stops the kernel and exits with 143; SIGINT is ignored (a Ctrl-C at the
    terminal reaches the whole foreground group, and the parent answers it by stopping the
    workers). A daemon thread polls the parent pid as well, on every platform.

    Linux sends the signal when the *thread* that started the worker ends; a
    :class:`~workbench.runner.backends.LocalBackend` starts its workers from the thread that
    submits to it, which is the sweep's, so the two end together.
    """
    with contextlib.suppress(ImportError):
        import psutil  # noqa: F401  (imported now, not first inside a signal handler)
    signal.signal(signal.SIGINT, lambda *_: None)  # not SIG_IGN, which kernels would inherit
    signal.signal(signal.SIGTERM, _on_term)
    _set_pdeathsig(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the prctl took effect
        _die(EXIT_CODES[signal.SIGTERM])
    threading.Thread(target=_watch, args=(parent,), name="parent-watch", daemon=True).start()


@contextlib.contextmanager
def kernels_stopped_on_interrupt() -> Iterator[None]:
    """Stops the kernels this process started when the block is interrupted (or cancelled).

    For code that runs papermill in the process that received the interrupt (``workbench run``,
    ``workbench demo``, a Ray task that Ray cancels): the kernel is this process's child, and
    papermill, cut off mid-cell, would otherwise leave it running. Only processes started inside
    the block are stopped.
    """
    before = set(descendants())  # a notebook user's own processes (a cluster, a server) stay

    def stop() -> None:
        stop_children(keep=before)

    with on_interrupt(stop):
        try:
            yield
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: no run failure
                stop()
            raise
