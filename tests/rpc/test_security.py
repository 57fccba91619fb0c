"""Transport security: plaintext only on loopback; with credentials, mutual TLS and the run token
over a real gRPC server (seedlike.rpc.security, scripts/make_credentials.sh)."""

import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from seedlike.config import base_config
from seedlike.rpc import client, codec, security
from seedlike.rpc.listen import serve
from tests.helpers import SERVE_SPEC as SPEC
from tests.helpers import make_credentials, rows, service_of
from tests.procs import ROOT, last, log_text, wait_for


@pytest.mark.parametrize("bind", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"])
def test_plaintext_is_allowed_on_loopback(bind):
    security.check_bind(bind, None)


@pytest.mark.parametrize("bind", ["0.0.0.0", "10.0.0.5", "learner-1", "::"])
def test_plaintext_is_refused_where_other_machines_can_connect(bind, tmp_path):
    with pytest.raises(security.InsecureBind, match="scripts/make_credentials.sh"):
        security.check_bind(bind, None)
    creds = security.Credentials.load(make_credentials(tmp_path / "c", "learner-1"), "server")
    security.check_bind(bind, creds)


def test_credentials_name_the_missing_file(tmp_path):
    with pytest.raises(security.TransportError, match=r"cannot read .*/ca.pem .*make_credentials"):
        security.Credentials.load(str(tmp_path), "client")


def test_make_credentials_refuses_to_overwrite(tmp_path):
    make_credentials(tmp_path / "c", "host")
    again = subprocess.run(
        [os.path.join(ROOT, "scripts", "make_credentials.sh"), str(tmp_path / "c"), "host"],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "already holds credentials" in again.stderr


def test_tls_server_serves_actors_with_the_token_and_refuses_the_rest(tmp_path):
    directory = make_credentials(tmp_path / "run", "learner-1")
    server_creds = security.Credentials.load(directory, "server")
    actor_creds = security.Credentials.load(directory, "client")
    other = security.Credentials.load(make_credentials(tmp_path / "other", "x"), "client")
    service = service_of(None)
    server, port = serve(service, "127.0.0.1", 0, base_config().server, server_creds)
    address = f"localhost:{port}"  # the certificate names localhost
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    try:
        connection = client.Connection(address, hello, credentials=actor_creds)
        actions = client.decode_actions(connection.step(codec.encode_step(0, rows(2))), 2, SPEC)
        assert actions.shape == (2,)
        connection.close()

        wrong_token = dataclasses.replace(actor_creds, token=b"0" * 64)
        with pytest.raises(client.Rejected, match="UNAUTHENTICATED: missing or wrong run token"):
            client.Connection(address, hello, credentials=wrong_token)
        # Plaintext, or a certificate from another run's CA, never gets past the TLS handshake;
        # the latter cannot be fixed by retrying, so it is a Rejected that says why.
        with pytest.raises(client.Disconnected, match="nothing accepts connections.*TLS only"):
            client.Connection(address, hello, connect_timeout=5.0, credentials=None)
        with pytest.raises(client.Rejected, match="TLS with localhost:.* certificate"):
            client.Connection(address, hello, connect_timeout=5.0, credentials=other)
        assert service.num_sessions == 0
    finally:
        server.stop()
        service.stop(finished=True)


@pytest.mark.slow  # runs the entrypoint in a process of its own
def test_learner_refuses_a_public_bind_without_credentials_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "learner.py", "--bind=0.0.0.0", f"--logdir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --bind=0.0.0.0 without transport credentials")
    assert np.char.count(last, "make_credentials.sh") == 1


def test_ipv6_binds_are_written_as_grpc_and_actors_read_them():
    assert security.bind_address("::1") == "[::1]" == security.bind_address("[::1]")
    assert security.bind_address("127.0.0.1") == "127.0.0.1"
    assert security.is_loopback("[::1]") and not security.is_loopback("[::]")


@pytest.mark.slow  # a learner and actor processes
def test_over_ipv6_our_actors_train_and_one_of_another_run_stops_at_once_saying_so(tmp_path, procs):
    """--bind=::1 (written [::1] for gRPC and actors), mutual TLS; an actor whose credentials
    come from another scripts/make_credentials.sh directory is told why in one line and exits 2
    at once, whichever side's certificate fails, instead of retrying for actor.first_connect_s."""
    ours, theirs = make_credentials(tmp_path / "a", "::1"), make_credentials(tmp_path / "b", "::1")
    logdir = tmp_path / "run"
    _, address = procs.learner(
        str(logdir), "--bind=::1", f"--config.transport.credentials={ours}",
        "--config.log.interval_s=1",
    )  # fmt: skip
    assert address.startswith("[::1]:")
    procs.actor(address, 0, f"--config.transport.credentials={ours}")
    actor = procs.actor(address, 1, f"--config.transport.credentials={theirs}")
    assert actor.wait(timeout=60) == 2
    log = log_text(actor)
    assert "Traceback" not in log and log.count("TLS with") == 1, log[-2000:]
    assert f"TLS with {address} failed, the server's certificate: " in log
    assert "one scripts/make_credentials.sh directory" in log
    # The server's certificate from our CA, the actor's from another: the server refuses it.
    mixed = tmp_path / "mixed"
    shutil.copytree(theirs, mixed)
    shutil.copy(os.path.join(ours, "ca.pem"), mixed / "ca.pem")
    actor = procs.actor(address, 2, f"--config.transport.credentials={mixed}")
    assert actor.wait(timeout=60) == 2
    assert "failed, the server refused this actor's certificate" in log_text(actor)
    wait_for(lambda: (last(logdir, "env_steps") or 0) > 0, 120, what="our actor's env steps")
