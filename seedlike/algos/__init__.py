"""The learning algorithms, one `Algorithm` record each: the only list of them. `base_config`'s
sections, `config.validate` and the learner read `ALGORITHMS` when they run, so a record added
from outside (`ALGORITHMS["mine"] = Algorithm(...)`, tests/integration/test_extending.py) is one
like these.

A record holds no jax (configs are built and checked where jax is not installed: actors); its
math lives in the module it names, which the learner imports:

    make_loss(network, section, axis_name, sequences) -> loss_fn(params, obs_norm, batch)
        -> (loss, metrics): the metrics are the record's `metrics`.
    advantages(section) -> fn(unroll) -> (advantage [T], value_target [T]) for one Unroll
        [T+1, ...] (the learner's prepare step vmaps it over the batch), or None where the loss
        computes its targets itself along whole unrolls (V-trace).

A new algorithm is a module with those two functions and a record below: its config section (from
`common_settings`, a comment per setting: the configs' documentation), its checks, its metrics.
tests/integration/test_extending.py adds one from outside the library.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from types import ModuleType

import ml_collections


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """What the config and the learner need to know about a learning algorithm.

    Attributes:
      name: its config section and `algo` value.
      defaults: () -> its config section, every setting at its default.
      check: (section) -> what is wrong with a section, one line per problem (empty: nothing).
      metrics: the names of its loss metrics.
      sequences: it needs whole unrolls even with a feed-forward network (V-trace's targets run
        along the unroll).
      math: the module of its make_loss and advantages.
    """

    name: str
    defaults: Callable[[], ml_collections.ConfigDict]
    check: Callable[[ml_collections.ConfigDict], list[str]]
    metrics: tuple[str, ...]
    sequences: bool
    math: str

    def load(self) -> ModuleType:
        """The module of its math (imports jax)."""
        return importlib.import_module(self.math)


def common_settings(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The settings every algorithm's section starts from, which the learner reads around the
    loss: discount, loss weights, reward clipping and scaling; an algorithm adds its passes over a
    batch (epochs, num_minibatches) and its own."""
    c.gamma = 0.99
    c.vf_coef = 0.5
    c.ent_coef = 0.01
    c.reward_clip = 0.0  # clip rewards to +-reward_clip for learning (0 = off; returns stay raw)
    # Divide rewards learned from by the running std of the discounted return (gymnasium's
    # NormalizeReward; seedlike/server/return_scale.py), then clip them to +-normalized_reward_clip
    # (0: no clip). MuJoCo needs it; episode returns stay raw.
    c.normalize_rewards = False
    c.normalized_reward_clip = 10.0
    return c


def check_common(name: str, c: ml_collections.ConfigDict) -> list[str]:
    """What is wrong with `common_settings` and the passes in section `name`."""
    problems = []
    if not 0.0 < c.gamma <= 1.0:
        problems.append(f"{name}.gamma={c.gamma} must lie in (0, 1]")
    if c.normalized_reward_clip < 0:
        problems.append(f"{name}.normalized_reward_clip must be >= 0 (0: no clip)")
    if c.reward_clip < 0:
        problems.append(f"{name}.reward_clip must be >= 0 (0: off)")
    if c.epochs < 1 or c.num_minibatches < 1:
        problems.append(f"{name}.epochs and {name}.num_minibatches must be >= 1")
    return problems


def ppo_defaults() -> ml_collections.ConfigDict:
    c = common_settings(ml_collections.ConfigDict())
    c.gae_lambda = 0.95
    c.epochs = 4  # passes over each batch
    c.num_minibatches = 4  # minibatches per pass
    c.clip_eps = 0.2  # surrogate clipping
    c.clip_value = False  # clip the value update around the behaviour value
    c.value_clip_eps = 0.2
    c.normalize_advantages = True  # per minibatch, over all devices
    return c


def check_ppo(c: ml_collections.ConfigDict) -> list[str]:
    problems = check_common("ppo", c)
    if not 0.0 <= c.gae_lambda <= 1.0:
        problems.append(f"ppo.gae_lambda={c.gae_lambda} must lie in [0, 1]")
    if c.clip_eps <= 0 or c.value_clip_eps <= 0:
        problems.append("ppo.clip_eps and ppo.value_clip_eps must be > 0")
    return problems


def vtrace_defaults() -> ml_collections.ConfigDict:
    c = common_settings(ml_collections.ConfigDict())
    c.lambda_ = 1.0  # trace coefficient multiplying c_t
    c.clip_rho = 1.0  # rho-bar
    c.clip_pg_rho = 1.0  # rho-bar of the policy-gradient advantage
    c.clip_c = 1.0  # c-bar
    c.epochs = 1  # > 1 replays each batch (IMPALA uses every unroll once)
    c.num_minibatches = 1  # sgd steps per pass (minibatches of whole unrolls)
    return c


def check_vtrace(c: ml_collections.ConfigDict) -> list[str]:
    problems = check_common("vtrace", c)
    if not 0.0 <= c.lambda_ <= 1.0:
        problems.append(f"vtrace.lambda_={c.lambda_} must lie in [0, 1]")
    if min(c.clip_rho, c.clip_pg_rho, c.clip_c) <= 0:
        problems.append("vtrace.clip_rho, vtrace.clip_pg_rho and vtrace.clip_c must be > 0")
    return problems


ALGORITHMS = {
    "ppo": Algorithm(
        name="ppo",
        defaults=ppo_defaults,
        check=check_ppo,
        metrics=(
            "loss/total",
            "loss/policy",
            "loss/value",
            "loss/entropy",
            "loss/approx_kl",
            "loss/clip_fraction",
        ),
        sequences=False,
        math="seedlike.algos.ppo",
    ),
    "vtrace": Algorithm(
        name="vtrace",
        defaults=vtrace_defaults,
        check=check_vtrace,
        metrics=(
            "loss/total",
            "loss/policy",
            "loss/value",
            "loss/entropy",
            "loss/rho_mean",
            "loss/rho_clip_fraction",
        ),
        sequences=True,
        math="seedlike.algos.vtrace",
    ),
}
