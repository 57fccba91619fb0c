"""One port per run: a learner claims its port before serving, and refuses one that is taken.

gRPC servers bind with SO_REUSEPORT, which lets the stream front ends of one learner
(seedlike.rpc.frontend) listen on the same port, the kernel spreading connections among them. It
also lets a second learner started on the same port listen beside the first, and actors would then
be split between two runs without an error. So before anything listens, `claim`:

1. refuses a port where something already accepts connections (another run, another program);
2. takes an exclusive advisory lock named after the port, held until the process ends, so two
   learners starting at the same moment cannot both pass (1);
3. binds a socket with SO_REUSEPORT to the address without listening on it: it holds the port
   (port 0 picks a free one) for the run's own listeners, which join it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import tempfile

from seedlike.rpc.security import TransportError

LOCK_DIR = os.path.join(tempfile.gettempdir(), "seedlike-ports")


class PortInUse(TransportError):
    """The port is another process's."""


class Claim:
    """A claimed port: `port`, held until `release()` (or the process's end)."""

    def __init__(self, bind: str, port: int):
        self.bind = bind
        family = socket.AF_INET6 if ":" in bind.strip("[]") else socket.AF_INET
        host = bind.strip("[]")
        self._lock = None
        self._socket = None
        if port and _accepts(family, host, port):
            raise PortInUse(_taken(bind, port, "another process listens there"))
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            raise PortInUse(_taken(bind, port, e.strerror or str(e))) from None
        self._socket = sock
        self.port = sock.getsockname()[1]
        try:
            self._lock = _lock(self.port)
        except PortInUse:
            self.release()
            raise

    def release(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._lock is not None:
            os.close(self._lock)  # closing the file releases the lock
            self._lock = None


def claim(bind: str, port: int) -> Claim:
    """Claims `port` (0: a free one) on the address `bind`; raises PortInUse naming the port."""
    return Claim(bind, port)


def _accepts(family, host: str, port: int) -> bool:
    """Whether something accepts TCP connections on the port (of this host, for a wildcard)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect((host, port))
        except OSError:
            return False
    return True


def _lock(port: int) -> int | None:
    """An exclusive lock on the port's file, as an open descriptor (None where the lock directory
    is not ours to use: the probe alone then guards the port)."""
    try:
        os.makedirs(LOCK_DIR, mode=0o1777, exist_ok=True)
        fd = os.open(os.path.join(LOCK_DIR, f"{port}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise PortInUse(
                _taken("", port, "another seedlike learner is starting there")
            ) from None
        return None
    return fd


def _taken(bind: str, port: int, why: str) -> str:
    where = f"{bind}:{port}" if bind else f"port {port}"
    return (
        f"cannot serve on {where}: {why}; stop that process or pick another --port "
        "(0 picks a free one)"
    )
