"""Single-process PPO on Atari with the Nature CNN: the baseline a distributed trainer must beat.

  .venv/bin/python -m benchmarks.baseline_ppo_atari --iterations=10 --update_mode=loop \
      --out=benchmarks/results/baseline_ppo_atari_loop.json

One process alternates two phases, as CleanRL's envpool JAX PPO does:
  rollout: 128 synchronous steps of 8 envpool Breakout-v5 envs with one jitted policy call per step
           (timed as env time + inference time);
  update:  GAE, then 4 epochs x 4 minibatches of 256 samples of PPO sgd steps.
--update_mode=loop calls one jitted sgd step per minibatch from Python (the minibatch is gathered
inside the jitted step, so no data leaves the device); --update_mode=scan runs the whole update as
one jitted function with lax.scan over epochs and minibatches (--scan_unroll unrolls it).

By default the network and compiler settings are the fastest exact ones that a microbenchmark of
formulations of this update found on this 2-core CPU (benchmarks/conv_microbench.py, no longer in
the checkout: `git log -- benchmarks/conv_microbench.py`; the same function as the textbook Nature
CNN, about 2x faster to update), so that the baseline is a strong one. The textbook form, as this
jaxlib compiles it by default: --conv_impl=conv --ynn_convolutions.

Steady-state SPS counts env steps per wall-clock second over the iterations after the first two
(which compile). The compiler options and XLA_FLAGS in force are recorded in the output.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags

from networks import heads
from networks.torsos import space_to_depth, space_to_depth_kernel
from seedlike.algos import batches, gae, ppo

# How Conv computes a convolution; all are the same function (see Conv).
CONV_IMPLS = ("conv", "space_to_depth", "matmul")

# This jaxlib's XLA:CPU hands convolutions, dots and reductions to YNNPACK by default (the list is
# INDIVIDUAL_CONVOLUTION, INDIVIDUAL_DOT, REDUCE); this value of the option keeps the others.
YNN_FUSION_TYPE = "xla_cpu_experimental_ynn_fusion_type"
YNN_WITHOUT_CONVOLUTIONS = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"

_ITERATIONS = flags.DEFINE_integer("iterations", 10, "Rollout + update iterations to run.")
_UPDATE_MODE = flags.DEFINE_enum(
    "update_mode",
    "loop",
    ["loop", "scan"],
    "loop: Python loop over a jitted sgd step; scan: one jitted update, lax.scan inside.",
)
_CONV_IMPL = flags.DEFINE_list(
    "conv_impl",
    ["conv", "space_to_depth", "conv"],
    f"How the Nature CNN's convolutions are computed, one of {CONV_IMPLS} for all three convs or "
    "a list of three (all the same function; see Conv). The default, the second conv as a "
    "space-to-depth, is the fastest exact form here; --conv_impl=conv is the textbook one.",
)
_YNN_CONVOLUTIONS = flags.DEFINE_bool(
    "ynn_convolutions",
    False,
    "Let XLA:CPU hand convolutions to YNNPACK, as this jaxlib does by default. False (the default "
    f"here) compiles every jitted function with {{{YNN_FUSION_TYPE!r}: "
    f"{YNN_WITHOUT_CONVOLUTIONS!r}}}: Eigen convolutions, about 2x faster for this network on "
    "this machine (a microbenchmark since removed: git log -- benchmarks/conv_microbench.py).",
)
_SCAN_UNROLL = flags.DEFINE_bool(
    "scan_unroll",
    False,
    "With --update_mode=scan: unroll both scans fully, so no gradient step runs inside an XLA "
    "while loop (where XLA:CPU leaves the backward convolutions in a slow form, jax#12868).",
)
_ENV_ID = flags.DEFINE_string("env_id", "Breakout-v5", "envpool Atari task id.")
_SEED = flags.DEFINE_integer("seed", 1, "Seed of envs, parameters and action sampling.")
_OUT = flags.DEFINE_string("out", None, "Output JSON path (printed to stdout either way).")

# Iterations excluded from the steady-state numbers: the first compiles the policy and the update;
# the second is excluded too so that one-time costs that spill over (allocator growth, cold caches)
# do not count.
WARMUP_ITERATIONS = 2


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of the PPO Atari reference setting (Schulman et al. 2017; CleanRL).

    The loss fields use the names seedlike.algos.ppo.make_ppo_loss reads, so the baseline
    optimizes exactly the loss the distributed learner does.
    """

    num_envs: int = 8  # parallel envpool environments
    num_steps: int = 128  # rollout length per env per iteration
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_epochs: int = 4  # passes over each rollout batch
    num_minibatches: int = 4  # of num_envs * num_steps / num_minibatches = 256 samples
    clip_eps: float = 0.1  # policy ratio clip
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    normalize_advantages: bool = True  # per minibatch, as in the reference implementations
    clip_value: bool = False
    value_clip_eps: float = 0.1  # unused while clip_value is False
    learning_rate: float = 2.5e-4  # constant (annealing does not change the cost of a step)
    adam_eps: float = 1e-5
    max_grad_norm: float = 0.5

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches


