"""The learning algorithms, one `Algorithm` record each: the only list of them. `base_config`'s
sections, `config.validate` and the runtimes read `ALGORITHMS` when they run, so a record added
from outside (`ALGORITHMS["mine"] = Algorithm(...)`, tests/integration/test_extending.py) is one
like these.

A record holds no jax (configs are built and checked where jax is not installed: actors); its
math lives in the module it names (`Algorithm.module`), which its learner imports. Every
algorithm has one contract:

    make_loss(network, section, axis_name) -> loss_fn(params, target_params, obs_norm, batch,
        key) -> (loss, LossAux(metrics, priority))

`metrics` are the record's `metrics` (scalars); `priority` [S] the batch's samples' new replay
priorities, or None where nothing is replayed. `target_params` are a Q network's target
parameters ({} for every other network), `key` a fresh PRNG key for each sgd step (a noisy
head's weight noise); a loss that needs neither ignores them. The batch is the record's
`batch` type (`BATCHES`, seedlike.algos.batches), and what feeds it is its learner's business:

    seedlike.learning.update.Learner: each learner batch of actors' unrolls learned from once
        (epochs x num_minibatches sgd steps); it also reads `advantages(section)` -> fn(unroll)
        -> (advantage [T], value_target [T]) for one Unroll [T+1, ...] (vmapped over the batch),
        or None where the loss computes its targets itself along whole unrolls (V-trace).
    seedlike.learning.replay_update.ReplayLearner: each learner batch goes into the learner
        host's replay, and replay_ratio x its steps are sampled back in sgd batches.

A new algorithm is a module with make_loss (and `advantages` for the first learner) and a record
below: its config section (from `common_settings` or `replay_settings`, a comment per setting:
the configs' documentation), its checks, its metrics. tests/integration/test_extending.py adds a
policy-gradient and a replay algorithm from outside the library.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from types import ModuleType

import ml_collections

# What a loss reads (seedlike.algos.batches has their layouts), and the learner that feeds it.
STEPS = "steps"  # independent steps of actors' unrolls (SampleBatch); whole unrolls
# (SequenceBatch) where the network is recurrent
UNROLLS = "unrolls"  # whole unrolls (SequenceBatch): targets that run along the unroll
TRANSITIONS = "transitions"  # n-step transitions sampled from the replay (Transitions)
SEQUENCES = "sequences"  # stored unrolls sampled whole from the replay, each with the
# recurrent state it started from (Sequences)
ON_POLICY = "seedlike.learning.update:Learner"
REPLAY = "seedlike.learning.replay_update:ReplayLearner"
BATCHES = {STEPS: ON_POLICY, UNROLLS: ON_POLICY, TRANSITIONS: REPLAY, SEQUENCES: REPLAY}
# A replay batch type's section key counting the samples of one sgd step (over all devices).
SAMPLE_KEYS = {TRANSITIONS: "batch_transitions", SEQUENCES: "batch_sequences"}


def passes(config) -> int:
    """Gradient steps per policy version of a policy-gradient algorithm: epochs x
    num_minibatches."""
    c = config[config.algo]
    return int(c.epochs) * int(c.num_minibatches)


def replayed(config) -> int:
    """Gradient steps per policy version of a replay algorithm: replay_ratio x the env steps of
    a learner batch / the env steps of an sgd batch (whole by `check_replay_run`)."""
    steps = config.batch_unrolls * config.unroll_length
    return round(float(config[config.algo].replay_ratio) * steps / sgd_batch_steps(config))


def no_overlap(config) -> int:
    del config
    return 0


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """What the config and the runtimes need to know about a learning algorithm.

    Attributes:
      name: its config section and `algo` value.
      defaults: () -> its config section, every setting at its default.
      check: (config) -> what is wrong with a run's config for it, one line per problem (empty:
        nothing): its section's settings, and how they fit the batch shape and the network.
      metrics: the names of its loss metrics.
      module: the module of its make_loss (and of what its learner reads: module docstring).
      batch: what its loss reads, a key of BATCHES (which names the learner that feeds it).
      sgd_steps: (config) -> gradient steps per policy version (`passes`, `replayed`).
      head: the policy head its loss reads, a key of networks.heads.POLICY_HEADS ("q": action
        values), which network.policy_head="auto" builds; "": a policy's (auto: categorical).
      overlap: (config) -> steps a seat's consecutive unrolls share besides their boundary
        step (seedlike.server.unrolls.UnrollPool; R2D2's overlapping sequences).
      self_play: it learns from games between teams (self-play, leagues), where every seat's
        data is a player's own; False for one agent learning from its replay.
    """

    name: str
    defaults: Callable[[], ml_collections.ConfigDict]
    check: Callable[[ml_collections.ConfigDict], list[str]]
    metrics: tuple[str, ...]
    module: str
    batch: str = STEPS
    sgd_steps: Callable[[ml_collections.ConfigDict], int] = passes
    head: str = ""
    overlap: Callable[[ml_collections.ConfigDict], int] = no_overlap
    self_play: bool = True

    def load(self) -> ModuleType:
        """The module of its math (imports jax)."""
        return importlib.import_module(self.module)

    def learner(self) -> type:
        """The learner class that feeds its batch type (imports jax)."""
        module, _, name = BATCHES[self.batch].partition(":")
        return getattr(importlib.import_module(module), name)


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


def check_ppo(config) -> list[str]:
    c = config.ppo
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


def check_vtrace(config) -> list[str]:
    c = config.vtrace
    problems = check_common("vtrace", c)
    if not 0.0 <= c.lambda_ <= 1.0:
        problems.append(f"vtrace.lambda_={c.lambda_} must lie in [0, 1]")
    if min(c.clip_rho, c.clip_pg_rho, c.clip_c) <= 0:
        problems.append("vtrace.clip_rho, vtrace.clip_pg_rho and vtrace.clip_c must be > 0")
    return problems


def exploration_settings(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Epsilon-greedy acting for an action-value head, where inference runs
    (seedlike.server.exploration, Ape-X): identity i of epsilon_slots acts epsilon-greedily with
    epsilon ** (1 + epsilon_alpha * i / (epsilon_slots - 1)); with anneal_steps > 0 every rate
    starts at 1 and falls linearly to its own over those env steps."""
    c.epsilon = 0.4
    c.epsilon_alpha = 7.0
    c.epsilon_slots = 8
    c.anneal_steps = 0
    return c


def check_exploration(name: str, c: ml_collections.ConfigDict) -> list[str]:
    """What is wrong with `exploration_settings` in section `name`."""
    problems = []
    if not 0 <= c.epsilon <= 1 or c.epsilon_alpha < 0 or c.epsilon_slots < 1:
        problems.append(
            f"{name}.epsilon must lie in [0, 1], {name}.epsilon_alpha >= 0 and "
            f"{name}.epsilon_slots >= 1"
        )
    if c.anneal_steps < 0:
        problems.append(f"{name}.anneal_steps must be >= 0 (0: no annealing)")
    return problems


def replay_settings(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`reward_settings`, the replay on the learner host (seedlike.learning.replay) and
    `exploration_settings`, for a replay algorithm's section; the algorithm adds the size of its
    sgd batch (SAMPLE_KEYS: batch_transitions or batch_sequences) and its own."""
    c = reward_settings(c)
    # Env steps the replay holds on each learner process (the oldest unrolls go first).
    c.capacity = 100_000
    c.min_fill = 5_000  # env steps stored before learning starts
    # Env steps sampled per env step inserted, held exactly: each learner batch of
    # batch_unrolls * unroll_length steps is followed by replay_ratio * that / (the env steps of
    # an sgd batch) sgd steps (a whole number), and acting waits while they run (the batch
    # queue's backpressure).
    c.replay_ratio = 8.0
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
    return exploration_settings(c)


def check_replay(name: str, c: ml_collections.ConfigDict) -> list[str]:
    """What is wrong with `replay_settings` in section `name` alone (`check_replay_run` checks
    them against the rest of the config)."""
    problems = check_rewards(name, c) + check_exploration(name, c)
    if c.capacity < 1 or not 0 <= c.min_fill <= c.capacity:
        problems.append(f"{name}.capacity must be >= 1 and {name}.min_fill in [0, capacity]")
    if c.replay_ratio <= 0:
        problems.append(f"{name}.replay_ratio must be > 0")
    if c.priority_exponent < 0 or not 0 <= c.importance_exponent <= 1 or c.priority_eps <= 0:
        problems.append(
            f"{name}.priority_exponent must be >= 0, {name}.importance_exponent in [0, 1] and "
            f"{name}.priority_eps > 0"
        )
    return problems


def sample_steps(config) -> int:
    """Env steps in one sample of the config's replay algorithm: a transition's one, or a whole
    stored unroll's unroll_length (R2D2's sequence)."""
    return int(config.unroll_length) if ALGORITHMS[config.algo].batch == SEQUENCES else 1


def sgd_batch(config) -> tuple[str, int]:
    """(its section key, its value): the samples of one sgd step of a replay algorithm."""
    key = SAMPLE_KEYS[ALGORITHMS[config.algo].batch]
    return key, int(config[config.algo][key])


def sgd_batch_steps(config) -> int:
    """Env steps in one sgd batch of a replay algorithm."""
    return sgd_batch(config)[1] * sample_steps(config)


def check_replay_run(config) -> list[str]:
    """What keeps a replay algorithm's settings (`check_replay`) from this run's batch shape,
    network and population."""
    name, c = config.algo, config[config.algo]
    key, samples = sgd_batch(config)
    if samples < 1:
        return [f"{name}.{key} must be >= 1"]
    problems = []
    steps = config.batch_unrolls * config.unroll_length
    per_sgd = sgd_batch_steps(config)
    sgd_steps = c.replay_ratio * steps / per_sgd
    if sgd_steps < 1 or abs(sgd_steps - round(sgd_steps)) >= 1e-9:
        problems.append(
            f"{name}.replay_ratio={c.replay_ratio} x {steps} steps per learner batch "
            f"(batch_unrolls x unroll_length) / {per_sgd} steps per sgd step ({name}.{key}="
            f"{samples}) = {sgd_steps:g} sgd steps per batch: it must be a whole number >= 1"
        )
    if c.capacity < steps:
        problems.append(f"{name}.capacity={c.capacity} must hold one learner batch ({steps} steps)")
    if config.network.normalize_obs:
        problems.append(
            f"algo={name!r}: the replay keeps old steps that running observation statistics "
            "would move under its targets; set network.normalize_obs=False"
        )
    if c.normalize_rewards:
        problems.append(
            f"algo={name!r}: the replay keeps rewards scaled by the running return statistics "
            f"of their time, which move; set {name}.normalize_rewards=False (reward_clip "
            "bounds them instead)"
        )
    if config.population.size != 1:
        problems.append(
            f"algo={name!r} learns one agent from its own replay: populations (PBT) are for "
            "the policy-gradient algorithms (ppo, vtrace); run one member per job instead"
        )
    return problems


def rainbow_defaults() -> ml_collections.ConfigDict:
    c = replay_settings(ml_collections.ConfigDict())
    c.batch_transitions = 64  # n-step transitions per sgd step, over all devices
    c.n_step = 3  # rewards summed before bootstrapping
    c.double_q = True  # the online network chooses the bootstrap action, the target values it
    c.target_period = 500  # sgd steps between copies of the online parameters to the target
    c.huber_delta = 1.0  # one atom: Huber loss on the TD error (0: squared error)
    return c


def check_rainbow(config) -> list[str]:
    c = config.rainbow
    problems = check_replay("rainbow", c)
    if c.n_step < 1 or c.target_period < 1:
        problems.append("rainbow.n_step and rainbow.target_period must be >= 1")
    if c.huber_delta < 0:
        problems.append("rainbow.huber_delta must be >= 0 (0: squared error)")
    if config.network.core != "none":
        problems.append(
            "algo='rainbow' learns from single transitions: network.core='lstm' needs sequence "
            "replay with burn-in; set algo='r2d2' or network.core='none'"
        )
    return problems + check_replay_run(config)


def r2d2_defaults() -> ml_collections.ConfigDict:
    c = replay_settings(ml_collections.ConfigDict())
    # Sequences (stored unrolls of unroll_length steps) per sgd step, over all devices;
    # replay_ratio still counts env steps.
    c.batch_sequences = 32
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


def check_r2d2(config) -> list[str]:
    c, length = config.r2d2, config.unroll_length
    problems = check_replay("r2d2", c)
    if c.n_step < 1 or c.target_period < 1 or c.burn_in < 0:
        problems.append("r2d2.n_step and r2d2.target_period must be >= 1, r2d2.burn_in >= 0")
    if c.huber_delta < 0 or c.rescale_eps <= 0 or not 0 <= c.priority_eta <= 1:
        problems.append(
            "r2d2.huber_delta must be >= 0, r2d2.rescale_eps > 0 and r2d2.priority_eta in [0, 1]"
        )
    if c.burn_in >= length:
        problems.append(
            f"r2d2.burn_in={c.burn_in} leaves no step of a {length}-step sequence "
            "(unroll_length) to learn from"
        )
    if not 0 <= c.overlap < length:
        problems.append(
            f"r2d2.overlap={c.overlap} must lie in [0, {length - 1}]: consecutive sequences "
            "share at most all but one step (unroll_length - 1)"
        )
    if config.network.atoms != 1 or config.network.noisy:
        problems.append(
            "algo='r2d2' learns one rescaled value per action and explores epsilon-greedily: "
            "set network.atoms=1 and network.noisy=False"
        )
    return problems + check_replay_run(config)


def r2d2_overlap(config) -> int:
    return int(config.r2d2.overlap)


def pqn_defaults() -> ml_collections.ConfigDict:
    c = reward_settings(ml_collections.ConfigDict())
    # Q(lambda)'s trace: 0 bootstraps after one step (one-step Q-learning), 1 sums the unroll's
    # rewards (purejaxql's MinAtar setting: 0.65).
    c.lambda_ = 0.65
    c.reward_scale = 1.0  # rewards learned from are multiplied by this (after reward_clip)
    c.epochs = 2  # passes over each batch
    c.num_minibatches = 32  # minibatches per pass
    c = exploration_settings(c)
    # One rate for every seat, annealed from 1 (purejaxql's: 0.05 after the first 10%).
    c.epsilon = 0.05
    c.epsilon_alpha = 0.0
    c.epsilon_slots = 1
    c.anneal_steps = 1_000_000
    return c


def check_pqn(config) -> list[str]:
    c = config.pqn
    problems = check_common("pqn", c) + check_exploration("pqn", c)
    if not 0.0 <= c.lambda_ <= 1.0:
        problems.append(f"pqn.lambda_={c.lambda_} must lie in [0, 1]")
    if c.reward_scale <= 0:
        problems.append(f"pqn.reward_scale={c.reward_scale} must be > 0")
    if config.network.atoms != 1 or config.network.noisy:
        problems.append(
            "algo='pqn' learns one value per action and explores epsilon-greedily: set "
            "network.atoms=1 and network.noisy=False"
        )
    return problems


def sgd_steps_per_update(config) -> int:
    """Gradient steps in one policy version of a run's config (its record's `sgd_steps`)."""
    return ALGORITHMS[config.algo].sgd_steps(config)


def unroll_overlap(config) -> int:
    """Steps a seat's consecutive unrolls share besides their boundary step (its record's
    `overlap`)."""
    return ALGORITHMS[config.algo].overlap(config)


REPLAY_METRICS = ("loss/total", "loss/td_abs", "loss/q_mean", "loss/weight_mean")

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
        module="seedlike.algos.ppo",
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
        module="seedlike.algos.vtrace",
        batch=UNROLLS,
    ),
    "rainbow": Algorithm(
        name="rainbow",
        defaults=rainbow_defaults,
        check=check_rainbow,
        metrics=REPLAY_METRICS,
        module="seedlike.algos.rainbow",
        batch=TRANSITIONS,
        sgd_steps=replayed,
        head="q",
        self_play=False,
    ),
    "r2d2": Algorithm(
        name="r2d2",
        defaults=r2d2_defaults,
        check=check_r2d2,
        metrics=(*REPLAY_METRICS, "loss/state_age"),
        module="seedlike.algos.r2d2",
        batch=SEQUENCES,
        sgd_steps=replayed,
        head="q",
        overlap=r2d2_overlap,
        self_play=False,
    ),
    "pqn": Algorithm(
        name="pqn",
        defaults=pqn_defaults,
        check=check_pqn,
        metrics=("loss/total", "loss/td_abs", "loss/q_mean", "loss/target_mean"),
        module="seedlike.algos.pqn",
        head="q",
        self_play=False,
    ),
}
