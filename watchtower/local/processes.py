"""The operating-system plumbing of the local stack: processes, ports and owner-only files.

Whether a pid is alive (a zombie counts as gone), waiting for one to go, whether a port on the
local host answers, making a directory or writing a file that only the owner may read, and the
last lines of a log. No Kafka here: `broker` and `supervisor` build on it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

from watchtower.local.config import HOST


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, exited but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); treat it as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_gone(pid: int, timeout: float) -> None:
    """Wait up to `timeout` seconds for `pid` to go, reaping it if it is our child."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def port_open(port: int) -> bool:
    """Whether something accepts connections on `port` of the local host."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((HOST, port)) == 0


def private_dir(path: Path) -> None:
    """Make ``path`` (and missing parents) and give it mode 0700, also when it existed."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (created so, never readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


def log_tail(path: Path, lines: int) -> str:
    """The last `lines` lines of `path`, joined by " | " ("" when it cannot be read)."""
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


__all__ = ["log_tail", "pid_alive", "port_open", "private_dir", "wait_gone", "write_private"]
