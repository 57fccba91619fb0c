"""Transport security: plaintext only on loopback; with credentials, mutual TLS, the run token and
identities from certificates over a real gRPC server (seedlike.rpc.security,
scripts/make_credentials.sh): revoked actors refused, the server's certificate rotated live."""

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from seedlike.config import base_config
from seedlike.rpc import client, codec, security
from seedlike.rpc.listen import listen
from tests.helpers import SERVE_SPEC as SPEC
from tests.helpers import credentials_script, make_credentials, rows, service_of
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
    run = make_credentials(tmp_path / "run", "host", actors=("actor-0",))
    mine = security.Credentials.load(run, "client", actor="actor-0")  # the run's directory
    assert mine.directory == os.path.join(run, "actors", "actor-0")
    with pytest.raises(security.TransportError, match=r"no certificate for actor 'actor-7'.*--act"):
        security.Credentials.load(run, "client", actor="actor-7")


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
    actor_creds = security.Credentials.load(directory, "client", actor="actor-0")
    other = security.Credentials.load(
        make_credentials(tmp_path / "other", "x"), "client", "actor-0"
    )
    service = service_of(None)
    server, port = listen(service, "127.0.0.1", 0, base_config().server, server_creds)
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
        # retrying cannot fix either, so each is a Rejected that says why.
        with pytest.raises(client.Rejected, match="speaks TLS only: give this actor the run's"):
            client.Connection(address, hello, connect_timeout=5.0, credentials=None)
        assert security.speaks_tls("localhost", port)
        plain_service = service_of(None)
        plain, plain_port = listen(plain_service, "127.0.0.1", 0, base_config().server, None)
        assert not security.speaks_tls("127.0.0.1", plain_port)
        plain.stop()
        plain_service.stop(finished=True)
        assert not security.speaks_tls("127.0.0.1", plain_port)  # nothing listens now
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
    shutil.copytree(os.path.join(theirs, "actors", "actor-1"), mixed)
    shutil.copy(os.path.join(ours, "ca.pem"), mixed / "ca.pem")
    actor = procs.actor(address, 2, f"--config.transport.credentials={mixed}")
    assert actor.wait(timeout=60) == 2
    assert "failed, the server refused this actor's certificate" in log_text(actor)
    wait_for(lambda: (last(logdir, "env_steps") or 0) > 0, 120, what="our actor's env steps")


def _session_identities(service) -> list[str]:
    return sorted(name for _, name, _ in service._sessions.values())


@contextlib.contextmanager
def _serving(server_config=None, credentials=None):
    """(service, port, connections) of a served inference service; the connections appended to
    the list are closed, and the server and service stopped, on exit."""
    service = service_of(None)
    config = base_config().server if server_config is None else server_config
    server, port = listen(service, "127.0.0.1", 0, config, credentials)
    connections: list = []
    try:
        yield service, port, connections
    finally:
        for connection in connections:
            connection.close()
        server.stop()
        service.stop(finished=True)


def test_an_identity_is_what_a_stream_proved_not_the_actor_id_it_declares(tmp_path):
    """Four streams under one certificate, each declaring another actor_id, are one identity;
    two certificates are two. On plaintext loopback, streams are their peer host unless
    server.trust_actor_ids says the declared ids are trusted."""
    run = make_credentials(tmp_path / "run", "learner-1", actors=("a", "b"))
    a, b = (security.Credentials.load(run, "client", name) for name in ("a", "b"))
    with _serving(credentials=security.load(run, "server")) as (service, port, connections):
        for actor_id, creds in [(0, a), (1, a), (2, a), (3, a), (4, b)]:
            hello = codec.make_hello(SPEC, actor_id=actor_id, num_envs=2)
            connections.append(client.Connection(f"localhost:{port}", hello, credentials=creds))
        assert _session_identities(service) == ["cert:a"] * 4 + ["cert:b"]
        assert len({identity for _, _, identity in service._sessions.values()}) == 2
    for trust, expect in ((False, ["127.0.0.1"] * 2), (True, ["127.0.0.1/5", "127.0.0.1/6"])):
        config = base_config().server
        config.trust_actor_ids = trust
        with _serving(config) as (service, port, connections):
            for actor_id in (5, 6):
                hello = codec.make_hello(SPEC, actor_id=actor_id, num_envs=2)
                connections.append(client.Connection(f"127.0.0.1:{port}", hello))
            assert _session_identities(service) == expect
    # A certificate without an actor name (the shared client.pem of older runs): its peer host.
    legacy = {"x509_common_name": [b"seedlike client"]}
    assert security.identity(legacy, "10.0.0.5", 3, trust_actor_ids=False) == "10.0.0.5"


