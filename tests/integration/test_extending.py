"""seedlike extended from outside its code, as a researcher would: an env backend, a learning
algorithm and a policy head, each one module (this one) plus one registry line, with no edit to
the library. They train together, in one process (learner and actor threads), and the trained
network is widened by surgery exactly, its new head included. A replay algorithm (one-step
Q-learning from the learner's replay, its module made here) trains on the same env through the
same contract.

The env ("signal"): every step shows one of K cues, one-hot; the action that names it earns 1.
Episodes last LENGTH steps, so a random policy returns LENGTH / K and the best one LENGTH.
"""

from __future__ import annotations

import os
import sys
import threading
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from networks import heads
from networks.graph import Part, Reader, Space
from seedlike import algos, envs
from seedlike.actor import Actor
from seedlike.algos import gae
from seedlike.algos.batches import SampleBatch, Transitions
from seedlike.config import base_config
from seedlike.envs.device import DeviceEnv
from seedlike.learner import train
from seedlike.metrics import read_metrics
from seedlike.ondevice import run as ondevice
from seedlike.rpc.listen import ADDRESS_FILE
from seedlike.types import ArraySpec, EnvSpec, Rows
from surgery.checkpoint_surgery import run_surgery
from surgery.plan import Plan, WidenDense

K, LENGTH = 3, 8
THIS = __name__  # the module of the backend's and the algorithm's functions


# The env backend (the contract in seedlike/envs/__init__.py) --------------------------------


def check_env(env_config) -> None:
    if env_config.name != "signal":
        raise ValueError(f"env.name={env_config.name!r}: the toy backend has only 'signal'")


def make_env_spec(env_config) -> EnvSpec:
    return EnvSpec("signal", {"obs": ArraySpec(np.float32, (K,))}, num_actions=K)


def takes_render_mode(name: str) -> bool:
    return False


class Adapter:
    """env.num_envs signal envs, stepped together; an ended episode restarts at the next send."""

    def __init__(self, env_config, spec: EnvSpec, seed: int):
        self.n = int(env_config.num_envs)
        self.rng = np.random.default_rng(seed)
        self.env_id = np.arange(self.n, dtype=np.int32)

    def reset(self) -> None:
        self.cue = self.rng.integers(0, K, self.n)
        self.t = np.zeros(self.n, np.int64)
        self.reward = np.zeros(self.n, np.float32)

    def recv(self) -> Rows:
        done = self.t >= LENGTH
        return Rows(
            {"obs": np.eye(K, dtype=np.float32)[self.cue]}, {}, self.reward.copy(),
            done.copy(), np.zeros(self.n, bool), self.env_id, np.zeros(self.n, np.int32),
            ~done, done.copy(),
        )  # fmt: skip

    def send(self, action: np.ndarray, rows: Rows) -> None:
        acted = np.zeros(self.n, np.int64)
        acted[rows.env_id] = action
        done = self.t >= LENGTH
        self.reward = np.where(done, 0.0, (acted == self.cue).astype(np.float32))
        self.t = np.where(done, 0, self.t + 1)  # an ended episode restarts, its action ignored
        self.cue = self.rng.integers(0, K, self.n)

    def close(self) -> None:
        pass


def device_env(env_config, spec: EnvSpec) -> DeviceEnv:
    """The same env as JAX functions, for the backend declared on-device (seedlike.ondevice)."""

    def observe(cue):
        return {"obs": jax.nn.one_hot(cue, K, dtype=jnp.float32)}

    def reset(key):
        cue = jax.random.randint(key, (), 0, K)
        return (cue, jnp.int32(0)), observe(cue)

    def step(state, action, key):
        cue, t = state
        reward = (action == cue).astype(jnp.float32)
        cue = jax.random.randint(key, (), 0, K)
        return (cue, t + 1), observe(cue), reward, t + 1 >= LENGTH, jnp.bool_(False)

    return DeviceEnv(reset, step)


# The algorithm: policy gradient with a learned baseline (the Algorithm contract) -------------


def toy_defaults() -> ml_collections.ConfigDict:
    c = algos.common_settings(ml_collections.ConfigDict())
    c.gae_lambda = 0.9
    c.epochs = 1
    c.num_minibatches = 1
    return c


def advantages(section):
    def fn(unroll):
        discount_t, lambda_t = gae.episode_discounts(
            unroll.terminated, unroll.truncated, unroll.valid[:-1], section.gamma,
            section.gae_lambda,
        )  # fmt: skip
        advantage = gae.generalized_advantage_estimation(
            unroll.reward, discount_t, lambda_t, unroll.behaviour_value
        )
        return advantage, advantage + unroll.behaviour_value[:-1]

    return fn


