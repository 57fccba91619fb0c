"""Streams that cannot hold the server: a missing Hello and a silent actor are closed and free
their slots, while an actor that the server itself keeps waiting is never timed out."""

import itertools
import threading
import time

import grpc
import pytest

from seedlike.config import base_config
from seedlike.rpc import client, codec
from seedlike.rpc.listen import listen
from seedlike.rpc.streams import Peer, peer_host
from tests.helpers import SERVE_SPEC as SPEC
from tests.helpers import rows, service_of
from tests.procs import repeat_for, wait_for


class Gate:
    """A compute guard that holds every policy call while closed: the server keeps actors
    waiting, as a busy accelerator would."""

    def __init__(self):
        self.open = threading.Event()
        self.open.set()

    def __call__(self, fn, *args):
        self.open.wait()
        return fn(*args)


@pytest.fixture(params=[0, 1], ids=["in_process", "front_end"])
def server(request):
    """(service, address, gate) of a server with 2 slots and short deadlines, its streams served
    in the learner process or by a front-end process; a test can change transport settings with
    @pytest.mark.transport(key=value)."""
    gate = Gate()
    service = service_of(None, gate)
    transport = base_config().server
    transport.update(
        max_actors=2, hello_timeout_s=0.5, idle_timeout_s=1.0, front_ends=request.param
    )
    marker = request.node.get_closest_marker("transport")
    transport.update(marker.kwargs if marker else {})
    rpc, port = listen(service, "127.0.0.1", 0, transport)
    yield service, f"127.0.0.1:{port}", gate
    gate.open.set()
    rpc.stop()
    service.stop(finished=True)


def silent_stream(address, first_message=None):
    """Opens a stream, sends `first_message` (or nothing) and then nothing more; returns the
    stream's outcome (the status code it ended with) once the server ends it."""
    release = threading.Event()

    def requests():
        if first_message is not None:
            yield first_message
        release.wait(30)

    channel = grpc.insecure_channel(address)
    call = channel.stream_stream(codec.STREAM_METHOD)(requests())
    try:
        for _ in call:
            pass
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code(), e.details()
    finally:
        release.set()
        channel.close()


def test_a_stream_without_a_hello_is_closed_after_the_hello_timeout(server):
    service, address, _ = server
    code, details = silent_stream(address)
    # The configured timeout closed it (how long that took is the machine's, not asserted).
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and "no Hello within 0.5 s" in details
    assert service.num_sessions == 0


def test_silent_actors_lose_their_slots_and_an_honest_actor_gets_in(server):
    service, address, _ = server
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    raw_hello = codec.pb.ActorMessage(hello=hello).SerializeToString()
    outcomes = []
    silent = [
        threading.Thread(target=lambda: outcomes.append(silent_stream(address, raw_hello)))
        for _ in range(2)  # max_actors: every slot
    ]
    for thread in silent:
        thread.start()
    wait_for(lambda: service.num_sessions >= 2, 10, what="both sessions open")
    assert service.num_sessions == 2
    for thread in silent:
        thread.join(timeout=30)
    assert [o[0] for o in outcomes] == [grpc.StatusCode.DEADLINE_EXCEEDED] * 2
    assert all("no step within 1 s (server.idle_timeout_s)" in details for _, details in outcomes)
    # The handler forgets the session just after the abort reaches the client.
    wait_for(lambda: service.num_sessions == 0, 5, what="every session closed")
    assert service.num_sessions == 0
    honest = client.Connection(address, hello)
    for sequence in range(3):
        reply = honest.step(codec.encode_step(sequence, rows(2)))
        assert client.decode_actions(reply, 2, SPEC).shape == (2,)
        time.sleep(0.4)  # slow, but well inside the idle timeout: never cut off
    honest.close()


def test_waiting_for_the_server_does_not_count_as_idle(server):
    """An actor whose request the server holds (policy paused) for twice the idle timeout keeps
    its stream: only time the server waits for the actor counts."""
    service, address, gate = server
    actor = client.Connection(address, codec.make_hello(SPEC, actor_id=0, num_envs=2))
    actor.step(codec.encode_step(0, rows(2)))
    gate.open.clear()
    done, result = threading.Event(), []

    def step():
        result.append(actor.step(codec.encode_step(1, rows(2))))
        done.set()

    threading.Thread(target=step, daemon=True).start()
    assert not done.wait(2.0)
    gate.open.set()
    assert done.wait(10) and result[0].sequence == 1
    assert service.num_sessions == 1
    actor.close()


