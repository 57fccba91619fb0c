"""The league service: frozen snapshots of the learning policy and who plays whom (and, in a
league of roles, the snapshots of the other roles: seedlike.league.roles, `PeerSnapshots`).

In a two-player game every env has two seats. The learning policy always plays player 0 (envpool
picks the first mover at random, so it plays both colours); at the start of every episode player 1
gets an opponent from the configured sampler: the learning policy itself (self-play) or a frozen
snapshot; with `league.bots`, sometimes a built-in bot. Steps played by snapshots and bots are
recorded (snapshots keep recurrent state) but never trained on.

Shared games (`league.shared_games`, league roles): an exploiter's actors play the main agent's
live policy, sending each side's rows to its own learner, so both learn from every such game.
Here they end as games against `UNSEEN`: the main exploiter counts them as games against the
newest main snapshot it holds (the main agent as it knows it; what its reset rule judges), every
other role only in its metrics (`league/win_rate_vs_shared`).

Thread safety: the inference thread asks for opponents and snapshot params and reports results; the
learner thread adds snapshots and saves the state; `PeerSnapshots`'s thread adds the other roles'.
One lock guards everything.
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from seedlike.league import players, roles
from seedlike.league.payoff import PayoffMatrix
from seedlike.league.players import LEARNER, ROLES, UNSEEN
from seedlike.league.pool import OpponentPool
from seedlike.league.roles import MainExploiterSampler, ResetRule
from seedlike.league.samplers import PFSPSampler, make_sampler, sample


def make_role_sampler(league_config, pool, payoff):
    """The sampler of the league's role (seedlike.league.roles): the config's for the main agent
    and a single-role league, the main exploiter's own, PFSP "hard" without self-play for the
    league exploiter."""
    role = league_config.role
    if role == "main_exploiter":
        return MainExploiterSampler(pool, payoff)
    if role == "league_exploiter":
        return PFSPSampler(pool, payoff, "hard", float(league_config.pfsp_p), p_latest=0.0)
    name = league_config.sampler
    return make_sampler(name, pool=pool, payoff=payoff, **sampler_kwargs(league_config))


def bots_of(league_config) -> tuple[str, ...]:
    """The bots a league's learner plays: league.bots, none for an exploiter (it learns against
    the league alone)."""
    return () if league_config.role in roles.EXPLOITERS else tuple(league_config.bots)


def sampler_kwargs(league_config) -> dict:
    name = league_config.sampler
    kwargs = {}
    if league_config.p_latest is not None and name != "latest":
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
        self.pool = OpponentPool(max_size=int(league_config.max_snapshots) or None)  # 0: no limit
        self.payoff = PayoffMatrix(
            prior_games=float(league_config.payoff_prior_games),
            decay=float(league_config.payoff_decay),
        )
        self.role = league_config.role  # "" for a single-role league
        # Whose snapshots these are: a single-role league's are its main agent's.
        self.own_role = self.role or "main"
        self.role_dir = league_config.role_dir
        self.sampler = make_role_sampler(league_config, self.pool, self.payoff)
        self.rule = None
        if self.role in ("main_exploiter", "league_exploiter"):
            reset_p = (
                1.0 if self.role == "main_exploiter" else league_config.league_exploiter_reset_p
            )
            self.rule = ResetRule(
                self.role,
                league_config.exploit_win_rate,
                league_config.exploit_min_games,
                league_config.reset_env_steps,
                reset_p,
                seed,
            )
        self._newest = {role: -1 for role in ROLES}  # newest snapshot version taken, per role
        self.exploit_win_rate = float("nan")  # what the last ResetRule judgement read
        self.snapshot_dir = snapshot_dir
        self._params: dict[int, object] = {}
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(seed)
        self._results: list[tuple[int, int]] = []  # (opponent, outcome) since the last metrics
        unknown = sorted(set(league_config.bots) - set(players.BOTS))
        if unknown:
            raise ValueError(f"unknown league.bots {unknown}; choose from {sorted(players.BOTS)}")
        p_bots = float(league_config.p_bots)
        if not 0.0 <= p_bots <= 1.0 or (p_bots > 0) != bool(league_config.bots):
            raise ValueError(
                f"league.p_bots = {p_bots} with league.bots = {tuple(league_config.bots)}: "
                "set p_bots in (0, 1] together with at least one bot, or p_bots = 0 and no bots"
            )
        self.bot_names = bots_of(league_config)
        self.bots = [players.bot_id(name) for name in self.bot_names]
        self.p_bots = p_bots if self.bot_names else 0.0

    # Inference thread -------------------------------------------------------------------------

    def opponents(self, n: int) -> np.ndarray:
        """Policy ids (LEARNER, a snapshot version or a bot) for n new episodes of player 1."""
        with self._lock:
            picks = sample(self.sampler, self._rng, n)
            if self.bots:
                bot = self._rng.random(n) < self.p_bots
                picks[bot] = self._rng.choice(self.bots, size=int(bot.sum()))
        return picks

    def probabilities(self) -> dict[int, float]:
        """The chance of each opponent (LEARNER, a snapshot, a bot) at an episode start, what
        `opponents` draws from: the sampler's, with league.p_bots shared among the bots."""
        with self._lock:
            probs = self.sampler.probabilities()
        out = {policy: p * (1.0 - self.p_bots) for policy, p in probs.items()}
        for bot in self.bots:
            out[bot] = out.get(bot, 0.0) + self.p_bots / len(self.bots)
        return out

    def pool_ids(self) -> list[int]:
        """The pool's policy ids now, oldest first (the other roles' join from their thread)."""
        with self._lock:
            return self.pool.ids

    def params(self, policy: int):
        """A snapshot's policy params, or None if it has left the pool."""
        with self._lock:
            return self._params.get(int(policy))

    def past_probabilities(self) -> dict[int, float]:
        """Each snapshot's probability given a past opponent is played (the samplers' past
        mixture; {} for a sampler without one)."""
        with self._lock:
            if not len(self.pool) or not hasattr(self.sampler, "past_probabilities"):
                return {}
            return dict(zip(self.pool.ids, self.sampler.past_probabilities().tolist()))

    def record(self, opponent: int, outcome: int, drawn: float | None = None) -> None:
        """The learning policy's result (+1/0/-1) against `opponent` in one game (`drawn`: the
        past-mixture probability it was drawn with, where draws stood still: samplers.py)."""
        with self._lock:
            self._results.append((int(opponent), int(outcome)))
            if opponent == UNSEEN and self.role == "main_exploiter":
                opponent = roles.newest(self.pool, "main")  # the live main agent, as known here
                if opponent is None:
                    return
            if opponent >= 0:  # a snapshot in the pool
                self.payoff.record(LEARNER, int(opponent), int(outcome))
                self.sampler.update(int(opponent), int(outcome), drawn)

    # Learner thread ---------------------------------------------------------------------------

    def own_id(self, version: int) -> int:
        """The policy id of this league's own snapshot of `version` (its version where the
        league has no roles, and for the main agent)."""
        return roles.snapshot_id(self.own_role, version)

    def wants_snapshot(self, version: int) -> bool:
        every = int(self.config.snapshot_every)
        return version > 0 and version % every == 0 and self.own_id(version) not in self.pool

    def add_snapshot(self, version: int, policy_params) -> None:
        """Freezes the learning policy of `version` into the pool (and onto disk, where the other
        roles pick it up). An exploiter's snapshot stays out of its own pool when it does not
        play its own role (the main exploiter).

        A version already on disk was reached before, on a timeline lost to a crash (or to a
        checkpoint that fell back): the other roles, evaluation and a resume know that one, so
        the pool takes it too, and a policy id always means one policy."""
        if self.snapshot_dir is not None and not save_snapshot(
            self.snapshot_dir, version, policy_params
        ):
            logging.warning(
                "league: snapshot %d is on disk from before the run resumed; the pool uses it",
                version,
            )
            policy_params = load_snapshot(self.snapshot_dir, version, policy_params)
        own = self.own_role
        if own not in roles.OPPONENT_ROLES[own]:
            logging.info("league: %s snapshot %d saved for the other roles", own, version)
            return
        self._add(self.own_id(version), policy_params)

    def add_peer_snapshot(self, role: str, version: int, policy_params) -> None:
        """Another role's snapshot, read from its directory (roles.PeerSnapshots)."""
        self._add(roles.snapshot_id(role, version), policy_params)

    def skip_peer_version(self, role: str, version: int) -> None:
        with self._lock:
            self._newest[role] = max(self._newest[role], int(version))

    def newest_version(self, role: str) -> int:
        """The newest version of `role`'s snapshots this league has taken (-1: none)."""
        with self._lock:
            return self._newest[role]

    def _add(self, policy: int, policy_params) -> None:
        with self._lock:
            self.pool.add(policy)
            role, version = roles.role_of(policy), roles.version_of(policy)
            self._newest[role] = max(self._newest[role], version)
            self._params[policy] = policy_params
            for gone in set(self._params) - set(self.pool.ids):
                del self._params[gone]
                self.payoff.remove(gone)
        logging.info(
            "league: snapshot %s joined the pool (%d entries)",
            players.describe(policy),
            len(self.pool),
        )

    def after_update(self, version: int, env_steps: int, policy_params) -> bool:
        """The league's part of the learner thread after update `version` (the role's
        `env_steps` so far; `policy_params()` gives that version's params): the main agent's
        periodic snapshot, or an exploiter's snapshot and reset (roles.ResetRule). True: the
        learner resets now. An exploiter's own results are forgotten when it joins the league,
        so the next judgement rests on games played after it."""
        if self.rule is None:
            if self.wants_snapshot(version):
                self.add_snapshot(version, policy_params())
            return False
        with self._lock:
            succeeded, self.exploit_win_rate = self.rule.success(
                self.sampler, self.pool, self.payoff
            )
        add, reset = self.rule.decide(succeeded, env_steps)
        if add:
            self.add_snapshot(version, policy_params())
            with self._lock:
                self.payoff.remove(LEARNER)
            logging.info(
                "league: %s v%d joined the league (%s, win rate %.2f)%s",
                self.role,
                version,
                "exploit found" if succeeded else "time limit",
                self.exploit_win_rate,
                "; reset" if reset else "",
            )
        return reset

    def reset_state(self, initial):
        """The state an exploiter resets to (`league.exploiter_reset`): `initial` (a TrainState:
        the run's start), or for "main" `initial` with the params and observation statistics of
        the newest main snapshot this league holds, so the exploiter starts as the main agent it
        is to beat (`initial` while it holds none). Either way with `initial`'s fresh optimizer."""
        if self.config.exploiter_reset != "main":
            return initial
        with self._lock:
            main = roles.newest(self.pool, "main")
            snapshot = self._params.get(main) if main is not None else None
        if snapshot is None:
            logging.info("league: %s reset to its initial params (no main snapshot yet)", self.role)
            return initial
        logging.info("league: %s reset to main snapshot %d", self.role, main)
        return initial.replace(params=snapshot["params"], obs_norm=snapshot["obs_norm"])

    def state_dict(self) -> dict:
        with self._lock:
            state = {"pool": self.pool.state_dict(), "payoff": self.payoff.state_dict()}
            # The draws go on where they were (a restart would replay the first ones).
            state["rng"] = self._rng.bit_generator.state
            if self.role:
                state["roles"] = {"newest": dict(self._newest)}
                if self.rule is not None:
                    state["roles"]["rule"] = self.rule.state_dict()
            return state

    def snapshot_dir_of(self, policy: int) -> str:
        """Where the snapshot `policy` lives on disk."""
        role = roles.role_of(policy)
        if role == self.own_role:
            return self.snapshot_dir
        return roles.snapshot_dir(self.role_dir, role)

    def load_state_dict(self, state: dict, target_params) -> None:
        """Restores pool and payoff, and every snapshot's params from its role's directory."""
        pool = OpponentPool.from_state_dict(state["pool"])
        payoff = PayoffMatrix.from_state_dict(state["payoff"])
        # The counts are the run's; how they are weighed is this config's (a resume may change it),
        # and so is the pool's size.
        payoff.prior_games, payoff.decay = self.payoff.prior_games, self.payoff.decay
        dropped = pool.resize(self.pool.max_size)
        if dropped:
            logging.warning(
                "league: league.max_snapshots is %s now; the %d oldest snapshots leave the pool",
                self.pool.max_size,
                len(dropped),
            )
        for gone in dropped:
            payoff.remove(gone)
        params = {
            i: load_snapshot(self.snapshot_dir_of(i), roles.version_of(i), target_params)
            for i in pool.ids
        }
        saved = state.get("roles", {})
        with self._lock:
            self.pool, self.payoff, self._params = pool, payoff, params
            self.sampler = make_role_sampler(self.config, pool, payoff)
            self._newest.update({r: int(v) for r, v in saved.get("newest", {}).items()})
            if "rng" in state:  # absent in checkpoints of older seedlike versions
                self._rng.bit_generator.state = state["rng"]
            if self.rule is not None and "rule" in saved:
                self.rule.load_state_dict(saved["rule"])

    def take_metrics(self) -> dict:
        """Results since the last call, from the learning policy's side."""
        with self._lock:
            results, self._results = self._results, []
            pool_size = len(self.pool)
        games = np.array(results, np.int64).reshape(-1, 2)
        opponent, outcome = games[:, 0], games[:, 1]

        def win_rate(played: np.ndarray) -> float | None:
            return float(np.mean(outcome[played] > 0)) if played.any() else None

        snapshot = opponent >= 0
        out = {"league/pool_size": pool_size, "league/games_vs_pool": int(snapshot.sum())}
        out["league/win_rate_vs_pool"] = win_rate(snapshot)
        score = (outcome[snapshot] + 1) / 2  # a draw counts half
        out["league/score_vs_pool"] = float(np.mean(score)) if snapshot.any() else None
        for bot in self.bots:
            out[f"league/win_rate_vs_{players.bot_name(bot)}"] = win_rate(opponent == bot)
        if self.config.shared_games:
            out["league/games_shared"] = int((opponent == UNSEEN).sum())
            out["league/win_rate_vs_shared"] = win_rate(opponent == UNSEEN)
        if self.role:
            of = np.array([roles.role_of(p) if p >= 0 else "" for p in opponent.tolist()], object)
            for role in roles.OPPONENT_ROLES[self.role]:
                out[f"league/win_rate_vs_{role}"] = win_rate(of == role)
        if self.rule is not None:
            out["league/exploit_win_rate"] = self.exploit_win_rate
            out["league/joined"] = self.rule.successes
            out["league/resets"] = self.rule.resets
        return out


