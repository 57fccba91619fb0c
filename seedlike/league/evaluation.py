"""TrueSkill evaluation of the learning policy against a fixed reference pool (OpenAI Five App. J).

References: the random agent (anchored at mu = 0), the scripted agent where the game has one, and
frozen snapshots of the learning policy promoted every `league.reference_every` policy versions.
The base references are rated once by a round-robin among them; a snapshot reference once, by
games against the references nearest the learning policy's skill (`reference_opponents`), and
at most `max_references` snapshots stay, the weakest leaving first: a long run's evaluation
costs the same in its tenth hour as in its first. Ratings never change after that. Each
evaluation starts a new agent version at the previous mu (with the prior sigma) and plays it
only against the references of nearest skill.

Runs in its own thread of the learner process and plays games locally (seedlike.league.games).
"""

from __future__ import annotations

import logging
import threading
import time

from seedlike.league import games, players
from seedlike.league.league import load_snapshot, save_snapshot
from seedlike.league.ratings import TrueSkillEvaluator, rate_references
from seedlike.policy import PolicyRunner

RANDOM = players.bot_id("random")  # the reference anchored at mu = 0


def base_references(env_name: str) -> dict:
    """The built-in bots that play `env_name`, by policy id (the random agent always)."""
    return {players.bot_id(name): players.BOTS[name].make() for name in players.bots_for(env_name)}


