"""The league service: frozen snapshots of the learning policy and who plays whom.

In a two-player game every env has two seats. The learning policy always plays player 0 (envpool
picks the first mover at random, so it plays both colours); at the start of every episode player 1
gets an opponent from the configured sampler: the learning policy itself (self-play) or a frozen
snapshot; with `league.bots`, sometimes a built-in bot. Steps played by snapshots and bots are
recorded (snapshots keep recurrent state) but never trained on.

Thread safety: the inference thread asks for opponents and snapshot params and reports results; the
learner thread adds snapshots and saves the state. One lock guards everything.
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from seedlike.league import players
from seedlike.league.payoff import PayoffMatrix
from seedlike.league.players import LEARNER
from seedlike.league.pool import OpponentPool
from seedlike.league.samplers import make_sampler


def sampler_kwargs(league_config) -> dict:
    name = league_config.sampler
    kwargs = {}
    if league_config.get("p_latest") is not None and name != "latest":
        kwargs["p_latest"] = float(league_config.p_latest)
    if name == "pfsp":
        kwargs["weighting"] = league_config.pfsp_weighting
        kwargs["p"] = float(league_config.pfsp_p)
    if name == "uniform_recent":
        kwargs["k"] = int(league_config.recent_k)
    if name == "openai_five":
        kwargs["eta"] = float(league_config.quality_eta)
    return kwargs


class League:
    def __init__(self, league_config, seed: int = 0, snapshot_dir: str | None = None):
        self.config = league_config
        self.pool = OpponentPool(max_size=int(league_config.max_snapshots) or None)
        self.payoff = PayoffMatrix(
            prior_games=float(league_config.payoff_prior_games),
            decay=float(league_config.payoff_decay),
        )
        self.sampler = make_sampler(
            league_config.sampler,
            pool=self.pool,
            payoff=self.payoff,
            **sampler_kwargs(league_config),
        )
        self.snapshot_dir = snapshot_dir
        self._params: dict[int, object] = {}
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(seed)
        self._results: list[tuple[int, int]] = []  # (opponent, outcome) since the last metrics
        unknown = sorted(set(league_config.bots) - set(players.BOTS))
        if unknown:
            raise ValueError(f"unknown league.bots {unknown}; choose from {sorted(players.BOTS)}")
        self.bot_names = tuple(league_config.bots)
        self.bots = [players.bot_id(name) for name in self.bot_names]
        self.p_bots = float(league_config.p_bots)
        if not 0.0 <= self.p_bots <= 1.0 or (self.p_bots > 0) != bool(self.bots):
            raise ValueError(
                f"league.p_bots = {self.p_bots} with league.bots = {tuple(league_config.bots)}: "
                "set p_bots in (0, 1] together with at least one bot, or p_bots = 0 and no bots"
            )

    # Inference thread -------------------------------------------------------------------------

    def opponents(self, n: int) -> np.ndarray:
        """Policy ids (LEARNER, a snapshot version or a bot) for n new episodes of player 1."""
        with self._lock:
            picks = [
                self._rng.choice(self.bots)
                if self.bots and self._rng.random() < self.p_bots
                else self.sampler.sample(self._rng)
                for _ in range(n)
            ]
        return np.array(picks, np.int64)

    def params(self, policy: int):
        """A snapshot's policy params, or None if it has left the pool."""
        with self._lock:
            return self._params.get(int(policy))

    def record(self, opponent: int, outcome: int) -> None:
        """The learning policy's result (+1/0/-1) against `opponent` in one game."""
        with self._lock:
            self._results.append((int(opponent), int(outcome)))
            if opponent >= 0:  # a snapshot in the pool
                self.payoff.record(LEARNER, int(opponent), int(outcome))
                self.sampler.update(int(opponent), int(outcome))

    # Learner thread ---------------------------------------------------------------------------

    def wants_snapshot(self, version: int) -> bool:
        every = int(self.config.snapshot_every)
        return version > 0 and version % every == 0 and version not in self.pool

    def add_snapshot(self, version: int, policy_params) -> None:
        """Freezes the learning policy of `version` into the pool (and onto disk)."""
        if self.snapshot_dir is not None:
            save_snapshot(self.snapshot_dir, version, policy_params)
        with self._lock:
            self.pool.add(version)
            self._params[version] = policy_params
            for gone in set(self._params) - set(self.pool.ids):
                del self._params[gone]
                self.payoff.remove(gone)
        logging.info("league: snapshot %d joined the pool (%d entries)", version, len(self.pool))

    def state_dict(self) -> dict:
        with self._lock:
            return {"pool": self.pool.state_dict(), "payoff": self.payoff.state_dict()}

    def load_state_dict(self, state: dict, target_params) -> None:
        """Restores pool and payoff, and every snapshot's params from snapshot_dir."""
        pool = OpponentPool.from_state_dict(state["pool"])
        payoff = PayoffMatrix.from_state_dict(state["payoff"])
        # The counts are the run's; how they are weighed is this config's (a resume may change it).
        payoff.prior_games, payoff.decay = self.payoff.prior_games, self.payoff.decay
        params = {v: load_snapshot(self.snapshot_dir, v, target_params) for v in pool.ids}
        with self._lock:
            self.pool, self.payoff, self._params = pool, payoff, params
            self.sampler = make_sampler(
                self.config.sampler, pool=pool, payoff=payoff, **sampler_kwargs(self.config)
            )

    def take_metrics(self) -> dict:
        """Results since the last call, from the learning policy's side."""
        with self._lock:
            results, self._results = self._results, []
            pool_size = len(self.pool)
        vs_pool = [o for p, o in results if p >= 0]
        out = {"league/pool_size": pool_size, "league/games_vs_pool": len(vs_pool)}
        out["league/win_rate_vs_pool"] = np.mean([o > 0 for o in vs_pool]) if vs_pool else None
        out["league/score_vs_pool"] = np.mean([(o + 1) / 2 for o in vs_pool]) if vs_pool else None
        for bot in self.bots:
            vs_bot = [o for p, o in results if p == bot]
            rate = np.mean([o > 0 for o in vs_bot]) if vs_bot else None
            out[f"league/win_rate_vs_{players.bot_name(bot)}"] = rate
        return out


def _snapshot_path(directory: str, version: int) -> str:
    return os.path.join(os.path.abspath(directory), str(int(version)))


def save_snapshot(directory: str, version: int, policy_params) -> None:
    """Writes {"params", "obs_norm"} of a snapshot as an orbax checkpoint <directory>/<version>."""
    import jax
    import orbax.checkpoint as ocp

    path = _snapshot_path(directory, version)
    if os.path.exists(path):
        return
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, jax.device_get(policy_params))


def load_snapshot(directory: str, version: int, target_params):
    import jax
    import orbax.checkpoint as ocp

    path = _snapshot_path(directory, version)
    if not os.path.isdir(path):
        present = []
        if os.path.isdir(directory):
            present = sorted(int(v) for v in os.listdir(directory) if v.isdigit())
        raise FileNotFoundError(
            f"no league snapshot {version} in {directory}; it holds {len(present)} snapshots: "
            f"{_summary(present) or 'none'}"
        )
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_params)
    with ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(path, abstract)


def _summary(versions: list[int]) -> str:
    """Sorted versions as '20, 40, 60, ..., 2600' (the first three and the last)."""
    if len(versions) <= 4:
        return ", ".join(map(str, versions))
    return ", ".join(map(str, versions[:3])) + f", ..., {versions[-1]}"
