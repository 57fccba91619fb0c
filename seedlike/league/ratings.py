"""TrueSkill evaluation against a fixed pool of reference agents (seed 000, App. J).

The references (a random agent, scripted agents, frozen snapshots) are rated once, from a
round-robin among themselves, and shifted so that the random agent has mu = 0. The agent under
evaluation is then rated from its games against references of nearby skill, with the references'
ratings held constant, so that its mu is on a scale that does not drift during training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import trueskill

from seedlike.league.payoff import DRAW, LOSS, WIN
from seedlike.league.players import BOTS, policy_id

# OpenAI Five's TrueSkill environment (App. J). mu = 0 is the random agent's level on the anchored
# scale, so a fresh agent starts there; only differences of mu matter to the updates.
MU = 0.0
SIGMA = 25.0 / 3.0
BETA = SIGMA / 2.0
TAU = 0.0
DRAW_PROBABILITY = 0.02


def make_env() -> trueskill.TrueSkill:
    """The TrueSkill environment with OpenAI Five's parameters."""
    return trueskill.TrueSkill(
        mu=MU, sigma=SIGMA, beta=BETA, tau=TAU, draw_probability=DRAW_PROBABILITY
    )


def _rate_game(
    env: trueskill.TrueSkill, a: trueskill.Rating, b: trueskill.Rating, outcome: int
) -> tuple[trueskill.Rating, trueskill.Rating]:
    """New ratings of `a` and `b` after one game; outcome +1 if `a` won, 0 draw, -1 if `b` won."""
    if outcome == WIN:
        return trueskill.rate_1vs1(a, b, env=env)
    if outcome == LOSS:
        new_b, new_a = trueskill.rate_1vs1(b, a, env=env)
        return new_a, new_b
    if outcome == DRAW:
        return trueskill.rate_1vs1(a, b, drawn=True, env=env)
    raise ValueError(f"outcome must be +1 (win), 0 (draw) or -1 (loss), got {outcome}")


def rate_references(
    results: Mapping[tuple[int, int], Sequence[int]],
    anchor: int = BOTS["random"].id,
    passes: int = 20,
    seed: int = 0,
) -> dict[int, trueskill.Rating]:
    """Rates reference agents from a round-robin among them, with `anchor` at mu = 0.

    TrueSkill with tau = 0 is a sequential filter: its result depends on the order of the games,
    and the first games of a pair count most because sigma shrinks as games come in. So every pass
    plays all games once, in a fresh random order, from the prior; mu and sigma are averaged over
    the passes (which removes the order dependence) and then shifted so the anchor has mu = 0.

    Args:
      results: (a, b) -> outcomes of a's games against b (+1 a won, 0 draw, -1 b won); a and b
        are policy ids (seedlike.league.players).
      anchor: the agent placed at mu = 0 (App. J: the random agent).
      passes: orderings to average over.
      seed: seed of the orderings.

    Returns:
      policy id -> rating, for every agent in `results`, in order of first appearance.
    """
    env = make_env()
    games = [
        (policy_id(a), policy_id(b), int(o))
        for (a, b), outcomes in results.items()
        for o in outcomes
    ]
    names = list(dict.fromkeys(name for a, b, _ in games for name in (a, b)))
    anchor = policy_id(anchor)
    if anchor not in names:
        raise ValueError(f"anchor {anchor!r} played no game; players: {names}")
    rng = np.random.default_rng(seed)
    mu_sum = dict.fromkeys(names, 0.0)
    sigma_sum = dict.fromkeys(names, 0.0)
    for _ in range(passes):
        ratings = {name: env.create_rating() for name in names}
        for g in rng.permutation(len(games)):
            a, b, outcome = games[g]
            ratings[a], ratings[b] = _rate_game(env, ratings[a], ratings[b], outcome)
        for name, r in ratings.items():
            mu_sum[name] += r.mu
            sigma_sum[name] += r.sigma
    shift = mu_sum[anchor] / passes
    return {
        name: env.create_rating(mu=mu_sum[name] / passes - shift, sigma=sigma_sum[name] / passes)
        for name in names
    }


