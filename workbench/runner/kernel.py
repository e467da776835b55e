"""The kernel manager the runner uses: local kernels over IPC sockets, not TCP.

A kernel started by papermill listens on TCP ports of the loopback interface by default, and
ipykernel warns on every start that the traffic is unencrypted. A local run needs no network at
all: :class:`IPCKernelManager` puts the kernel's channels on Unix domain sockets in the temporary
folder (readable by this user only), which silences the warning and cannot collide on ports when
many sweep workers start kernels at once. The socket files are removed when the kernel stops.
"""

from __future__ import annotations

import os
import tempfile
import uuid

from jupyter_client.manager import AsyncKernelManager
from traitlets import default

KERNEL_MANAGER = "workbench.runner.kernel.IPCKernelManager"
"""Import path of :class:`IPCKernelManager`, as papermill's ``kernel_manager_class`` wants it."""


def socket_dir() -> str:
    """A private folder for kernel sockets (created with mode 0700 if missing)."""
    path = os.path.join(tempfile.gettempdir(), f"workbench-kernels-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


class IPCKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose kernels talk over IPC (Unix sockets) instead of TCP."""

    @default("transport")
    def _default_transport(self) -> str:
        return "ipc"

    @default("ip")
    def _default_ip(self) -> str:
        # with the ipc transport, ``ip`` is the path prefix of the socket files
        return os.path.join(socket_dir(), uuid.uuid4().hex[:12])
