"""Reconnection policy of actors: exponential, jittered, bounded, and giving up eventually; a
malformed server address is refused at once."""

import subprocess
import sys

import grpc
import pytest

from seedlike.rpc import client
from tests.procs import ROOT


def test_backoff_doubles_with_jitter_up_to_the_cap(monkeypatch):
    slept = []
    monkeypatch.setattr(client.time, "sleep", slept.append)
    backoff = client.Backoff(initial_s=0.1, max_s=1.0, give_up_s=1e9, seed=0)
    for _ in range(8):
        assert backoff.wait()
    caps = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for delay, cap in zip(slept, caps):
        assert 0.5 * cap <= delay <= cap
    backoff.reset()
    backoff.wait()
    assert slept[-1] <= 0.1


def test_backoff_gives_up_after_the_deadline(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(client.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(client.time, "monotonic", lambda: now[0])
    backoff = client.Backoff(initial_s=1.0, max_s=4.0, give_up_s=10.0, seed=0)
    waits = 0
    while backoff.wait():
        waits += 1
    assert 3 <= waits <= 8 and now[0] - 1000.0 >= 10.0


class _Error(grpc.RpcError):
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def details(self):
        return "details"


@pytest.mark.parametrize(
    "code,kind",
    [
        (grpc.StatusCode.INVALID_ARGUMENT, client.Rejected),
        (grpc.StatusCode.FAILED_PRECONDITION, client.Rejected),
        (grpc.StatusCode.UNAVAILABLE, client.Disconnected),
        (grpc.StatusCode.CANCELLED, client.Disconnected),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, client.Disconnected),
    ],
)
def test_status_codes_map_to_retry_or_fatal(code, kind):
    assert isinstance(client._translate(_Error(code)), kind)


def test_connecting_to_nothing_is_a_retryable_disconnect():
    from tests.procs import free_port

    with pytest.raises(client.Disconnected, match="nothing accepts connections at 127.0.0.1:"):
        client.Connection(f"127.0.0.1:{free_port()}", None, connect_timeout=5.0)
    with pytest.raises(client.Disconnected, match="cannot resolve host 'no-such-host.invalid'"):
        client.Connection("no-such-host.invalid:50051", None, connect_timeout=5.0)


def test_actor_refuses_a_server_address_without_a_port_at_once():
    done = subprocess.run(
        [sys.executable, "actor.py", "--server=localhost"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "--server must be HOST:PORT" in done.stderr


@pytest.mark.slow  # an actor process
def test_an_actor_that_never_reaches_a_server_gives_up_with_one_line_per_retry():
    from tests.procs import free_port

    port = free_port()  # nothing listens there
    done = subprocess.run(
        [sys.executable, "actor.py", f"--server=127.0.0.1:{port}",
         "--config.actor.first_connect_s=3"],
        cwd=ROOT,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    retries, last = lines[:-1], lines[-1]
    assert retries and all(
        f"cannot connect: nothing accepts connections at 127.0.0.1:{port}" in line
        and line.endswith("; retrying")
        for line in retries
    ), lines
    assert f"giving up on 127.0.0.1:{port} after 3 s" in last and "actor.first_connect_s" in last


def test_a_run_ended_by_an_exception_leaves_nothing_to_resume():
    """An actor's loop is one coroutine (client.run). A second Ctrl-C raises SystemExit while it
    waits for a reply; the coroutine must not resume at the loop's next use (closing the
    connections), when its env is closed."""
    import asyncio

    loop = client._thread_loop()
    reply = loop.create_future()
    resumed = []

    async def acting():
        loop.call_soon(interrupt)  # lands while the coroutine waits
        try:
            await reply
            resumed.append("after the reply")
        except asyncio.CancelledError:
            resumed.append("cancelled")
            raise

    def interrupt():
        reply.set_result(None)  # the reply is there when the signal lands
        raise SystemExit(130)

    with pytest.raises(SystemExit):
        client.run(acting())
    loop.run_until_complete(asyncio.sleep(0))  # what closing the connections does
    assert resumed == ["cancelled"]
