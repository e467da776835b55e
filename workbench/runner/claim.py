"""An exclusive claim on one sweep point, so that two sweeps never run the same point at once.

The claim is an advisory ``flock`` on ``<run>/.claim`` held by the process that runs the point. The
operating system releases it when that process ends, however it ends (even by SIGKILL), so a claim
can never go stale; the file itself records who holds it (pid, host, start) for people reading the
folder. A shared filesystem must support ``flock`` (local disks and NFSv4 do) for sweeps on
several hosts into one folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.provenance import now_iso

CLAIM = ".claim"


@contextmanager
def claim(run_dir: str | Path) -> Iterator[bool]:
    """Tries to claim ``run_dir`` without waiting; yields whether this process holds it.

    The claim lasts until the ``with`` block ends (or the process dies).
    """
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / CLAIM, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": now_iso()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