class PeerSnapshots:
    """Picks up the other roles' new snapshots from their directories every `refresh_s` seconds,
    off the learner and inference threads (an orbax restore is too slow to run on them).

    Args:
      league: the seedlike.league.league.League to add them to (`add_peer_snapshot`).
      role_dir: the directory the roles share.
      roles: the roles whose snapshots this role plays.
      template: policy params of the same network (shapes and dtypes of a restore).
      refresh_s: seconds between directory scans.
      guard: runs each restore (seedlike.runtime.devices.ComputeGuard: on a CPU with several
      devices a
        restore beside the learner's collectives could leave one waiting for good).
    """

    def __init__(self, league, role_dir: str, roles, template, refresh_s: float = 10.0,
                 guard=None):  # fmt: skip
        self.league, self.role_dir, self.roles = league, role_dir, tuple(roles)
        self.template, self.refresh_s = template, float(refresh_s)
        self._guard = guard or (lambda fn, *args: fn(*args))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="league-peers", daemon=True)

    def start(self) -> PeerSnapshots:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30.0)

    def new_versions(self, role: str) -> list[int]:
        """Versions of `role`'s snapshots on disk newer than the newest this league has taken,
        oldest first (at most the pool's size: older ones would leave it at once)."""
        directory = roles.snapshot_dir(self.role_dir, role)
        if not os.path.isdir(directory):
            return []
        newest = self.league.newest_version(role)
        # orbax writes a checkpoint under a temporary name and renames it when it is complete.
        versions = sorted(int(v) for v in os.listdir(directory) if v.isdigit())
        versions = [v for v in versions if v > newest]
        if self.league.pool.max_size:
            versions = versions[-self.league.pool.max_size :]
        return versions

    def scan(self) -> int:
        """One pass over the peers' directories; how many snapshots joined."""
        added = 0
        for role in self.roles:
            for version in self.new_versions(role):
                if self._stop.is_set():
                    return added
                try:
                    directory = roles.snapshot_dir(self.role_dir, role)
                    params = self._guard(load_snapshot, directory, version, self.template)
                except Exception as e:  # noqa: BLE001 - a peer's bad file must not end this run
                    why = str(e).splitlines()[0] if str(e) else type(e).__name__
                    logging.warning("league: %s snapshot %d unreadable (%s); skipped", role,
                                    version, why)  # fmt: skip
                    self.league.skip_peer_version(role, version)
                    continue
                self.league.add_peer_snapshot(role, version, params)
                added += 1
        return added

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.refresh_s)


def _snapshot_path(directory: str, version: int) -> str:
    return os.path.join(os.path.abspath(directory), str(int(version)))


def save_snapshot(directory: str, version: int, policy_params) -> bool:
    """Writes {"params", "obs_norm"} of a snapshot as an orbax checkpoint <directory>/<version>;
    False (writing nothing) if that version is there already: snapshots are never replaced."""
    import jax
    import orbax.checkpoint as ocp

    path = _snapshot_path(directory, version)
    if os.path.exists(path):
        return False
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, jax.device_get(policy_params))
    return True


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