class Evaluation:
    """Args:
    league_config: the `league` config section (eval_games, eval_opponents, eval_greedy,
      reference_every).
    env: the two-player game: the run's env section (its backend makes the envs), or an
      envpool task id.
    network: the learning policy's networks.Network (snapshot references use it too).
    snapshot_dir: where reference snapshots are saved (and reloaded from on resume).
    guard: runs JAX computations (seedlike.runtime.devices.ComputeGuard).
    """

    def __init__(self, league_config, env, network, snapshot_dir=None, seed=0, guard=None):
        self.config = league_config
        self.env = env
        env_name = env if isinstance(env, str) else env.name
        self.network = network
        self.snapshot_dir = snapshot_dir
        self._seed = seed
        self._round = 0
        self.stop = threading.Event()  # set to abandon an evaluation under way
        self._next_reference = int(league_config.reference_every)
        self.agents = base_references(env_name)
        self.evaluator: TrueSkillEvaluator | None = None
        self._runner = PolicyRunner(network, bool(league_config.eval_greedy), seed, guard)
        self.win_rates: dict[str, float] = {}  # by reference name (players.describe)

    def _games(self, a, b, n: int) -> games.MatchResult:
        self._round += 1
        seed = self._seed * 7919 + self._round
        return games.play_match(self.env, a, b, n, seed=seed, stop=self.stop)

    def setup(self) -> None:
        """Rates the base references by a round-robin among them (random at mu = 0)."""
        ids = list(self.agents)
        n = int(self.config.reference_games)
        results = {}
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                results[(a, b)] = self._games(self.agents[a], self.agents[b], n).outcomes
        if len(ids) == 1:
            results[(RANDOM, RANDOM)] = self._games(
                self.agents[RANDOM], self.agents[RANDOM], n
            ).outcomes
        ratings = rate_references(results, anchor=RANDOM)
        self.evaluator = TrueSkillEvaluator(ratings)
        logging.info(
            "TrueSkill references: %s",
            {players.describe(k): round(r.mu, 2) for k, r in ratings.items()},
        )

    def add_reference(self, version: int, policy_params) -> None:
        """Freezes the policy of `version` as a reference, rated once by `reference_games`
        games against each of the `reference_opponents` references nearest the learning
        policy's rating (0: all of them), starting from that rating. Beyond `max_references`
        snapshot references (0: no limit), the one of lowest skill leaves (bots stay).

        Bounded both ways: rating against every reference cost reference_games games per
        reference already there, so the evaluation thread, which shares the learner's
        interpreter, fell further behind with every reference, and each one held its params.
        """
        agent = self._network_agent(policy_params, players.describe(version))
        rater = TrueSkillEvaluator(self.evaluator.references, mu=self.evaluator.mu)
        k = int(self.config.reference_opponents) or len(self.evaluator.references)
        n = int(self.config.reference_games)
        for reference in self.evaluator.pick_opponents(k):
            for outcome in self._games(agent, self.agents[reference], n).outcomes:
                rater.update(reference, outcome)
        if self.snapshot_dir is not None:
            save_snapshot(self.snapshot_dir, version, policy_params)
        references = {**self.evaluator.references, version: rater.rating}
        limit = int(self.config.max_references)
        if limit:
            snapshots = sorted(
                (r for r in references if not players.is_bot(r)), key=lambda r: references[r].mu
            )
            for weakest in snapshots[: max(0, len(snapshots) - limit)]:
                del references[weakest]
                self.agents.pop(weakest, None)
                logging.info("TrueSkill reference %s left", players.describe(weakest))
        self._replace_references(references)
        if version in references:
            self.agents[version] = agent
        logging.info("TrueSkill reference v%d rated mu=%.2f", version, rater.rating.mu)

    def _replace_references(self, references) -> None:
        state = self.evaluator.state_dict()
        state["references"] = [[n, r.mu, r.sigma] for n, r in references.items()]
        self.evaluator = TrueSkillEvaluator.from_state_dict(state)

    def _network_agent(self, policy_params, name):
        return games.NetworkAgent(self._runner, policy_params, name)

    def evaluate(self, version: int, policy_params) -> dict:
        """Rates the policy of `version` and returns the metrics to log."""
        if self.evaluator is None:
            self.setup()
        every = int(self.config.reference_every)
        if every and version >= self._next_reference:
            self.add_reference(version, policy_params)
            self._next_reference = (version // every + 1) * every
        agent = self._network_agent(policy_params, "current")
        self.evaluator.next_agent()
        n = int(self.config.eval_games)
        # Only this version's games: a reference the rating has left behind (random, early) would
        # otherwise keep reporting the win rate of a long-gone version.
        self.win_rates = {}
        for reference in self.evaluator.pick_opponents(int(self.config.eval_opponents)):
            result = self._games(agent, self.agents[reference], n)
            for outcome in result.outcomes:
                self.evaluator.update(reference, outcome)
            self.win_rates[players.describe(reference)] = result.win_rate()
        metrics = {**self.evaluator.metrics(), "trueskill_version": version}
        metrics.update({f"eval/win_rate_vs_{k}": v for k, v in self.win_rates.items()})
        return metrics

    def state_dict(self) -> dict:
        return {
            "evaluator": self.evaluator.state_dict() if self.evaluator else None,
            "win_rates": self.win_rates,
            "next_reference": self._next_reference,
        }

    def load_state_dict(self, state: dict, target_params) -> None:
        if state.get("evaluator") is None:
            return
        self.evaluator = TrueSkillEvaluator.from_state_dict(state["evaluator"])
        self.win_rates = dict(state.get("win_rates", {}))
        self._next_reference = int(state.get("next_reference", self._next_reference))
        for reference in self.evaluator.references:  # policy ids (older states' names read too)
            if reference not in self.agents:
                params = load_snapshot(self.snapshot_dir, reference, target_params)
                self.agents[reference] = self._network_agent(params, players.describe(reference))


class EvaluationThread(threading.Thread):
    """Every `league.eval_interval_s`, evaluates the latest published policy."""

    def __init__(self, evaluation: Evaluation, registry, interval_s: float):
        super().__init__(name="evaluation", daemon=True)
        self.evaluation = evaluation
        self._registry = registry
        self._interval_s = interval_s
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._metrics: dict = {}
        self._state = evaluation.state_dict()

    def run(self) -> None:
        last = -1
        while not self._stop_event.wait(self._interval_s if last >= 0 else 1.0):
            version, params = self._registry.latest()
            if version == last:
                continue
            start = time.monotonic()
            try:
                metrics = self.evaluation.evaluate(version, params)
                state = self.evaluation.state_dict()
            except games.Interrupted:
                return
            except Exception:  # noqa: BLE001 - evaluation must never take training down
                logging.exception("evaluation of policy version %d failed", version)
                continue
            metrics["eval/seconds"] = time.monotonic() - start
            with self._lock:
                self._metrics, self._state = metrics, state
            last = version

    def metrics(self) -> dict:
        with self._lock:
            return dict(self._metrics)

    def state_dict(self) -> dict:
        """The state after the last completed evaluation (never one in the middle of it)."""
        with self._lock:
            return self._state

    def stop(self) -> None:
        self._stop_event.set()
        self.evaluation.stop.set()
        self.join(timeout=60)