def win_probability(a: trueskill.Rating, b: trueskill.Rating, beta: float = BETA) -> float:
    """P[a beats b] under TrueSkill's performance model (draws ignored)."""
    c = math.sqrt(2.0 * beta**2 + a.sigma**2 + b.sigma**2)
    return 0.5 * (1.0 + math.erf((a.mu - b.mu) / (c * math.sqrt(2.0))))


def pick_opponents(
    agent: trueskill.Rating, references: Mapping[int, trueskill.Rating], k: int
) -> list[int]:
    """The `k` references of nearest skill: highest TrueSkill match quality (draw probability),
    which for references of equal sigma ranks them by |mu difference|. App. J plays only
    references within about 10 points (15%-85% win rate), the games that carry information.

    Returns:
      reference policy ids, best match first (ties in reference order).
    """
    env = make_env()
    names = list(references)
    quality = [trueskill.quality_1vs1(agent, references[n], env=env) for n in names]
    order = sorted(range(len(names)), key=lambda i: -quality[i])  # stable: ties keep order
    return [names[i] for i in order[:k]]


class TrueSkillEvaluator:
    """Rates one agent against references whose ratings stay fixed.

    Args:
      references: policy id -> rating, e.g. from `rate_references`; copied, never updated.
      mu: initial mu of the agent (App. J starts a new version at the previous version's mu).
    """

    def __init__(self, references: Mapping[int, trueskill.Rating], mu: float = MU):
        if not references:
            raise ValueError("TrueSkillEvaluator needs at least one reference agent")
        self.env = make_env()
        self._references = {
            policy_id(n): self.env.create_rating(mu=r.mu, sigma=r.sigma)
            for n, r in references.items()
        }
        self.rating = self.env.create_rating(mu=mu)
        self.games = 0

    @property
    def references(self) -> dict[int, trueskill.Rating]:
        return dict(self._references)

    @property
    def mu(self) -> float:
        return float(self.rating.mu)

    @property
    def sigma(self) -> float:
        return float(self.rating.sigma)

    def update(self, reference: int, outcome: int) -> trueskill.Rating:
        """Updates the agent's rating after a game against `reference` (outcome +1 if the agent
        won, 0 draw, -1 lost) and returns it. The reference's new rating is thrown away."""
        name = policy_id(reference)
        if name not in self._references:
            raise KeyError(
                f"{name!r} is not a reference agent; references: {list(self._references)}"
            )
        ref = self._references[name]
        self.rating, _ = _rate_game(self.env, self.rating, ref, int(outcome))
        self.games += 1
        return self.rating

    def pick_opponents(self, k: int) -> list[int]:
        """The `k` references nearest to the agent's current rating (see `pick_opponents`)."""
        return pick_opponents(self.rating, self._references, k)

    def next_agent(self) -> None:
        """Starts rating a new agent version: same mu, prior sigma, game count 0 (App. J)."""
        self.rating = self.env.create_rating(mu=self.rating.mu)
        self.games = 0

    def metrics(self) -> dict[str, float]:
        return {"trueskill_mu": self.mu, "trueskill_sigma": self.sigma}

    def state_dict(self) -> dict[str, Any]:
        """JSON-serializable state; `from_state_dict` restores an equal evaluator."""
        return {
            "references": [[n, r.mu, r.sigma] for n, r in self._references.items()],
            "mu": self.mu,
            "sigma": self.sigma,
            "games": self.games,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> TrueSkillEvaluator:
        env = make_env()
        references = {n: env.create_rating(mu=mu, sigma=s) for n, mu, s in state["references"]}
        evaluator = cls(references)
        evaluator.rating = env.create_rating(mu=state["mu"], sigma=state["sigma"])
        evaluator.games = int(state["games"])
        return evaluator
