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

A replay algorithm (`replay=True`: rainbow, r2d2) learns from a replay the learner host keeps
(seedlike.learning.replay) instead of each batch once: its module has

    make_loss(network, section, axis_name) -> loss_fn(params, target_params, obs_norm,
        batch, key) -> (loss, (metrics, priority [S])),

its section the replay settings of `replay_settings`, and its network a Q head with target
parameters (seedlike.learning.offpolicy.ReplayLearner runs it). Its batch is n-step transitions
(rainbow.Transitions), or with `sequences=True` whole stored unrolls with the recurrent state
they started from (r2d2.Sequences).
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
        along the unroll; a replay algorithm samples whole stored unrolls, R2D2's sequences).
      math: the module of its make_loss and advantages.
      replay: it learns from the replay (module docstring).
    """

    name: str
    defaults: Callable[[], ml_collections.ConfigDict]
    check: Callable[[ml_collections.ConfigDict], list[str]]
    metrics: tuple[str, ...]
    sequences: bool
    math: str
    replay: bool = False

    def load(self) -> ModuleType:
        """The module of its math (imports jax)."""
        return importlib.import_module(self.math)


def reward_settings(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The settings every algorithm's section starts from, which the learner and the recorder
    read around the loss: discount, reward clipping and scaling."""
    c.gamma = 0.99
    c.reward_clip = 0.0  # clip rewards to +-reward_clip for learning (0 = off; returns stay raw)
    # Divide rewards learned from by the running std of the discounted return (gymnasium's
    # NormalizeReward; seedlike/server/return_scale.py), then clip them to +-normalized_reward_clip
    # (0: no clip). MuJoCo needs it; episode returns stay raw.
    c.normalize_rewards = False
    c.normalized_reward_clip = 10.0
    return c


