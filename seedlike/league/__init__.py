"""Self-play league: snapshot pool, payoff matrix, opponent samplers, TrueSkill evaluation and
scripted reference agents. Everything here is plain Python/numpy state with JSON state dicts; the
server owns the parameters of snapshots and calls into these objects."""

from seedlike.league import connect_four
from seedlike.league.connect_four import random_actions
from seedlike.league.payoff import DRAW, LOSS, WIN, PayoffMatrix
from seedlike.league.players import BOTS, LEARNER, describe, policy_id
from seedlike.league.pool import OpponentPool, Snapshot
from seedlike.league.ratings import (
    TrueSkillEvaluator,
    make_env,
    pick_opponents,
    rate_references,
    win_probability,
)
from seedlike.league.samplers import (
    SAMPLERS,
    LatestSampler,
    OpenAIFiveSampler,
    OpponentSampler,
    PFSPSampler,
    UniformRecentSampler,
    make_sampler,
)

__all__ = [
    "BOTS",
    "DRAW",
    "LEARNER",
    "LOSS",
    "SAMPLERS",
    "WIN",
    "LatestSampler",
    "OpenAIFiveSampler",
    "OpponentPool",
    "OpponentSampler",
    "PFSPSampler",
    "PayoffMatrix",
    "Snapshot",
    "TrueSkillEvaluator",
    "UniformRecentSampler",
    "connect_four",
    "describe",
    "make_env",
    "make_sampler",
    "pick_opponents",
    "policy_id",
    "random_actions",
    "rate_references",
    "win_probability",
]
