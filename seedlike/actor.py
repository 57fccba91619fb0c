"""An actor: steps a batch of envs (envpool or PettingZoo), streams rows to the server and
applies the actions it returns.

Actors hold no model (SEED RL). Every (re)connection starts fresh episodes: the server keeps no
state for a stream that broke, so a half-played episode could not be attributed correctly.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from seedlike.envs import make_env, make_env_spec
from seedlike.rpc import client, codec, security

EXIT_OK, EXIT_GAVE_UP, EXIT_REJECTED = 0, 1, 2


def env_seed(base_seed: int, actor_id: int, connection: int) -> int:
    """Distinct, reproducible env seeds per actor and per connection."""
    return int(np.random.SeedSequence([base_seed, actor_id, connection]).generate_state(1)[0] >> 1)


class Actor:
    def __init__(
        self, config, server_address: str, actor_id: int, stop: threading.Event | None = None
    ):
        self.config = config
        self.address = server_address
        self.actor_id = int(actor_id)
        self.stop = stop or threading.Event()
        self.spec = make_env_spec(config.env)
        self.credentials = security.load(
            config.get("transport", {}).get("credentials", ""), "client"
        )
        self.num_envs = int(config.env.num_envs)
        self.steps = 0
        actor_config = config.get("actor", {})
        self._backoff = client.Backoff(
            initial_s=float(actor_config.get("backoff_initial_s", 0.1)),
            max_s=float(actor_config.get("backoff_max_s", 5.0)),
            give_up_s=float(actor_config.get("give_up_s", 300.0)),
            seed=int(config.seed) * 100_003 + self.actor_id,
        )

    def run(self) -> int:
        """Plays until the server ends training (0), rejects us (2) or stays away too long (1)."""
        hello = codec.make_hello(self.spec, self.actor_id, self.num_envs)
        connections = 0
        while not self.stop.is_set():
            try:
                connection = client.Connection(self.address, hello, credentials=self.credentials)
            except client.Disconnected as e:
                logging.info("actor %d: cannot connect to %s (%s)", self.actor_id, self.address, e)
                if not self._backoff.wait():
                    logging.error("actor %d: giving up on %s", self.actor_id, self.address)
                    return EXIT_GAVE_UP
                continue
            except client.Rejected as e:
                logging.error("actor %d: server rejected the handshake: %s", self.actor_id, e)
                return EXIT_REJECTED
            except client.TrainingOver:
                return EXIT_OK
            self._backoff.reset()
            logging.info(
                "actor %d: connected to %s (session %d)",
                self.actor_id,
                self.address,
                connection.welcome.session_id,
            )
            try:
                self._play(connection, env_seed(int(self.config.seed), self.actor_id, connections))
            except client.TrainingOver:
                logging.info(
                    "actor %d: server ended training after %d steps", self.actor_id, self.steps
                )
                return EXIT_OK
            except client.Rejected as e:
                logging.error("actor %d: server rejected a step: %s", self.actor_id, e)
                return EXIT_REJECTED
            except client.Disconnected as e:
                logging.warning("actor %d: connection lost (%s); reconnecting", self.actor_id, e)
                if not self._backoff.wait():
                    return EXIT_GAVE_UP
            finally:
                connection.close()
                connections += 1
        return EXIT_OK

    def _play(self, connection: client.Connection, seed: int) -> None:
        env = make_env(self.config.env, self.spec, seed)
        try:
            env.reset()
            sequence, session_steps = 0, 0
            started = last_log = time.monotonic()
            while not self.stop.is_set():
                rows = env.recv()
                reply = connection.step(codec.encode_step(sequence, rows))
                actions = client.decode_actions(reply, rows.reward.shape[0], self.spec.num_actions)
                env.send(actions, rows)
                sequence += 1
                session_steps += rows.reward.shape[0]
                if time.monotonic() - last_log > 30.0:
                    last_log = time.monotonic()
                    sps = session_steps / (last_log - started)
                    logging.info(
                        "actor %d: %d steps, %.0f steps/s", self.actor_id, session_steps, sps
                    )
        finally:
            self.steps += session_steps
            env.close()
