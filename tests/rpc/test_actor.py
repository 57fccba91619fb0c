"""The actor against servers that misbehave after the Hello: it stops, or gives up, in time and
says why in one line (found in review: a reconnect loop that never gave up, and an error hidden
behind a traceback)."""

import logging
import threading

import numpy as np
import pytest

from seedlike import actor as actor_module
from seedlike.config import load_config_file
from seedlike.rpc import codec
from seedlike.rpc import seedlike_pb2 as pb


class WelcomingServer:
    """Connections that are always welcomed; each step is answered by `answer(n_rows)`."""

    def __init__(self, answer, level_probs=()):
        self.answer, self.level_probs, self.connects = answer, list(level_probs), 0

    def connection(self, address, hello, credentials=None):
        server = self

        class Connection:
            def __init__(self):
                server.connects += 1
                self.welcome = pb.Welcome(
                    session_id=server.connects, level_probs=server.level_probs
                )

            async def exchange(self, data):
                step = codec.parse_actor_message(data).step
                rows = len(codec.decode(step.reward, "reward"))
                return pb.ServerMessage(actions=server.answer(rows))

            def close(self):
                pass

        return Connection()


def run_actor(config, server, monkeypatch, timeout_s=30.0):
    """(exit code or None if still running after timeout_s, connections made)."""
    monkeypatch.setattr(actor_module.client, "Connection", server.connection)
    stop = threading.Event()
    actor = actor_module.Actor(config, "127.0.0.1:1", 0, stop)
    out = []
    thread = threading.Thread(target=lambda: out.append(actor.run()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    stop.set()
    thread.join(10)
    return (out[0] if out else None), server.connects


def cartpole(give_up_s=1.0):
    config = load_config_file("configs/cartpole_ppo.py")
    config.env.update(num_envs=2, batch_envs=0, num_threads=1)
    config.actor.update(give_up_s=give_up_s, first_connect_s=give_up_s, backoff_initial_s=0.05)
    return config


def test_a_server_that_welcomes_and_then_fails_every_first_step_is_given_up_on(monkeypatch):
    """Actions out of range on every first step: each stream is refused before any env step,
    and since none gets a step answered the backoff runs on to give_up_s (it used to start
    afresh at every Welcome: reconnecting at 10 Hz for ever)."""
    server = WelcomingServer(lambda rows: pb.ActionBatch(action=codec.encode(np.full(rows, 99))))
    code, connects = run_actor(cartpole(give_up_s=1.0), server, monkeypatch)
    assert code == actor_module.EXIT_GAVE_UP
    assert 2 <= connects <= 12


def test_a_server_with_other_levels_stops_the_actor_naming_the_setting(monkeypatch, caplog):
    """The learner's config has 4 curriculum levels, the actor's 3: the first Welcome says so,
    in one line, and the actor exits 2 (it used to raise UnboundLocalError from the cleanup,
    hiding the message, and then retry)."""
    config = load_config_file("configs/doorkey_curriculum.py")
    config.env.levels = config.env.levels[1:]
    config.env.num_envs = 2
    server = WelcomingServer(lambda rows: None, level_probs=[1.0, 0.0, 0.0, 0.0])
    with caplog.at_level(logging.ERROR):
        code, connects = run_actor(config, server, monkeypatch)
    assert code == actor_module.EXIT_REJECTED and connects == 1
    assert "probabilities of 4 levels, this actor has 3 env.levels" in caplog.text
    assert "UnboundLocalError" not in caplog.text


@pytest.mark.parametrize("config_file", ["configs/cartpole_ppo.py", "configs/coins_teams.py"])
def test_an_env_kwarg_the_env_does_not_take_is_a_config_error(config_file):
    from seedlike.config import ConfigError, env_spec

    config = load_config_file(config_file)
    with config.unlocked():
        config.env.kwargs.foo = 1
    with pytest.raises(ConfigError, match="foo"):
        env_spec(config)
