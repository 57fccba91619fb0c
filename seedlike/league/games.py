"""Playing two-player games between agents, locally (no server): evaluation, TrueSkill
reference ratings and the `play.py` command. The envs come from the env section's backend
(seedlike.envs.BACKENDS), envpool's board games by default.

An agent (seedlike.league.players.Agent) maps the acting rows of a batch to actions: a built-in bot
(seedlike.league.players.BOTS) or a network policy (from published params or a checkpoint).
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import ml_collections
import numpy as np

from seedlike import envs
from seedlike.config import section
from seedlike.league import players, search
from seedlike.policy import PolicyRunner
from seedlike.types import LEGAL_ACTION_MASK


class NetworkAgent:
    """A network policy with per-env recurrent state (an Agent).

    Args:
      runner: the policy's seedlike.policy.PolicyRunner (sampled or greedy moves; one runner can
        serve many agents of the same network, so it compiles once).
      policy_params: the policy ({"params", "obs_norm"}).
    """

    def __init__(self, runner: PolicyRunner, policy_params, name="network", env=None):
        self.name = name
        self.runner = runner
        self.network = runner.network
        self.policy_params = policy_params
        self.env = env  # the env section it was trained in, where known (a checkpoint's)
        self._carry = None

    def reset(self, num_envs: int) -> None:
        # Writable host copies (np.asarray of a jax array is a read-only view).
        self._carry = jax.tree.map(np.array, self.network.initial_carry(num_envs))

    def act(self, obs, legal_mask, env_id, first, rng) -> np.ndarray:
        carry = jax.tree.map(lambda c: c[env_id], self._carry)
        extras = {LEGAL_ACTION_MASK: legal_mask}
        out = self.runner.step(self.policy_params, obs, extras, carry, first)
        for store, new in zip(jax.tree.leaves(self._carry), jax.tree.leaves(out.carry)):
            store[env_id] = new
        return out.action


def load_policy(path: str):
    """(network, {"params", "obs_norm"}, label) of a run, a checkpoint or a league snapshot
    (<run>/league/snapshots/<version>; the run's checkpoint supplies the network config)."""
    return _load(path)[1:]


def _load(path: str):
    """(the run's config, network, policy params, label): `load_policy`'s, with the config."""
    from seedlike.checkpoint import load_checkpoint
    from seedlike.league.league import load_snapshot

    path = os.path.abspath(path)
    snapshots, version = os.path.split(path)
    if os.path.basename(snapshots) == "snapshots" and version.isdigit():
        run = os.path.dirname(os.path.dirname(snapshots))
        config, network, state, _ = load_checkpoint(run)
        target = {"params": state.params, "obs_norm": state.obs_norm}
        params = load_snapshot(snapshots, int(version), target)
        return config, network, params, f"{run}@v{version}"
    config, network, state, meta = load_checkpoint(path)
    params = {"params": state.params, "obs_norm": state.obs_norm}
    version = meta.get("policy_version", int(state.policy_version))
    return config, network, params, f"{path}@{version}"


def checkpoint_agent(
    path: str, greedy: bool = False, name: str | None = None, search_depth: int = 0
):
    """The policy of a run, checkpoint or league snapshot; with search_depth > 0 it plays by
    negamax search to that depth with its value head at the leaves (seedlike.league.search)."""
    config, network, params, label = _load(path)
    label = name or label
    if search_depth > 0:
        name = f"{label}+search{search_depth}"
        return search.SearchAgent(network, params, search_depth, name=name, env=config.env)
    return NetworkAgent(PolicyRunner(network, greedy=greedy), params, name=label, env=config.env)


def make_agent(spec: str, greedy: bool = False, search_depth: int = 0):
    """A bot's name ('random', 'scripted' for Connect Four), 'human' (you, at the keyboard), or a
    run, checkpoint or league snapshot path."""
    if spec in players.BOTS:
        return players.BOTS[spec].make()
    if spec == "human":
        return players.HumanAgent()
    return checkpoint_agent(spec, greedy=greedy, search_depth=search_depth)


def game_of(agents):
    """The game the first checkpoint among `agents` was trained on: its env section (its
    backend, e.g. pgx's games), or its env's name (None without a checkpoint)."""
    for agent in agents:
        if getattr(agent, "env", None) is not None:
            return agent.env
        if hasattr(agent, "network"):
            return agent.network.spec.name
    return None


@dataclasses.dataclass
class MatchResult:
    """Outcomes from the first agent's point of view (+1 win, 0 draw, -1 loss)."""

    outcomes: list[int]
    first_mover: list[bool]  # whether the first agent moved first in each game

    @property
    def wins(self) -> int:
        return sum(o > 0 for o in self.outcomes)

    @property
    def draws(self) -> int:
        return sum(o == 0 for o in self.outcomes)

    @property
    def losses(self) -> int:
        return sum(o < 0 for o in self.outcomes)

    def win_rate(self, moved_first: bool | None = None) -> float:
        picked = [
            o
            for o, f in zip(self.outcomes, self.first_mover)
            if moved_first is None or f == moved_first
        ]
        return sum(o > 0 for o in picked) / max(len(picked), 1)


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% for z = 1.96)."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