def make_loss(network, section, axis_name):
    def loss_fn(params, target_params, obs_norm, batch, key):
        # Feed-forward, and the record's batch type is steps: a SampleBatch of independent steps.
        assert isinstance(batch, SampleBatch)
        logits, value = network.apply(params, obs_norm, batch.obs, batch.extras, batch.action)
        logp = heads.log_prob(logits, batch.action, network.action_sizes)
        count = jnp.maximum(jnp.sum(batch.mask), 1.0)

        def mean(x):
            return jnp.sum(batch.mask * x) / count

        policy = -mean(logp * batch.advantage)
        value_loss = mean(jnp.square(value - batch.value_target))
        entropy = mean(heads.entropy(logits, network.action_sizes))
        total = policy + section.vf_coef * value_loss - section.ent_coef * entropy
        metrics = {
            "loss/total": total,
            "loss/policy": policy,
            "loss/value": value_loss,
            "loss/entropy": entropy,
        }
        return total, (metrics, None)  # no priorities: nothing is replayed

    return loss_fn


# A replay algorithm: one-step Q-learning against the target network (the same contract) -------


def toy_q_defaults() -> ml_collections.ConfigDict:
    c = algos.replay_settings(ml_collections.ConfigDict())
    c.batch_transitions = 32
    c.n_step = 1  # the replay's targets: one reward, then the bootstrap
    c.target_period = 20
    c.capacity, c.min_fill, c.replay_ratio = 4_000, 256, 2.0
    c.epsilon, c.epsilon_slots = 0.1, 1
    return c


def make_q_loss(network, section, axis_name):
    def loss_fn(params, target_params, obs_norm, batch, key):
        # The record's batch type is transitions: a Transitions batch sampled by priority.
        assert isinstance(batch, Transitions) and target_params
        q = network.q_values(network.apply(params, obs_norm, batch.obs, batch.extras)[0])
        after = network.apply(target_params, obs_norm, batch.next_obs, batch.next_extras)[0]
        goal = batch.reward + batch.discount * network.q_values(after).max(-1)
        td = jax.lax.stop_gradient(goal) - jnp.take_along_axis(q, batch.action[:, None], -1)[:, 0]
        loss = jnp.mean(batch.weight * jnp.square(td))
        metrics = {"loss/total": loss, "loss/td_abs": jnp.mean(jnp.abs(td))}
        return loss, (metrics, jax.lax.stop_gradient(jnp.abs(td)))  # the new priorities

    return loss_fn


# The policy head (the POLICY_HEADS contract in networks/heads.py) -----------------------------


class HiddenLayerHead(nn.Module):
    """Logits through one ReLU layer of WIDTH units."""

    num_actions: int
    width: int = 16

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.relu(nn.Dense(self.width, name="hidden")(x))
        return nn.Dense(
            self.num_actions, kernel_init=nn.initializers.orthogonal(0.01), name="logits"
        )(h)

    def graph(self, name: str) -> Part:
        hidden, logits = f"{name}/hidden", f"{name}/logits"
        spaces = {
            hidden: Space((hidden,), readers=(Reader(logits),)),
            logits: Space((logits,), refused=f"params/{logits} is the policy head's output"),
        }
        return Part(readers=(Reader(hidden),), spaces=spaces, logits=logits)


class WiderHiddenLayerHead(HiddenLayerHead):
    width: int = 24


@pytest.fixture
def extended(monkeypatch):
    """The three registry lines (undone after the test)."""
    monkeypatch.setitem(envs.BACKENDS, "toy", envs.Backend("toy", THIS))
    monkeypatch.setitem(envs.BACKENDS, "toy_jax", envs.Backend("toy_jax", THIS, on_device=True))
    record = algos.Algorithm(
        name="toy_pg",
        defaults=toy_defaults,
        check=lambda config: algos.check_common("toy_pg", config.toy_pg),
        metrics=("loss/total", "loss/policy", "loss/value", "loss/entropy"),
        module=THIS,
        batch=algos.STEPS,
    )
    monkeypatch.setitem(algos.ALGORITHMS, "toy_pg", record)
    q_module = types.ModuleType("toy_q")  # its module, made from outside the library
    q_module.make_loss = make_q_loss
    monkeypatch.setitem(sys.modules, "toy_q", q_module)
    q_record = algos.Algorithm(
        name="toy_q",
        defaults=toy_q_defaults,
        check=lambda config: (
            algos.check_replay("toy_q", config.toy_q) + algos.check_replay_run(config)
        ),
        metrics=("loss/total", "loss/td_abs"),
        module="toy_q",
        batch=algos.TRANSITIONS,
        sgd_steps=algos.replayed,
        head="q",
        self_play=False,
    )
    monkeypatch.setitem(algos.ALGORITHMS, "toy_q", q_record)
    monkeypatch.setitem(heads.POLICY_HEADS, "hidden_layer", HiddenLayerHead)
    monkeypatch.setitem(heads.POLICY_HEADS, "wider_hidden_layer", WiderHiddenLayerHead)