def test_the_receive_limit_is_the_largest_valid_step(server):
    service, address, _ = server
    limit = codec.max_step_bytes(SPEC, service.max_envs_per_actor)
    # 4096 envs x (2 float32 obs + reward, ids and flags: 16 bytes) + 64 KiB of framing.
    assert limit == 4096 * (8 + 16) + 64 * 1024
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    raw_hello = codec.pb.ActorMessage(hello=hello).SerializeToString()
    channel = grpc.insecure_channel(address)
    call = channel.stream_stream(codec.STREAM_METHOD)(iter([raw_hello, b"\0" * (limit + 1)]))
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    channel.close()
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.transport(max_actors=4, max_streams_per_peer=1)
def test_one_host_cannot_hold_more_streams_than_its_cap(server):
    service, address, _ = server
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    first = client.Connection(address, hello)
    with pytest.raises(client.Disconnected, match=r"RESOURCE_EXHAUSTED: 127\.0\.0\.1 has 1 stre"):
        client.Connection(address, codec.make_hello(SPEC, actor_id=1, num_envs=2))
    assert service.num_sessions == 1
    first.close()
    wait_for(lambda: service.num_sessions == 0, 5, what="every session closed")
    again = client.Connection(address, hello)  # the slot is free once the stream has ended
    assert client.decode_actions(again.step(codec.encode_step(0, rows(2))), 2, SPEC).shape == (2,)
    again.close()


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.transport(max_pending_streams=4, hello_timeout_s=3.0)
def test_streams_without_a_hello_hold_no_slot_and_give_way_to_newcomers(server):
    """Finding 6 of issue 33: 200 streams that open and stay silent held every slot and locked an
    honest actor out for 90 s. Now at most 4 wait for their Hello, the oldest giving way, so 20 of
    them leave room for an honest actor."""
    service, address, _ = server
    outcomes = []
    silent = [
        threading.Thread(target=lambda: outcomes.append(silent_stream(address))) for _ in range(20)
    ]
    for thread in silent:
        thread.start()
    time.sleep(1.0)  # every silent stream has opened
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    honest = client.Connection(address, hello)
    assert client.decode_actions(honest.step(codec.encode_step(0, rows(2))), 2, SPEC).shape == (2,)
    honest.close()
    for thread in silent:
        thread.join(timeout=30)
    codes = [o[0] for o in outcomes]
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 16  # gave way to newer streams
    assert codes.count(grpc.StatusCode.DEADLINE_EXCEEDED) <= 4


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.transport(evict_idle_s=0.3, idle_timeout_s=3.0)
def test_a_full_server_gives_the_slot_of_a_silent_session_to_a_newcomer(server, request):
    """Finding 6 of issue 33 (Hello, then silence): both slots held by sessions that never step;
    a newcomer takes the slot of the one idle longest (the evicted stream ends at its idle
    timeout, or at its next step). In process the evicted session holds nothing meanwhile; with
    front ends it keeps its seats and unroll buffers until its stream ends, since its front end
    may be writing a step into them (seedlike.rpc.hub)."""
    service, address, _ = server
    front_ends = request.node.callspec.params["server"]
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=2)
    raw_hello = codec.pb.ActorMessage(hello=hello).SerializeToString()
    silent = [threading.Thread(target=silent_stream, args=(address, raw_hello)) for _ in range(2)]
    for thread in silent:
        thread.start()
    wait_for(lambda: service.num_sessions >= 2, 10, what="both sessions open")
    time.sleep(0.5)  # both idle past evict_idle_s
    honest = client.Connection(address, codec.make_hello(SPEC, actor_id=1, num_envs=2))
    for sequence in range(3):
        assert honest.step(codec.encode_step(sequence, rows(2))).sequence == sequence
    # The honest one and the silent one not evicted, and with front ends the evicted one.
    assert service.num_sessions == 2 + front_ends
    honest.close()
    for thread in silent:
        thread.join(timeout=30)
    wait_for(lambda: service.num_sessions == 0, 10, what="every session closed")
    assert service.num_sessions == 0


