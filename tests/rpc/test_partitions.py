"""A learner and an actor on hosts of their own (network namespaces,
seedlike/testing/netns.py), with TLS and the actor's own certificate: the network between them
drops every packet for a while and heals. Keepalive, not TCP's own give-up of many minutes, tells
the actor (seedlike.rpc.client.KEEPALIVE_OPTIONS). A learner host that vanishes for good, and a
two-process learner cut in two, are benchmarks/faults.py's learner_vanish and learner_partition
(RESULTS.md, "Identities proven")."""

import re

import pytest

from seedlike.testing import netns
from tests.helpers import make_credentials
from tests.procs import last, log_text, wait_for

pytestmark = pytest.mark.slow  # a learner and an actor process, half a minute of partition

WHY = netns.unavailable()


@pytest.fixture
def hosts():
    if WHY is not None:
        pytest.skip(f"no separate hosts here: {WHY}")
    made = netns.Hosts("learner", "actor")
    yield made
    made.close()


def test_an_actor_notices_a_partition_and_reconnects_after_it(tmp_path, hosts, procs):
    # hosts before procs: the processes are killed before their namespaces go.
    creds = make_credentials(tmp_path / "creds", hosts.address["learner"], actors=("actor-0",))
    tls = f"--config.transport.credentials={creds}"
    logdir = str(tmp_path / "run")
    _, address = procs.learner(
        logdir, f"--bind={hosts.address['learner']}", tls, "--config.log.interval_s=1",
        "--config.total_env_steps=100000000", prefix=hosts.prefix("learner"),
    )  # fmt: skip
    actor = procs.actor(address, 0, tls, prefix=hosts.prefix("actor"))
    wait_for(lambda: (last(logdir, "env_steps") or 0) > 2000, 180, actor, "env steps")

    # Partitioned: no packet either way, no reset. The actor's step in flight fails within its
    # keepalive bound (10 s between pings + 10 s for the answer) and it retries.
    hosts.partition("actor")
    lost = "connection lost"
    wait_for(lambda: lost in log_text(actor), 30, actor, "the actor noticing the partition")
    hosts.heal("actor")
    connected = re.compile(r"actor 0: connected to")
    wait_for(lambda: len(connected.findall(log_text(actor))) >= 2, 60, actor, "the reconnection")
    steps = last(logdir, "env_steps") or 0
    wait_for(lambda: (last(logdir, "env_steps") or 0) > steps + 2000, 60, actor, "more steps")
    log = log_text(actor)
    assert "Traceback" not in log and log.count(lost) == 1, log[-3000:]
