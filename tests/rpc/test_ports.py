"""One port per run: a learner refuses a port another process listens on, naming it, while the
stream front ends of one learner share theirs."""

import socket
import subprocess
import sys

import pytest

from seedlike.config import base_config
from seedlike.rpc import client, codec, ports
from seedlike.rpc.listen import listen
from tests.helpers import SERVE_SPEC as SPEC
from tests.helpers import rows, service_of
from tests.procs import ROOT, Processes, free_port, wait_for


def test_a_port_something_listens_on_is_refused_with_its_number():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(ports.PortInUse, match=f"127.0.0.1:{port}: another process listens"):
            ports.claim("127.0.0.1", port)


def test_two_claims_of_one_port_and_a_plain_bind_are_refused():
    claim = ports.claim("127.0.0.1", 0)
    try:
        with pytest.raises(ports.PortInUse, match=f"port {claim.port}: another seedlike"):
            ports.claim("127.0.0.1", claim.port)  # no listener yet: the lock tells
        with socket.socket() as plain:  # a program without SO_REUSEPORT cannot take it either
            with pytest.raises(OSError):
                plain.bind(("127.0.0.1", claim.port))
    finally:
        claim.release()
    ports.claim("127.0.0.1", claim.port).release()  # free again once released


@pytest.mark.parametrize("front_ends", [0, 2])
def test_a_second_server_on_a_served_port_is_refused(front_ends):
    config = base_config().server
    config.front_ends = front_ends
    service = service_of(None)
    server, port = listen(service, "127.0.0.1", 0, config)
    try:
        other = service_of(None)
        with pytest.raises(ports.PortInUse, match=str(port)):
            listen(other, "127.0.0.1", port, config)
        other.stop(finished=True)
        # The first still serves every actor that comes (with 2 front ends: both listen).
        for actor_id in range(4):
            connection = client.Connection(f"127.0.0.1:{port}", codec.make_hello(SPEC, actor_id, 2))
            connection.step(codec.encode_step(0, rows(2)))
            connection.close()
    finally:
        service.stop(finished=True)
        server.stop()


@pytest.mark.slow  # two learner processes
def test_a_second_learner_on_the_same_port_exits_with_one_line(tmp_path):
    procs = Processes(tmp_path)
    port = free_port()
    try:
        first = procs.spawn(["learner.py", f"--logdir={tmp_path / 'a'}", f"--port={port}"], "a.log")
        wait_for(lambda: (tmp_path / "a" / "server_address").exists(), 120, first, "learner")
        second = subprocess.run(
            [sys.executable, "learner.py", f"--logdir={tmp_path / 'b'}", f"--port={port}"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr
        assert f"error: cannot serve on 127.0.0.1:{port}: " in second.stderr.splitlines()[-1]
        assert first.poll() is None  # the first run goes on
    finally:
        procs.stop_all()