def test_an_evicted_session_that_steps_again_is_told_why():
    """The gate's verdict on a session it gave away: its next step is refused, naming the
    setting; sessions that step are never chosen."""
    from seedlike.rpc.streams import SessionGate

    class Service:
        registry = type("R", (), {"policy_version": 0})()
        closed = []

        def open_session(self, actor_id, num_envs, host):
            return actor_id

        def close_session(self, session_id):
            self.closed.append(session_id)

        def level_probs(self):
            return 0, []

    service, gate = Service(), SessionGate(max_actors=2, max_streams_per_peer=2, evict_idle_s=0.0)
    gate.open(service, 1, 2, Peer("h", "h"))
    gate.open(service, 2, 2, Peer("h", "h"))
    gate.touch(1, waiting=True)  # the server owes session 1 an answer: not idle
    gate.open(service, 3, 2, Peer("h", "h"))
    assert service.closed == [2] and gate.evictions == 1
    assert "server.evict_idle_s" in gate.touch(2, waiting=True)
    assert gate.touch(1, waiting=False) is None
    gate.close(service, 2)  # the evicted stream ends: closed once only
    assert service.closed == [2]


# evict_idle_s leaves room for a loaded machine: with 0.3 s, the newcomer's own connection (after
# the actors' last steps) took longer than that once under a full test run, and a busy session
# looked idle.
@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.transport(evict_idle_s=1.5)
def test_a_busy_session_is_never_evicted(server):
    """Sessions that step keep their slots however long they have been connected."""
    service, address, _ = server
    actors = [
        client.Connection(address, codec.make_hello(SPEC, actor_id=i, num_envs=2)) for i in range(2)
    ]
    sequence = itertools.count()

    def step_both():
        n = next(sequence)
        for actor in actors:
            actor.step(codec.encode_step(n, rows(2)))

    repeat_for(3.0, step_both)  # connected twice evict_idle_s, never silent for it
    with pytest.raises(client.Disconnected, match="RESOURCE_EXHAUSTED: 2 actors are connected"):
        client.Connection(address, codec.make_hello(SPEC, actor_id=2, num_envs=2))
    for actor in actors:
        actor.close()


def test_peer_host_strips_the_port():
    assert peer_host("ipv4:10.0.0.5:4242") == "10.0.0.5"
    assert peer_host("ipv6:[::1]:50051") == "[::1]"
    assert peer_host("unix:/tmp/sock") == "unix:/tmp/sock"


def test_front_ends_come_from_the_core_count():
    from seedlike.rpc.streams import front_ends

    assert [front_ends(-1, cores) for cores in (1, 2, 3, 4, 16, 64)] == [0, 0, 0, 1, 4, 16]
    assert front_ends(0, 64) == 0 and front_ends(3, 2) == 3


def test_a_population_step_writes_to_every_learner_before_it_waits_for_any():
    """client.step_all: with member 0's learner holding its policy calls, member 1's learner
    already has its request and answers it; stepping them one after the other would leave member 1
    without a request until member 0 answered. Then both replies come back, in member order."""
    servers = []
    try:
        for _ in range(2):
            gate = Gate()
            service = service_of(None, gate)
            rpc, port = listen(service, "127.0.0.1", 0, base_config().server)
            servers.append((service, rpc, gate, f"127.0.0.1:{port}"))
        hello = codec.make_hello(SPEC, 0, 2)
        connections = [client.Connection(address, hello) for *_, address in servers]
        (first, _, held, _), (second, *_) = servers
        held.open.clear()
        seen = {}

        def watch():
            try:  # a gate left closed would hang step_all below
                wait_for(lambda: second.env_steps >= 1, 20, what="the second session stepping")
                seen.update(second=second.env_steps, first=first.env_steps)
            finally:
                held.open.set()

        threading.Thread(target=watch, daemon=True).start()
        messages = [codec.encode_step(0, rows(2)), codec.encode_step(0, rows(1))]
        replies = client.step_all(connections, messages)
        assert seen == {"second": 1, "first": 0}
        shapes = [client.decode_actions(r, n, SPEC).shape for r, n in zip(replies, (2, 1))]
        assert shapes == [(2,), (1,)]
        for connection in connections:
            connection.close()
    finally:
        for service, rpc, gate, _ in servers:
            gate.open.set()
            rpc.stop()
            service.stop(finished=True)
