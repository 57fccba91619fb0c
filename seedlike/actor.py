"""An actor: steps a batch of envs (any env backend, seedlike.envs.BACKENDS), streams rows to the
server and applies the actions it returns.

Actors hold no model (SEED RL). Every (re)connection starts fresh episodes: the server keeps no
state for a stream that broke, so a half-played episode could not be attributed correctly.

With several servers (a population: one independent learner per member, docs/teams.md,
"Populations"), the actor holds one stream to each and sends each member the rows of its teams
(seedlike.teams.Teams.member_of), to all members before it waits for any (client.exchange_all); a
step's actions are all members' replies put together.

Shared games (`league.shared_games`, seedlike.league.roles): an exploiter's actor plays the main
agent's live policy. It is a population of two, the main agent's learner (its address read from
the roles' directory at every connection) as member 0 and its own as member 1; each learner gets
its side's rows numbered from player 0, so that it plays them as its learning side against a
rival it does not see, and both learn from every game.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import numpy as np

from seedlike.config import ROLES, ConfigError, env_spec
from seedlike.envs import make_env
from seedlike.envs.spaces import EnvActions
from seedlike.rpc import client, codec, frames, security
from seedlike.teams import Teams
from seedlike.types import take_rows

# 2: rejected or misconfigured, which restarting cannot fix (scripts/train.sh stops the job).
EXIT_OK, EXIT_GAVE_UP, EXIT_REJECTED = 0, 1, 2
# Where the main agent's learner writes its address, under league.role_dir (seedlike.launch.league
# runs it in <role_dir>/main; seedlike.rpc.listen.ADDRESS_FILE).
MAIN_ADDRESS = os.path.join("main", "server_address")
# A shared-game actor's id at the main agent's learner: its role's index x this + its own id, an
# identity of its own there beside the main agent's actors (seedlike.server.influence).
SHARED_ID_STRIDE = 1000


def env_seed(base_seed: int, actor_id: int, connection: int) -> int:
    """Distinct, reproducible env seeds per actor and per connection."""
    return int(np.random.SeedSequence([base_seed, actor_id, connection]).generate_state(1)[0] >> 1)


class Actor:
    def __init__(
        self,
        config,
        server_address: str | list[str],
        actor_id: int,
        stop: threading.Event | None = None,
    ):
        self.config = config
        addresses = [server_address] if isinstance(server_address, str) else server_address
        self.addresses = list(addresses)
        self.address = ",".join(self.addresses)
        self.actor_id = int(actor_id)
        self.stop = stop or threading.Event()
        self.spec = env_spec(config)
        try:
            teams = Teams.from_config(config.teams, self.spec)
            self.env_actions = EnvActions(
                self.spec,
                config.env.action_bounds,
                config.network.action_squash,
            )
            # Stacked observations sent as newest frames where they continue (seedlike.rpc.frames)
            self.stacked = frames.keys_from_config(config.actor.stack_once, self.spec)
        except ValueError as e:
            raise ConfigError(f"invalid config: {e}") from None
        members = int(config.population.size)
        if len(self.addresses) != members:
            raise ConfigError(
                f"--server lists {len(self.addresses)} learner(s) and population.size is "
                f"{members}: give one address per population member, member 0 first"
            )
        self.shared = config.league.role in tuple(config.league.shared_games)
        if self.shared:
            if members != 1 or teams.num_teams != 2:
                raise ConfigError(
                    f"league.shared_games needs a two-team game and one learner per role; "
                    f"{config.env.name} has {teams.num_teams} teams, population.size {members}"
                )
            members = 2  # the main agent's learner first
            self._main_address = os.path.join(config.league.role_dir, MAIN_ADDRESS)
            self._main_id = ROLES.index(config.league.role) * SHARED_ID_STRIDE + int(actor_id)
        self.member = teams.member_of(members)
        # Each member numbers its own players from 0 where games are shared (above).
        self._player_in_member = np.zeros(self.spec.num_players, np.int32)
        for k in range(members):
            mine = np.flatnonzero(self.member == k)
            self._player_in_member[mine] = np.arange(mine.size) if self.shared else mine
        # Given the run's directory, actor i takes its own certificate, DIR/actors/actor-<i>.
        self.credentials = security.load(
            config.transport.credentials, "client", actor=f"actor-{self.actor_id}"
        )
        self.num_envs = int(config.env.num_envs)
        self.num_levels = len(config.env.levels)
        self.steps = 0
        actor_config = config.actor
        self._give_up_s = float(actor_config.give_up_s)
        self._first_connect_s = float(actor_config.first_connect_s)
        self._backoff = client.Backoff(
            initial_s=float(actor_config.backoff_initial_s),
            max_s=float(actor_config.backoff_max_s),
            give_up_s=self._first_connect_s,
            seed=int(config.seed) * 100_003 + self.actor_id,
            sleep=self.stop.wait,  # a stop request ends the wait
        )

    def run(self) -> int:
        """Plays until the server ends training (0), rejects us (2) or stays away too long (1)."""
        hello = codec.make_hello(self.spec, self.actor_id, self.num_envs, self.stacked)
        attempts = 0
        while not self.stop.is_set():
            try:
                connections = self._connect(hello)
            except client.Disconnected as e:
                if not self._backoff.wait():
                    logging.error(
                        "actor %d: giving up on %s after %g s (%s; actor.%s)",
                        self.actor_id,
                        self.address,
                        self._backoff.give_up_s,
                        e,
                        "give_up_s" if self._backoff.give_up_s == self._give_up_s
                        else "first_connect_s",
                    )  # fmt: skip
                    return EXIT_GAVE_UP
                logging.info("actor %d: cannot connect: %s; retrying", self.actor_id, e)
                continue
            except client.Rejected as e:
                logging.error("actor %d: server rejected the handshake: %s", self.actor_id, e)
                return EXIT_REJECTED
            except client.TrainingOver:
                return EXIT_OK
            self._backoff.give_up_s = self._give_up_s  # a server seen once may come back later
            logging.info(
                "actor %d: connected to %s (session %s)",
                self.actor_id,
                self.address,
                ",".join(str(c.welcome.session_id) for c in connections),
            )
            steps = self.steps
            try:
                self._play(connections, env_seed(int(self.config.seed), self.actor_id, attempts))
            except client.TrainingOver:
                logging.info(
                    "actor %d: server ended training after %d steps", self.actor_id, self.steps
                )
                return EXIT_OK
            except client.Rejected as e:
                logging.error("actor %d: server rejected a step: %s", self.actor_id, e)
                return EXIT_REJECTED
            except ConfigError as e:
                logging.error("actor %d: %s", self.actor_id, e)
                return EXIT_REJECTED
            except client.Disconnected as e:
                logging.warning("actor %d: connection lost (%s); reconnecting", self.actor_id, e)
                # Only a stream that got steps answered starts the backoff afresh: a server that
                # welcomes and then fails every first step is given up on after give_up_s.
                if self.steps > steps:
                    self._backoff.reset()
                if not self._backoff.wait():
                    return EXIT_GAVE_UP
            finally:
                for connection in connections:
                    connection.close()
                attempts += 1
        return EXIT_OK

    def _connect(self, hello) -> list[client.Connection]:
        """One stream per server, all or none."""
        targets = [(address, hello) for address in self.addresses]
        if self.shared:
            try:
                with open(self._main_address) as f:
                    main = f.read().strip()
            except OSError:
                main = ""
            if not main:
                raise client.Disconnected(
                    f"the main agent's learner is not up ({self._main_address})"
                )
            main_hello = codec.make_hello(self.spec, self._main_id, self.num_envs, self.stacked)
            targets.insert(0, (main, main_hello))
        connections = []
        try:
            for address, message in targets:
                connections.append(
                    client.Connection(address, message, credentials=self._fresh_credentials())
                )
        except BaseException:
            for connection in connections:
                connection.close()
            raise
        return connections

    def _fresh_credentials(self):
        """The credentials as the files hold them now: a certificate reissued while the actor
        runs is used from its next connection on (the old ones while the files are half written)."""
        if self.credentials is not None:
            try:
                self.credentials = security.Credentials.load(self.credentials.directory, "client")
            except security.TransportError:
                pass
        return self.credentials

    def _play(self, connections: list[client.Connection], seed: int) -> None:
        try:
            env = make_env(self.config.env, self.spec, seed)
        except (ValueError, ImportError, TypeError) as e:  # restarting cannot fix these
            raise ConfigError(f"cannot make {self.config.env.name}: {e}") from None
        self._session_steps = 0
        try:
            self._levels(env, connections[0].welcome)
            env.reset()
            # The whole loop is one coroutine on the streams' event loop (client.exchange_all).
            client.run(self._act(env, connections))
        finally:
            self.steps += self._session_steps
            env.close()

    async def _act(self, env, connections: list[client.Connection]) -> None:
        sequence = [0] * len(connections)
        # Each stream remembers the stacks it sent (a new stream starts with whole ones).
        deltas = [
            frames.Deltas(self.spec, self.stacked, self.num_envs) if self.stacked else None
            for _ in connections
        ]
        started = last_log = time.monotonic()
        while not self.stop.is_set():
            rows = env.recv()
            if len(connections) == 1:
                actions = await self._step(connections[0], sequence, rows, env, deltas[0])
            else:
                actions = await self._step_members(connections, sequence, rows, env, deltas)
            env.send(self.env_actions(actions), rows)
            self._session_steps += rows.reward.shape[0]
            if time.monotonic() - last_log > 30.0:
                last_log = time.monotonic()
                sps = self._session_steps / (last_log - started)
                logging.info(
                    "actor %d: %d steps, %.0f steps/s", self.actor_id, self._session_steps, sps
                )
                self._log_episode_infos(env)

    def _log_episode_infos(self, env) -> None:
        """Means of the numbers PettingZoo envs report when an agent's episode ends (Neural MMO's
        lifetime and achievements), per population member, as one JSON line each."""
        ended = env.episode_infos() if hasattr(env, "episode_infos") else []
        by_member: dict[int, list[dict]] = {}
        for player, numbers in ended:
            by_member.setdefault(int(self.member[player]), []).append(numbers)
        for k, episodes in sorted(by_member.items()):
            keys = sorted({key for numbers in episodes for key in numbers})
            means = {key: float(np.mean([n.get(key, 0.0) for n in episodes])) for key in keys}
            logging.info(
                "actor %d: episode infos %s",
                self.actor_id,
                json.dumps({"member": k, "episodes": len(episodes), **means}),
            )

    async def _step_members(self, connections, sequence, rows, env, deltas) -> np.ndarray:
        """A population's step: each member gets its own agents' rows (none: no message this
        step), all members at once (client.exchange_all)."""
        act = self.spec.action_spec
        actions = np.zeros((rows.reward.shape[0], *act.shape), act.dtype)
        member = self.member[rows.player_id]
        parts = []
        for k in range(len(connections)):
            idx = np.flatnonzero(member == k)
            if idx.size:
                part = take_rows(rows, idx)
                parts.append(
                    (k, idx, part._replace(player_id=self._player_in_member[part.player_id]))
                )
        messages = [codec.step_bytes(sequence[k], part, deltas[k]) for k, _, part in parts]
        replies = await client.exchange_all([connections[k] for k, _, _ in parts], messages)
        for (k, idx, _), reply in zip(parts, replies):
            sequence[k] += 1
            if k == 0:  # a population's curriculum is member 0's
                self._levels(env, reply)
            actions[idx] = client.decode_actions(reply, idx.size, self.spec)
        return actions

    async def _step(self, connection, sequence: list[int], rows, env, deltas) -> np.ndarray:
        (reply,) = await client.exchange_all(
            [connection], [codec.step_bytes(sequence[0], rows, deltas)]
        )
        sequence[0] += 1
        self._levels(env, reply)
        return client.decode_actions(reply, rows.reward.shape[0], self.spec)

    def _levels(self, env, message) -> None:
        """Curriculum levels (env.levels): the probabilities the server sent, if any."""
        if self.num_levels:
            probs = client.decode_level_probs(message, self.num_levels)
            if probs is not None:
                env.set_level_probs(probs)
