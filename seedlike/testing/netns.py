"""Separate hosts on one machine: a network namespace per host, each with its own private address,
joined by a bridge in a namespace of its own; `partition` drops every packet to and from a host
(sockets stay open, as when a cable is pulled or a host loses power) and `heal` lets them through
again. Used by tests/rpc/test_partitions.py and benchmarks/faults.py.

Needs root and iproute2 (`ip netns`, `tc`); `unavailable()` says why not, for a skip that
names it. Dropping is a zero-length pfifo on both ends of the host's link (no netem needed).
Everything made here is removed by `close` (and the namespaces with their links by the kernel
if the process dies first, once nothing runs in them).
"""

from __future__ import annotations

import os
import shutil
import subprocess


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "network namespaces need iproute2 (ip, tc): apt-get install -y iproute2"
    probe = f"slprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class Hosts:
    """Namespaces `names` with addresses 10.<a>.<b>.1, .2, ... (a /24 chosen from the process id,
    so parallel test workers do not meet). `address[name]`, `prefix(name)` (the command prefix
    that runs a program on that host), `partition(name)`, `heal(name)`, `close()`."""

    def __init__(self, *names: str):
        pid = os.getpid()
        self._tag = f"sl{pid % 100000}"
        subnet = f"10.{200 + pid % 50}.{(pid // 50) % 250}"
        self._switch = f"{self._tag}-sw"
        self._namespaces = [self._switch]
        self.address: dict[str, str] = {}
        self._links: dict[str, tuple[str, str]] = {}
        try:
            _ip("netns", "add", self._switch)
            _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self._switch, "link", "set", "br0", "up")
            for i, name in enumerate(names):
                ns = f"{self._tag}-{name}"
                _ip("netns", "add", ns)
                self._namespaces.append(ns)
                inside, outside = f"{self._tag}h{i}", f"{self._tag}s{i}"
                _ip("link", "add", inside, "type", "veth", "peer", "name", outside)
                _ip("link", "set", inside, "netns", ns)
                _ip("link", "set", outside, "netns", self._switch)
                _ip("-n", self._switch, "link", "set", outside, "master", "br0", "up")
                self.address[name] = f"{subnet}.{i + 1}"
                _ip("-n", ns, "addr", "add", f"{self.address[name]}/24", "dev", inside)
                _ip("-n", ns, "link", "set", inside, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                self._links[name] = (inside, outside)
        except BaseException:
            self.close()
            raise

    def namespace(self, name: str) -> str:
        return f"{self._tag}-{name}"

    def prefix(self, name: str) -> list[str]:
        """The command prefix that runs a program on host `name`."""
        return ["ip", "netns", "exec", self.namespace(name)]

    def partition(self, name: str) -> None:
        """Every packet to and from host `name` is dropped from now on."""
        inside, outside = self._links[name]
        _ip("netns", "exec", self.namespace(name), "tc", "qdisc", "replace", "dev", inside,
            "root", "pfifo", "limit", "0")  # fmt: skip
        _ip("netns", "exec", self._switch, "tc", "qdisc", "replace", "dev", outside,
            "root", "pfifo", "limit", "0")  # fmt: skip

    def heal(self, name: str) -> None:
        inside, outside = self._links[name]
        _ip("netns", "exec", self.namespace(name), "tc", "qdisc", "del", "dev", inside, "root",
            check=False)  # fmt: skip
        _ip("netns", "exec", self._switch, "tc", "qdisc", "del", "dev", outside, "root",
            check=False)  # fmt: skip

    def close(self) -> None:
        """Removes the namespaces (their links go with them). Kill what runs in them first."""
        for ns in reversed(self._namespaces):
            _ip("netns", "del", ns, check=False)
        self._namespaces = []