def toy_config(**network) -> ml_collections.ConfigDict:
    c = base_config()  # after the registry lines: it has toy_pg and toy_q sections
    c.env.backend, c.env.name, c.env.num_envs = "toy", "signal", 16
    c.algo = "toy_pg"
    c.toy_pg.gamma = 0.5  # a cue's reward is the action's alone: little to look ahead for
    c.network.hidden_sizes, c.network.policy_head = (16,), "hidden_layer"
    c.network.normalize_obs = False
    c.unroll_length, c.batch_unrolls = 8, 8
    c.optimizer.learning_rate, c.optimizer.anneal_lr = 3e-2, False
    c.total_env_steps = 12_000
    c.log.interval_s, c.log.wandb_mode = 0.5, "disabled"
    c.checkpoint.interval_s = 1e9
    c.network.update(network)
    return c


def train_with_an_actor(config, logdir: str) -> list[float]:
    """Trains `config` in this process with one actor thread; the run's returns."""
    stop = threading.Event()
    codes = []

    def act():
        address_file = os.path.join(logdir, ADDRESS_FILE)
        while not os.path.exists(address_file) and not stop.is_set():
            stop.wait(0.1)
        if stop.is_set():
            return
        with open(address_file) as f:
            codes.append(Actor(config, f.read().strip(), 0, stop).run())

    actor = threading.Thread(target=act, daemon=True)
    actor.start()
    try:
        train(config, logdir, port=0, stop=None)
    finally:
        stop.set()
        actor.join(60)
    assert codes == [0]  # the actor ended with the run
    rows = read_metrics(logdir)
    assert rows[-1]["policy_version"] > 20
    assert all(k in rows[-1] for k in algos.ALGORITHMS[config.algo].metrics)
    return [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]


@pytest.mark.slow
def test_a_backend_an_algorithm_and_a_head_from_outside_train_and_widen_exactly(extended, tmp_path):
    logdir = str(tmp_path / "run")
    returns = train_with_an_actor(toy_config(), logdir)
    assert returns[-1] > 0.75 * LENGTH > 2 * LENGTH / K  # well above random play

    # Surgery: the torso widened by a derived plan, and the new head's own layer by a hand plan.
    wider_torso = toy_config(hidden_sizes=(24,))
    outcome = run_surgery(logdir, str(tmp_path / "wide"), new_config=wider_torso)
    assert [op.path for op in outcome.plan.ops] == [
        "params/policy_torso/dense_0",
        "params/value_torso/dense_0",
    ]
    assert outcome.report.unroll_max_abs_logits < 1e-5
    wider_head = toy_config(policy_head="wider_hidden_layer")
    hand = Plan((WidenDense("params/policy_head/hidden", 24, "random", 0.1, 0.01),))
    outcome = run_surgery(logdir, str(tmp_path / "head"), plan=hand, new_config=wider_head)
    assert outcome.changes["params/policy_head/hidden/kernel"] == "[16, 16] -> [16, 24]"
    assert outcome.report.unroll_max_abs_logits < 1e-5


@pytest.mark.slow
def test_a_replay_algorithm_from_outside_learns_through_the_same_contract(extended, tmp_path):
    config = toy_config(policy_head="auto", hidden_sizes=(32,))  # auto: the record's "q"
    config.algo = "toy_q"
    config.optimizer.learning_rate = 3e-3
    returns = train_with_an_actor(config, str(tmp_path / "q"))
    # Greedy on the cue earns LENGTH; exploring 10% of the time a little less (0.9 + 0.1 / K).
    assert returns[-1] > 0.75 * LENGTH > 2 * LENGTH / K, returns


def test_the_same_algorithm_and_head_learn_on_the_device_from_an_outside_jax_env(
    extended, tmp_path
):
    """The toy env as JAX functions (device_env), declared on-device: the outside algorithm and
    head train inside the compiled program through the same contract, with no actor."""
    config = toy_config()
    config.env.backend = "toy_jax"
    config.batch_unrolls = 8  # envs on the device, 4 on each of the suite's 2
    row = ondevice.train(config, str(tmp_path / "device"))
    assert row["policy_version"] == 12_000 // 64 + 1
    assert row["episode_return_mean"] > 0.75 * LENGTH > 2 * LENGTH / K  # well above random