def common_settings(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`reward_settings` and the policy-gradient algorithms' loss weights; an algorithm adds its
    passes over a batch (epochs, num_minibatches) and its own."""
    c = reward_settings(c)
    c.vf_coef = 0.5
    c.ent_coef = 0.01
    return c


def check_rewards(name: str, c: ml_collections.ConfigDict) -> list[str]:
    """What is wrong with `reward_settings` in section `name`."""
    problems = []
    if not 0.0 < c.gamma <= 1.0:
        problems.append(f"{name}.gamma={c.gamma} must lie in (0, 1]")
    if c.normalized_reward_clip < 0:
        problems.append(f"{name}.normalized_reward_clip must be >= 0 (0: no clip)")
    if c.reward_clip < 0:
        problems.append(f"{name}.reward_clip must be >= 0 (0: off)")
    return problems


def check_common(name: str, c: ml_collections.ConfigDict) -> list[str]:
    """What is wrong with `common_settings` and the passes in section `name`."""
    problems = check_rewards(name, c)
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


def replay_settings(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The replay on the learner host and its exploration (seedlike.learning.replay,
    seedlike.server.exploration), for a replay algorithm's section."""
    # Env steps the replay holds on each learner process (the oldest unrolls go first).
    c.capacity = 100_000
    c.min_fill = 5_000  # env steps stored before learning starts
    # Transitions sampled per env step inserted, held exactly: each learner batch of
    # batch_unrolls * unroll_length steps is followed by replay_ratio * that / batch_size sgd
    # steps (a whole number), and acting waits while they run (the batch queue's backpressure).
    c.replay_ratio = 8.0
    c.batch_size = 64  # transitions per sgd step, over all devices
    # Proportional prioritization (Schaul et al. 2016): P(i) ~ (|TD error| + priority_eps)^
    # priority_exponent, importance weights (N P(i))^-beta over the sgd batch's largest (every
    # device's), beta rising linearly from importance_exponent to 1 at total_env_steps.
    # False: uniform.
    c.prioritized = True
    c.priority_exponent = 0.5
    c.importance_exponent = 0.4
    c.priority_eps = 1e-3
    # Save the replay's contents with every checkpoint (checkpoints/replay.npz, written by the
    # learner loop: capacity x the bytes per step of benchmarks/replay.py; learner process 0's
    # only). A resumed run waits for min_fill new steps either way, then samples the restored
    # steps too; False: it starts from an empty replay.
    c.save_replay = False
    # Ape-X exploration (seedlike.server.exploration): identity i of epsilon_slots acts
    # epsilon-greedily with epsilon ** (1 + epsilon_alpha * i / (epsilon_slots - 1)); with
    # anneal_steps > 0 every rate starts at 1 and falls linearly to its own over those env steps.
    c.epsilon = 0.4
    c.epsilon_alpha = 7.0
    c.epsilon_slots = 8
    c.anneal_steps = 0
    return c


def check_replay(name: str, c: ml_collections.ConfigDict) -> list[str]:
    """What is wrong with `replay_settings` in section `name` (alone; config.validate checks
    them against the batch shape)."""
    problems = []
    if c.capacity < 1 or not 0 <= c.min_fill <= c.capacity:
        problems.append(f"{name}.capacity must be >= 1 and {name}.min_fill in [0, capacity]")
    if c.replay_ratio <= 0 or c.batch_size < 1:
        problems.append(f"{name}.replay_ratio must be > 0 and {name}.batch_size >= 1")
    if c.priority_exponent < 0 or not 0 <= c.importance_exponent <= 1 or c.priority_eps <= 0:
        problems.append(
            f"{name}.priority_exponent must be >= 0, {name}.importance_exponent in [0, 1] and "
            f"{name}.priority_eps > 0"
        )
    if not 0 <= c.epsilon <= 1 or c.epsilon_alpha < 0 or c.epsilon_slots < 1:
        problems.append(
            f"{name}.epsilon must lie in [0, 1], {name}.epsilon_alpha >= 0 and "
            f"{name}.epsilon_slots >= 1"
        )
    if c.anneal_steps < 0:
        problems.append(f"{name}.anneal_steps must be >= 0 (0: no annealing)")
    return problems


def rainbow_defaults() -> ml_collections.ConfigDict:
    c = replay_settings(reward_settings(ml_collections.ConfigDict()))
    c.n_step = 3  # rewards summed before bootstrapping
    c.double_q = True  # the online network chooses the bootstrap action, the target values it
    c.target_period = 500  # sgd steps between copies of the online parameters to the target
    c.huber_delta = 1.0  # one atom: Huber loss on the TD error (0: squared error)
    return c


def check_rainbow(c: ml_collections.ConfigDict) -> list[str]:
    problems = check_rewards("rainbow", c) + check_replay("rainbow", c)
    if c.n_step < 1 or c.target_period < 1:
        problems.append("rainbow.n_step and rainbow.target_period must be >= 1")
    if c.huber_delta < 0:
        problems.append("rainbow.huber_delta must be >= 0 (0: squared error)")
    return problems


def r2d2_defaults() -> ml_collections.ConfigDict:
    c = replay_settings(reward_settings(ml_collections.ConfigDict()))
    # batch_size counts sequences (stored unrolls of unroll_length steps); replay_ratio is still
    # sampled steps per inserted step.
    c.batch_size = 32
    c.n_step = 5  # rewards summed before bootstrapping (R2D2's 5)
    c.double_q = True
    c.target_period = 400  # sgd steps between target copies (R2D2: 2500 at batch 64)
    c.huber_delta = 0.0  # squared TD error, as R2D2
    c.burn_in = 20  # first steps of a sequence that only refresh the recurrent state (R2D2: 40)
    # Steps a seat's consecutive sequences share besides their boundary step (R2D2: 40 of 80):
    # every env step is then stored in up to unroll_length / (unroll_length - overlap) sequences,
    # and the steps replay_ratio counts as inserted are the sequences' stored ones.
    c.overlap = 0
    c.stored_state = True  # start from the state stored with the sequence; False: from zeros
    c.rescale_eps = 1e-3  # h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x on targets and values
    c.priority_eta = 0.9  # a sequence's priority: eta max |TD| + (1 - eta) mean |TD|
    c.priority_exponent = 0.9  # R2D2's
    c.importance_exponent = 0.6
    return c


def check_r2d2(c: ml_collections.ConfigDict) -> list[str]:
    problems = check_rewards("r2d2", c) + check_replay("r2d2", c)
    if c.n_step < 1 or c.target_period < 1 or c.burn_in < 0:
        problems.append("r2d2.n_step and r2d2.target_period must be >= 1, r2d2.burn_in >= 0")
    if c.huber_delta < 0 or c.rescale_eps <= 0 or not 0 <= c.priority_eta <= 1:
        problems.append(
            "r2d2.huber_delta must be >= 0, r2d2.rescale_eps > 0 and r2d2.priority_eta in [0, 1]"
        )
    return problems


def unroll_overlap(config) -> int:
    """Steps a seat's consecutive unrolls share besides their boundary step: a sequence replay's
    `overlap` (seedlike.server.unrolls.UnrollPool), else 0."""
    algorithm = ALGORITHMS[config.algo]
    if algorithm.replay and algorithm.sequences:
        return int(config[config.algo].overlap)
    return 0


def sgd_steps_per_update(config) -> int:
    """Gradient steps in one policy version of a run's config: epochs x num_minibatches, or a
    replay algorithm's replay_ratio x steps per learner batch / batch_size."""
    c = config[config.algo]
    algorithm = ALGORITHMS[config.algo]
    if algorithm.replay:
        # Sampled per sgd step: batch_size transitions, or batch_size whole unrolls.
        per_sample = config.unroll_length if algorithm.sequences else 1
        steps = config.batch_unrolls * config.unroll_length
        return round(float(c.replay_ratio) * steps / (int(c.batch_size) * per_sample))
    return int(c.epochs) * int(c.num_minibatches)


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
    "rainbow": Algorithm(
        name="rainbow",
        defaults=rainbow_defaults,
        check=check_rainbow,
        metrics=("loss/total", "loss/td_abs", "loss/q_mean", "loss/weight_mean"),
        sequences=False,
        math="seedlike.algos.rainbow",
        replay=True,
    ),
    "r2d2": Algorithm(
        name="r2d2",
        defaults=r2d2_defaults,
        check=check_r2d2,
        metrics=(
            "loss/total",
            "loss/td_abs",
            "loss/q_mean",
            "loss/weight_mean",
            "loss/state_age",
        ),
        sequences=True,
        math="seedlike.algos.r2d2",
        replay=True,
    ),
}