def test_one_certificates_busy_streams_cannot_lock_another_identity_out(tmp_path):
    """Issue 76's seat lockout: one certificate holds every seat with streams that step. An
    identity with none asks in and gets the newest of them at once (that stream is told why at
    its next step); the certificate cannot take it back, and the newcomer gets back in at once
    after a restart."""
    run = make_credentials(tmp_path / "run", "learner-1", actors=("attacker", "honest"))
    bad, good = (security.Credentials.load(run, "client", n) for n in ("attacker", "honest"))
    config = base_config().server
    config.update(max_actors=4, max_streams_per_peer=8)
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    serving = _serving(config, credentials=security.load(run, "server"))
    with serving as (service, port, connections):
        address = f"localhost:{port}"
        attackers = [client.Connection(address, hello, credentials=bad) for _ in range(4)]
        connections += attackers
        for sequence in range(2):  # busy: they step, and nothing of theirs is idle
            for attacker in attackers:
                attacker.step(codec.encode_step(sequence, rows(2)))
        with pytest.raises(client.Disconnected, match="RESOURCE_EXHAUSTED: 4 actors are conne"):
            client.Connection(address, hello, credentials=bad)
        for restart in range(2):
            honest = client.Connection(address, hello, credentials=good)
            connections.append(honest)
            honest.step(codec.encode_step(0, rows(2)))
            assert _session_identities(service) == ["cert:attacker"] * 3 + ["cert:honest"]
            if restart == 0:  # the newest attacker stream was the one given away
                with pytest.raises(client.Disconnected, match="held 4 of the server's 4 seats"):
                    attackers[-1].step(codec.encode_step(2, rows(2)))
                for attacker in attackers[:3]:
                    attacker.step(codec.encode_step(2, rows(2)))
                with pytest.raises(client.Disconnected, match="RESOURCE_EXHAUSTED: 4 actors are"):
                    client.Connection(address, hello, credentials=bad)  # 3 against 1: no more
            honest.close()
            wait_for(lambda: len(service._sessions) == 3, 10, what="the honest session closed")
            # While it is away its seat is free: the attacker takes it back, and gives it up
            # again to the restarted actor.
            connections.append(client.Connection(address, hello, credentials=bad))


def test_a_revoked_actor_is_refused_and_its_open_stream_ends_while_others_go_on(tmp_path):
    run = make_credentials(tmp_path / "run", "learner-1", actors=("good", "bad"))
    good, bad = (security.Credentials.load(run, "client", name) for name in ("good", "bad"))
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    with _serving(credentials=security.load(run, "server")) as (service, port, connections):
        address = f"localhost:{port}"
        honest = client.Connection(address, hello, credentials=good)
        revoked = client.Connection(address, hello, credentials=bad)
        connections += [honest, revoked]
        for connection in (honest, revoked):
            connection.step(codec.encode_step(0, rows(2)))
        out = credentials_script("revoke", run, "bad")
        assert "revoked bad" in out and open(os.path.join(run, "revoked")).read() == "bad\n"

        def refused(sequence):
            try:
                revoked.step(codec.encode_step(sequence, rows(2)))
            except client.Rejected as e:
                return str(e)
            return None

        # The list is reread within a second: the stream's next steps end it.
        sequence = iter(range(1, 10**6))
        why = wait_for(lambda: refused(next(sequence)), 10, what="the revoked stream's end")
        assert why.startswith("PERMISSION_DENIED: the certificate of actor bad is revoked")
        with pytest.raises(client.Rejected, match="PERMISSION_DENIED: .* actor bad is revoked"):
            client.Connection(address, hello, credentials=bad)
        honest.step(codec.encode_step(1, rows(2)))  # the other actor never noticed
        assert _session_identities(service) == ["cert:good"]


def _served_certificate(port: int, creds: security.Credentials) -> bytes:
    import socket
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=creds.ca.decode())
    context.load_cert_chain(creds.cert_path, creds.key_path)
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def test_a_rotated_server_certificate_is_served_to_new_connections_and_open_ones_go_on(tmp_path):
    run = make_credentials(tmp_path / "run", "learner-1", actors=("a",))
    mine = security.Credentials.load(run, "client", "a")
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    with _serving(credentials=security.load(run, "server")) as (_, port, connections):
        address = f"localhost:{port}"
        before = _served_certificate(port, mine)
        old = client.Connection(address, hello, credentials=mine)
        connections.append(old)
        old.step(codec.encode_step(0, rows(2)))
        assert "new" in credentials_script("rotate", run, "learner-1", "learner-2")
        after = _served_certificate(port, mine)
        assert after != before  # no restart, and the new certificate is what new ones get
        new = client.Connection(address, hello, credentials=mine)
        connections.append(new)
        for sequence, connection in ((1, old), (0, new)):
            actions = connection.step(codec.encode_step(sequence, rows(2)))
            assert client.decode_actions(actions, 2, SPEC).shape == (2,)