# ---------------------------------------------------------------------------------------------
# Network


def im2col(x: jax.Array, k: int) -> jax.Array:
    """[N, H, W, C] -> [N, H-k+1, W-k+1, k*k*C] patches of a stride-1 k x k window, HWC order."""
    oh, ow = x.shape[1] - k + 1, x.shape[2] - k + 1
    return jnp.concatenate(
        [x[:, i : i + oh, j : j + ow, :] for i in range(k) for j in range(k)], axis=-1
    )


class Conv(nn.Module):
    """VALID 2D convolution of NHWC inputs with an HWIO kernel (parameters as flax's nn.Conv).

    `impl` chooses how XLA is asked to compute it; all are the same function of the same
    parameters (they differ only in floating-point summation order):
      conv:           one lax.conv_general_dilated with the stride.
      space_to_depth: a stride-s conv rewritten as a stride-1 conv over s x s blocks (fewer,
                      deeper input channels; the kernel is rearranged, not re-parameterized).
      matmul:         space_to_depth, then explicit im2col patches and one matrix multiply.
    """

    features: int
    kernel_size: int
    stride: int
    impl: str = "conv"
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.impl not in CONV_IMPLS:
            raise ValueError(f"impl={self.impl!r} is not one of {CONV_IMPLS}")
        k, s = self.kernel_size, self.stride
        kernel = self.param(
            "kernel",
            nn.initializers.orthogonal(np.sqrt(2.0)),
            (k, k, x.shape[-1], self.features),
        )
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        kernel = kernel.astype(self.dtype)
        x = x.astype(self.dtype)
        if self.impl != "conv" and s > 1:
            x, kernel, k, s = space_to_depth(x, s), space_to_depth_kernel(kernel, s), k // s, 1
        if self.impl == "matmul":
            y = im2col(x, k) @ kernel.reshape(-1, self.features)
        else:
            y = jax.lax.conv_general_dilated(
                x, kernel, (s, s), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
        return y + bias.astype(self.dtype)


class NatureCNN(nn.Module):
    """Mnih et al. 2015 torso: uint8 frames [N, 4, 84, 84] (or [N, 84, 84, 4]) -> [N, 512].

    Attributes:
      obs_layout: "NCHW" (envpool's layout, transposed to NHWC inside) or "NHWC".
      conv_impl: one of CONV_IMPLS for every conv, or a tuple of three, one per conv.
      dtype: compute dtype; parameters stay float32.
    """

    obs_layout: str = "NCHW"
    conv_impl: str | tuple[str, str, str] = "conv"
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs
        if self.obs_layout == "NCHW":
            # Transpose while still uint8 (a quarter of the bytes of float32).
            x = jnp.transpose(x, (0, 2, 3, 1))
        elif self.obs_layout != "NHWC":
            raise ValueError(f"obs_layout={self.obs_layout!r} is not NCHW or NHWC")
        x = x.astype(self.dtype) / 255.0
        impls = self.conv_impl
        if isinstance(impls, str):
            impls = (impls,) * 3
        layers = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
        for i, ((features, kernel, stride), impl) in enumerate(zip(layers, impls, strict=True)):
            x = Conv(features, kernel, stride, impl, self.dtype, name=f"conv_{i}")(x)
            x = nn.relu(x)
        x = x.reshape(x.shape[0], -1)
        x = nn.Dense(
            512,
            kernel_init=nn.initializers.orthogonal(np.sqrt(2.0)),
            bias_init=nn.initializers.zeros,
            dtype=self.dtype,
            name="dense_0",
        )(x)
        return nn.relu(x)


class AtariActorCritic(nn.Module):
    """Nature CNN torso shared by a policy head (logits) and a value head, float32 outputs."""

    num_actions: int
    obs_layout: str = "NCHW"
    conv_impl: str | tuple[str, str, str] = "conv"
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = NatureCNN(self.obs_layout, self.conv_impl, self.dtype, name="torso")(obs)
        h = h.astype(jnp.float32)
        logits = heads.CategoricalHead(self.num_actions, name="policy_head")(h)
        value = heads.ValueHead(name="value_head")(h)
        return logits, value


@dataclasses.dataclass(frozen=True)
class _ObsAdapter:
    """Presents a module on raw observations as the (params, obs_norm, obs, extras) network
    interface that seedlike's PPO loss calls; Atari frames are not running-normalized."""

    module: nn.Module

    def apply(self, params, obs_norm, obs, extras=None):
        del obs_norm, extras
        return self.module.apply(params, obs["obs"])


# ---------------------------------------------------------------------------------------------
# Learner: pure functions of (state, data)


@flax.struct.dataclass
class TrainState:
    params: Any
    opt_state: optax.OptState


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    """Global-norm clipping then Adam, the learning rate injected so it can be changed."""

    def build(learning_rate):
        return optax.chain(
            optax.clip_by_global_norm(config.max_grad_norm),
            optax.adam(learning_rate, eps=config.adam_eps),
        )

    return optax.inject_hyperparams(build)(learning_rate=config.learning_rate)


def make_sgd_step(module: nn.Module, config: PPOConfig, optimizer: optax.GradientTransformation):
    """Returns sgd_step(state, batch: batches.SampleBatch) -> (state, metrics), one PPO gradient
    step."""
    loss_fn = ppo.make_ppo_loss(_ObsAdapter(module), config)

    def sgd_step(state: TrainState, batch: batches.SampleBatch):
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (_, (metrics, _)), grads = grad_fn(state.params, {}, {}, batch, None)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
        return TrainState(params=params, opt_state=opt_state), metrics

    return sgd_step


class Rollout(NamedTuple):
    """One iteration of experience, time-major [T, B] (T = num_steps, B = num_envs).

    Step t holds the observation the policy saw and what it did; reward/terminated/truncated are
    the outcome of action t. envpool auto-resets: the step after a terminated/truncated one shows
    the terminal observation, ignores the action and returns reward 0, so it has valid=False and
    no loss. value has T+1 rows; row T bootstraps from the observation after the last step.
    """

    obs: np.ndarray  # uint8 [T, B, 4, 84, 84]
    action: np.ndarray  # int32 [T, B]
    logp: np.ndarray  # float32 [T, B]
    value: np.ndarray  # float32 [T+1, B]
    reward: np.ndarray  # float32 [T, B], clipped by envpool (reward_clip=True)
    terminated: np.ndarray  # bool [T, B], a life lost (episodic_life=True) or game over
    truncated: np.ndarray  # bool [T, B]
    valid: np.ndarray  # bool [T, B]


def make_prepare(config: PPOConfig):
    """Returns prepare(rollout) -> flat batches.SampleBatch [T*B, ...] with GAE advantages."""

    def single(reward, terminated, truncated, valid, value):
        discount_t, lambda_t = gae.episode_discounts(
            terminated, truncated, valid, config.gamma, config.gae_lambda
        )
        return gae.generalized_advantage_estimation(reward, discount_t, lambda_t, value)

    def prepare(rollout: Rollout) -> batches.SampleBatch:
        # vmap over envs of the single-trajectory GAE: inputs are [T, B], so map axis 1.
        advantage = jax.vmap(single, in_axes=1, out_axes=1)(
            rollout.reward, rollout.terminated, rollout.truncated, rollout.valid, rollout.value
        )
        value = rollout.value[:-1]

        def flat(x):
            return x.reshape((-1,) + x.shape[2:])

        return batches.SampleBatch(
            obs={"obs": flat(rollout.obs)},
            extras={},
            action=flat(rollout.action),
            behaviour_logp=flat(rollout.logp),
            behaviour_value=flat(value),
            advantage=flat(advantage),
            value_target=flat(advantage + value),
            mask=flat(rollout.valid).astype(jnp.float32),
        )

    return prepare


def _take(batch: batches.SampleBatch, idx: jax.Array) -> batches.SampleBatch:
    return jax.tree.map(lambda x: x[idx], batch)


def make_update(
    sgd_step, config: PPOConfig, mode: str, unroll: bool = False, compiler_options=None
) -> Callable:
    """Returns update(state, batch, key) -> (state, metrics of the last sgd step).

    loop: a Python loop over one jitted step(state, batch, minibatch indices); the gather runs
    inside the jitted step so that the batch stays on the device.
    scan: one jitted function, lax.scan over epochs and over minibatches; `unroll` unrolls both
    scans completely (num_epochs * num_minibatches copies of the step, no while loop).
    """
    jit = functools.partial(jax.jit, compiler_options=compiler_options)
    n, m = config.batch_size, config.num_minibatches

    def step_on(state, batch, idx):
        return sgd_step(state, _take(batch, idx))

    if mode == "loop":
        jitted = jit(step_on)
        shuffle = jit(lambda key: jax.random.permutation(key, n).reshape(m, -1))

        def update(state, batch, key):
            metrics = None
            for epoch_key in jax.random.split(key, config.num_epochs):
                perm = np.asarray(shuffle(epoch_key))
                for i in range(m):
                    state, metrics = jitted(state, batch, perm[i])
            return state, metrics

        return update

    if mode == "scan":

        def update(state, batch, key):
            def epoch(state, epoch_key):
                perm = jax.random.permutation(epoch_key, n).reshape(m, -1)
                return jax.lax.scan(
                    lambda s, idx: step_on(s, batch, idx), state, perm, unroll=unroll
                )

            keys = jax.random.split(key, config.num_epochs)
            state, metrics = jax.lax.scan(epoch, state, keys, unroll=unroll)
            return state, jax.tree.map(lambda x: x[-1, -1], metrics)

        return jit(update)

    raise ValueError(f"update mode {mode!r} is not loop or scan")


# ---------------------------------------------------------------------------------------------
# Acting


def make_act(module: nn.Module, compiler_options=None):
    """Returns jitted act(params, obs, key) -> (action, logp, value, key) for one env batch."""

    def act(params, obs, key):
        key, sample_key = jax.random.split(key)
        logits, value = module.apply(params, obs)
        action = jax.random.categorical(sample_key, logits)
        return action, heads.log_prob(logits, action), value, key

    return jax.jit(act, compiler_options=compiler_options)


class EpisodeTracker:
    """Sums the unclipped game score of each env until the game (not just a life) is over."""

    def __init__(self, num_envs: int):
        self._running = np.zeros(num_envs, np.float64)
        self.returns: list[float] = []

    def add(self, info: dict, truncated: np.ndarray) -> None:
        self._running += info["reward"]
        ended = np.logical_or(info["terminated"].astype(bool), truncated)
        self.returns.extend(float(r) for r in self._running[ended])
        self._running[ended] = 0.0


@dataclasses.dataclass
class RolloutTimes:
    env_s: float = 0.0
    inference_s: float = 0.0


def collect(env, act, params, obs, prev_done, key, config: PPOConfig, tracker, times):
    """Runs config.num_steps synchronous env steps; returns (rollout, obs, prev_done, key)."""
    t_len, b = config.num_steps, config.num_envs
    buf = {
        "obs": np.empty((t_len, b, *obs.shape[1:]), np.uint8),
        "action": np.empty((t_len, b), np.int32),
        "logp": np.empty((t_len, b), np.float32),
        "value": np.empty((t_len + 1, b), np.float32),
        "reward": np.empty((t_len, b), np.float32),
        "terminated": np.empty((t_len, b), np.bool_),
        "truncated": np.empty((t_len, b), np.bool_),
        "valid": np.empty((t_len, b), np.bool_),
    }
    for t in range(t_len):
        start = time.perf_counter()
        buf["obs"][t] = obs
        buf["valid"][t] = ~prev_done
        action, logp, value, key = act(params, obs, key)
        action, buf["logp"][t], buf["value"][t] = jax.device_get((action, logp, value))
        buf["action"][t] = action
        mid = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(action)
        times.env_s += time.perf_counter() - mid
        times.inference_s += mid - start
        buf["reward"][t], buf["terminated"][t], buf["truncated"][t] = reward, terminated, truncated
        prev_done = np.logical_or(terminated, truncated)
        tracker.add(info, truncated)
    # The bootstrap value of the observation after the last step, with the acting parameters.
    start = time.perf_counter()
    _, _, value, _ = act(params, obs, key)
    buf["value"][t_len] = jax.device_get(value)
    times.inference_s += time.perf_counter() - start
    return Rollout(**buf), obs, prev_done, key


# ---------------------------------------------------------------------------------------------
# Driver


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How the baseline runs (what the flags set); PPOConfig holds the algorithm."""

    iterations: int = 10
    update_mode: str = "loop"  # loop | scan, see make_update
    scan_unroll: bool = False
    conv_impl: str | tuple[str, str, str] = ("conv", "space_to_depth", "conv")  # see NatureCNN
    ynn_convolutions: bool = False  # False: compile with YNN_WITHOUT_CONVOLUTIONS
    env_id: str = "Breakout-v5"
    seed: int = 1

    def __post_init__(self):
        impls = (self.conv_impl,) if isinstance(self.conv_impl, str) else self.conv_impl
        if len(impls) not in (1, 3) or any(i not in CONV_IMPLS for i in impls):
            raise ValueError(f"conv_impl={self.conv_impl!r}: one or three of {CONV_IMPLS}")
        if self.update_mode not in ("loop", "scan"):
            raise ValueError(f"update_mode={self.update_mode!r} is not loop or scan")

    @property
    def compiler_options(self) -> dict | None:
        return None if self.ynn_convolutions else {YNN_FUSION_TYPE: YNN_WITHOUT_CONVOLUTIONS}


def train(run: RunConfig, config: PPOConfig) -> dict:
    """Runs run.iterations rollout + update iterations; returns per-iteration timings."""
    import envpool

    env_id, seed, options = run.env_id, run.seed, run.compiler_options
    env = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=config.num_envs,
        episodic_life=True,
        reward_clip=True,
        seed=seed,
    )
    module = AtariActorCritic(num_actions=int(env.action_space.n), conv_impl=run.conv_impl)
    optimizer = make_optimizer(config)
    key = jax.random.PRNGKey(seed)
    key, init_key, update_key = jax.random.split(key, 3)
    obs, _ = env.reset()
    params = module.init(init_key, obs)
    state = TrainState(params=params, opt_state=optimizer.init(params))

    act = make_act(module, options)
    prepare = jax.jit(make_prepare(config), compiler_options=options)
    sgd_step = make_sgd_step(module, config, optimizer)
    update = make_update(sgd_step, config, run.update_mode, run.scan_unroll, options)
    tracker = EpisodeTracker(config.num_envs)
    prev_done = np.zeros(config.num_envs, np.bool_)

    rows = []
    for it in range(run.iterations):
        times = RolloutTimes()
        start = time.perf_counter()
        rollout, obs, prev_done, key = collect(
            env, act, state.params, obs, prev_done, key, config, tracker, times
        )
        mid = time.perf_counter()
        update_key, it_key = jax.random.split(update_key)
        state, metrics = update(state, prepare(rollout), it_key)
        metrics = jax.device_get(metrics)
        end = time.perf_counter()
        row = {
            "iteration": it,
            "env_steps": config.batch_size,
            "wall_s": end - start,
            "rollout_s": mid - start,
            "rollout_env_s": times.env_s,
            "rollout_inference_s": times.inference_s,
            "update_s": end - mid,
            "episodes_so_far": len(tracker.returns),
            "loss": {k: float(v) for k, v in metrics.items()},
        }
        rows.append(row)
        print(
            f"iter {it:3d}  wall {row['wall_s']:6.2f}s  rollout {row['rollout_s']:5.2f}s "
            f"(env {times.env_s:5.2f}s, inference {times.inference_s:5.2f}s)  "
            f"update {row['update_s']:6.2f}s  episodes {len(tracker.returns)}",
            flush=True,
        )
    env.close()
    return {"iterations": rows, "episode_returns": tracker.returns}


def summarize(result: dict) -> dict:
    """Steady-state SPS and the median seconds per iteration of each phase."""
    steady = result["iterations"][WARMUP_ITERATIONS:]
    if not steady:
        return {"note": f"need more than {WARMUP_ITERATIONS} iterations for steady numbers"}
    wall = sum(r["wall_s"] for r in steady)
    med = {k: float(np.median([r[k] for r in steady])) for k in steady[0] if k.endswith("_s")}
    returns = result["episode_returns"]
    return {
        "steady_iterations": len(steady),
        "steady_sps": sum(r["env_steps"] for r in steady) / wall,
        "median_iteration_s": med,
        "update_fraction": sum(r["update_s"] for r in steady) / wall,
        "episodes": len(returns),
        "episode_return_mean": float(np.mean(returns)) if returns else None,
        "episode_return_last10_mean": float(np.mean(returns[-10:])) if returns else None,
    }


def main(argv):
    del argv
    config = PPOConfig()
    impls = _CONV_IMPL.value
    run = RunConfig(
        iterations=_ITERATIONS.value,
        update_mode=_UPDATE_MODE.value,
        scan_unroll=_SCAN_UNROLL.value,
        conv_impl=impls[0] if len(impls) == 1 else tuple(impls),
        ynn_convolutions=_YNN_CONVOLUTIONS.value,
        env_id=_ENV_ID.value,
        seed=_SEED.value,
    )
    result = train(run, config)
    out = {
        "run": dataclasses.asdict(run),
        "compiler_options": run.compiler_options,
        "config": dataclasses.asdict(config),
        "summary": summarize(result),
        **result,
        "platform": {
            "jax": jax.__version__,
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        },
    }
    print(json.dumps(out["summary"], indent=2))
    if _OUT.value:
        os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
        with open(_OUT.value, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    app.run(main)