class Interrupted(Exception):
    """play_match was asked to stop before its games were done."""


def match_env(env, num_envs: int) -> ml_collections.ConfigDict:
    """The env section of a match: `env` (an env section, any backend, or an envpool task id)
    with `num_envs` envs stepped together."""
    base = section("env", name=env) if isinstance(env, str) else env
    config = ml_collections.ConfigDict(base.to_dict())
    config.num_envs, config.batch_envs = int(num_envs), 0
    return config


def play_match(
    env,
    agent_a,
    agent_b,
    num_games: int,
    seed: int = 0,
    num_envs: int = 16,
    stop=None,
) -> MatchResult:
    """Plays num_games of a two-player game, agent_a as player 0 and agent_b as player 1; `env`
    is an env section (its backend makes the envs) or an envpool task id.

    The env picks the first mover at random every game (envpool's board games do), so both
    agents play both colours. With an interactive agent (a person) one game runs at a time.
    Agents with a `game_over` method hear each of their games' outcome (and see its last board);
    an agent that raises players.MatchEnded ends the match with the games finished so far.
    Raises Interrupted as soon as the threading.Event `stop` is set.
    """
    if any(getattr(agent, "interactive", False) for agent in (agent_a, agent_b)):
        num_envs = 1
    env_config = match_env(env, min(num_envs, num_games))
    spec = envs.make_env_spec(env_config)
    if spec.num_players != 2:
        raise ValueError(f"{env_config.name} is not a two-player game")
    env = envs.make_env(env_config, spec, seed)
    n_envs = int(env_config.num_envs)
    agents = (agent_a, agent_b)
    for agent in agents:
        agent.reset(n_envs)
    rng = np.random.default_rng(seed)
    result = MatchResult([], [])
    first_mover = np.full(n_envs, -1)  # player who moved first in each env's current game
    first = np.ones((2, n_envs), bool)  # per player: next move starts a game (carry reset)
    env.reset()
    while len(result.outcomes) < num_games:
        if stop is not None and stop.is_set():
            env.close()
            raise Interrupted()
        rows = envs.in_env_order(env.recv())
        done = rows.terminated | rows.truncated
        actions = np.zeros(rows.reward.shape[0], np.int32)
        for i in np.flatnonzero(done & (rows.player_id == 0)):
            e = rows.env_id[i]
            if len(result.outcomes) < num_games:
                outcome = int(np.sign(rows.reward[i]))
                result.outcomes.append(outcome)
                result.first_mover.append(bool(first_mover[e] == 0))
                for p, (agent, sign) in enumerate(zip(agents, (1, -1))):
                    if hasattr(agent, "game_over"):
                        final = np.flatnonzero((rows.env_id == e) & (rows.player_id == p) & done)
                        board = rows.obs["obs"][final[0]] if final.size else None
                        agent.game_over(sign * outcome, board)
            first_mover[e], first[:, e] = -1, True
        for p, agent in enumerate(agents):
            mine = rows.acting & (rows.player_id == p)
            if not mine.any():
                continue
            env_ids = rows.env_id[mine]
            fresh = first_mover[env_ids] < 0
            first_mover[env_ids[fresh]] = p
            obs = {k: v[mine] for k, v in rows.obs.items()}
            mask = rows.extras[LEGAL_ACTION_MASK][mine]
            try:
                actions[mine] = agent.act(obs, mask, env_ids, first[p, env_ids], rng)
            except players.MatchEnded:
                env.close()
                return result
            first[p, env_ids] = False
        env.send(actions, rows)
    env.close()
    return result


def summarize(result: MatchResult) -> dict:
    """Counts, win rate with its 95% Wilson interval, and win rates by who moved first."""
    n = len(result.outcomes)
    return {
        "games": n,
        "wins": result.wins,
        "draws": result.draws,
        "losses": result.losses,
        "win_rate": result.wins / max(n, 1),
        "win_rate_ci95": wilson_interval(result.wins, n),
        "win_rate_first": result.win_rate(moved_first=True),
        "win_rate_second": result.win_rate(moved_first=False),
    }
