"""Builders the tests share: specs, rows, services, networks, parameters, runs on disk and
credentials, one definition each. Processes and waiting are in tests/procs.py."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys

import jax
import ml_collections
import numpy as np

import surgery
from networks import make_network
from seedlike.checkpoint import Checkpointer
from seedlike.config import base_config, resolve
from seedlike.envs import make_env_spec
from seedlike.learning import train_state as ts
from seedlike.policy import PolicyRegistry
from seedlike.server.inference import InferenceService
from seedlike.types import ArraySpec, EnvSpec, Rows, Unroll
from surgery.plan import Context, layout_of
from tests.procs import ROOT

# The inference service without gRPC (test_inference) --------------------
SERVE_SPEC = EnvSpec("t", {"obs": ArraySpec(np.float32, (2,))}, num_actions=3)


def service_of(store, guard=None, spec=SERVE_SPEC, **server):
    config = base_config()
    config.network.hidden_sizes = (4,)
    config.server.update(server)
    network = make_network(config.network, spec)
    registry = PolicyRegistry()
    params = {"params": network.init(jax.random.key(0)), "obs_norm": network.init_obs_norm()}
    registry.publish(3, params)
    service = InferenceService.from_config(
        config, spec=spec, network=network, registry=registry, store=store, guard=guard
    )
    service.start()
    return service


def rows(n, value=0.0, env_id=None):
    zeros = np.zeros(n, bool)
    env_id = np.arange(n, dtype=np.int32) if env_id is None else np.asarray(env_id, np.int32)
    return Rows(
        {"obs": np.full((n, 2), value, np.float32)}, {}, np.ones(n, np.float32), zeros, zeros,
        env_id, np.zeros(n, np.int32), ~zeros, zeros,
    )  # fmt: skip


# Learner updates (test_learner) --------------------
LEARNER_SPEC = EnvSpec("test", {"obs": ArraySpec(np.float32, (4,))}, num_actions=3)


def config_file(path: str, **values) -> ml_collections.ConfigDict:
    """The config file's config (path[:arg]) with wandb off and `values` set by dotted key
    ("ppo.epochs": 2), locked again."""
    from seedlike.config import load_config_file

    c = load_config_file(path)
    c.unlock()
    c.log.wandb_mode = "disabled"
    for key, value in values.items():
        *parents, last = key.split(".")
        target = c
        for part in parents:
            target = target[part]
        target[last] = value
    c.lock()
    return c


def evaluated(logdir: str, episodes: int, timeout: float = 300) -> dict:
    """evaluate.py run on the run's last checkpoint (a process of its own): its evaluation.json."""
    played = subprocess.run(
        [sys.executable, "evaluate.py", f"--checkpoint={logdir}", f"--episodes={episodes}"],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert played.returncode == 0, played.stderr[-2000:]
    with open(os.path.join(logdir, "evaluation.json")) as f:
        return json.load(f)


def learner_config(**overrides) -> ml_collections.ConfigDict:
    c = base_config()
    c.unroll_length = 8
    c.batch_unrolls = 4
    c.total_env_steps = 10_000
    c.ppo.num_minibatches = 2
    c.ppo.epochs = 2
    c.network.hidden_sizes = (16, 16)
    c.optimizer.learning_rate = 3e-3
    c.update(overrides)
    resolve(c)  # the algorithm's head (a replay algorithm's "q")
    return c


def learner_of(config, network, **kwargs):
    """The learner of the config's algorithm (its record's), as the learner process builds it."""
    from seedlike.algos import ALGORITHMS

    return ALGORITHMS[config.algo].learner()(config, network, **kwargs)


def random_unrolls(network, params, obs_norm, batch, horizon, seed=0) -> Unroll:
    """Unrolls whose behaviour log-probs and values come from (params, obs_norm) themselves."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(2.0, 3.0, size=(batch, horizon + 1, 4)).astype(np.float32)
    terminated = rng.random((batch, horizon)) < 0.1
    truncated = ~terminated & (rng.random((batch, horizon)) < 0.05)
    valid = np.ones((batch, horizon + 1), bool)
    valid[:, 1:] &= ~(terminated | truncated)
    first = np.concatenate([rng.random((batch, 1)) < 0.5, ~valid[:, :-1]], axis=1)
    carry = jax.tree.map(
        lambda c: rng.normal(size=c.shape).astype(np.float32), network.initial_carry(batch)
    )
    if network.is_recurrent:
        logits, values, _ = network.unroll(params, obs_norm, {"obs": obs}, {}, carry, first)
    else:
        logits, values = network.apply(params, obs_norm, {"obs": obs})
    action = rng.integers(0, 3, size=(batch, horizon + 1)).astype(np.int32)
    logp = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), action[..., None], -1)[..., 0]
    return Unroll(
        obs={"obs": obs},
        extras={},
        action=action,
        behaviour_logp=logp.astype(np.float32),
        behaviour_value=np.asarray(values, np.float32),
        valid=valid,
        first=first,
        policy_version=np.zeros((batch, horizon + 1), np.int32),
        reward=rng.normal(size=(batch, horizon)).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        carry=carry,
    )


VARIANTS = {
    "ppo": {},
    "ppo_lstm": {"network.core": "lstm", "network.core_size": 8},
    "vtrace": {"algo": "vtrace", "vtrace.num_minibatches": 2},
    "vtrace_lstm": {"algo": "vtrace", "network.core": "lstm", "network.core_size": 8},
}


def variant_config(name):
    c = learner_config()
    # The observation moments cover the batches of the last fair_window_s seconds: on a slow or
    # busy machine the first update's batch could leave one run's window and not the other's
    # (a 2-process vtrace_lstm run on one core did), so the runs compared here keep them all.
    c.server.fair_window_s = 1e9
    c.ppo.num_minibatches = 2 if name == "ppo_lstm" else c.ppo.num_minibatches
    for key, value in VARIANTS[name].items():
        section, _, field = key.rpartition(".")
        (c[section] if section else c)[field] = value
    return c


# Surgery: random networks and parameters, exactness, whole runs (test_surgery) --------------------
TOL = 1e-5

F32 = np.float32

SURGERY_SPEC = EnvSpec("Old-v0", {"b": ArraySpec(F32, (2, 3)), "obs": ArraySpec(F32, (4,))}, 3)

# Two new keys (one sorts first, one last) and a grown key whose new entries interleave.
SPEC_MORE_OBS = EnvSpec(
    "New-v0",
    {
        "a": ArraySpec(F32, (2,)),
        "b": ArraySpec(F32, (2, 4)),
        "obs": ArraySpec(F32, (4,)),
        "z": ArraySpec(F32, (3,)),
    },
    3,
)


def net_config(**overrides):
    c = base_config().network
    for key, value in overrides.items():
        c[key] = value
    return c


def make_net(spec=SURGERY_SPEC, **overrides):
    return make_network(net_config(**overrides), spec)


def random_params(network, seed, scale=1.0, head_scale=0.5):
    """Random weights: kernels N(0, scale^2 / fan_in) (heads: head_scale), biases N(0, .1^2).

    Outputs stay O(1) even through residual and CNN stacks, so that float32 rounding (relative
    to the outputs' magnitude) stays well below the absolute 1e-5 the tests ask for.
    """
    gen = np.random.default_rng(seed)

    def leaf(path, s):
        if len(s.shape) == 1:
            return (0.1 * gen.standard_normal(s.shape)).astype(F32)
        fan_in = int(np.prod(s.shape[:-1]))
        k = head_scale if "head" in jax.tree_util.keystr(path) else scale
        return (k * gen.standard_normal(s.shape) / np.sqrt(fan_in)).astype(F32)

    return jax.tree_util.tree_map_with_path(leaf, jax.eval_shape(network.init, jax.random.key(0)))


def random_obs_norm(network, seed):
    gen = np.random.default_rng(seed)
    return {
        k: v.replace(
            mean=gen.standard_normal(v.mean.shape).astype(F32),
            var=gen.uniform(0.5, 2.0, v.var.shape).astype(F32),
            count=np.asarray(100.0, F32),
        )
        for k, v in network.init_obs_norm().items()
    }


def shapes(tree):
    return jax.tree.map(np.shape, tree)


def check(old_net, new_net, params, obs_norm, result, **kwargs) -> surgery.VerifyReport:
    """Asserts the new parameters fit new_net; returns the verification report."""
    assert shapes(result.params) == shapes(jax.eval_shape(new_net.init, jax.random.key(0)))
    new_norm = surgery.extend_obs_norm(obs_norm, new_net.init_obs_norm())
    return surgery.verify_policy(
        old_net,
        params,
        obs_norm,
        new_net,
        result.params,
        new_norm,
        rng=7,
        carry_map=result.carry_map,
        action_map=result.action_map,
        **kwargs,
    )


def assert_exact(report: surgery.VerifyReport):
    assert report.max_abs_logits <= TOL, report
    assert report.max_abs_value <= TOL, report
    assert report.max_kl <= TOL, report
    assert report.error <= 1e-6, report  # relative to the outputs' scale: float32 rounding


def derive_and_apply(old_net, new_net, params, **kwargs):
    plan = surgery.derive_plan(old_net, new_net, **kwargs)
    return plan, plan.apply(params, 3, Context(layout_of(old_net)))


def adam_state(opt_state):
    return opt_state.inner_state[1][0]


def replace_adam(opt_state, adam):
    inner = (opt_state.inner_state[0], (adam, *opt_state.inner_state[1][1:]))
    return opt_state._replace(inner_state=inner)


SURGERY_SPECS = {
    "Old-v0": SURGERY_SPEC,
    "New-v0": dataclasses.replace(SPEC_MORE_OBS, num_actions=4),
}


def spec_fn(env_config):
    return SURGERY_SPECS[env_config.name]


def save_run(run_dir, config, seed, env_spec_fn=spec_fn):
    network = make_network(config.network, env_spec_fn(config.env))
    optimizer = ts.make_optimizer(config.optimizer)
    params = random_params(network, seed)
    opt_state = jax.jit(optimizer.init)(params)
    adam = adam_state(opt_state)
    gen = np.random.default_rng(seed)
    nu = jax.tree.map(lambda x: gen.uniform(0, 1e-3, x.shape).astype(F32), adam.nu)
    opt_state = replace_adam(opt_state, adam._replace(nu=nu, count=np.int32(80)))
    state = ts.TrainState(
        params=params,
        opt_state=opt_state,
        obs_norm=random_obs_norm(network, seed),
        sgd_steps=np.asarray(80, np.int32),
        policy_version=np.asarray(5, np.int32),
        lr_zero_until=np.asarray(0, np.int32),
    )
    checkpointer = Checkpointer(os.path.join(run_dir, "checkpoints"))
    meta = {"env_steps": 5120, "episodes": 17, "policy_version": 5}
    checkpointer.save(5, state, {**meta, "config": json.loads(config.to_json())})
    checkpointer.close()
    snapshot = {"params": random_params(network, seed + 1), "obs_norm": state.obs_norm}
    surgery.write_snapshot(os.path.join(run_dir, "league", "snapshots", "3"), snapshot)
    return network, state


def surgery_config(env="Old-v0", **network):
    c = base_config()
    c.env.name = env
    c.network.hidden_sizes = (8, 8)
    for key, value in network.items():
        c.network[key] = value
    return c


# Credentials (test_security) --------------------
def make_credentials(directory, *hosts, actors=("actor-0", "actor-1")):
    """A run's credentials for `hosts`, with a certificate for each of `actors` (the names an
    actor given the run's directory takes: actor-<its actor id>)."""
    credentials_script("init", directory, *hosts)
    if actors:
        credentials_script("actors", directory, *actors)
    return str(directory)


def credentials_script(mode, directory, *names):
    """scripts/make_credentials.sh [--mode] DIR NAME...; its stdout."""
    flag = [] if mode == "init" else [f"--{mode}"]
    done = subprocess.run(
        [os.path.join(ROOT, "scripts", "make_credentials.sh"), *flag, str(directory), *names],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# Runs on disk (test_watch) --------------------
def save_untrained_run(run_dir, config_module: str, env_name: str | None = None):
    config = importlib.import_module(f"configs.{config_module}").get_config()
    if env_name:
        config.env.name = env_name
    network = make_network(config.network, make_env_spec(config.env))
    state = ts.init_train_state(network, ts.make_optimizer(config.optimizer), jax.random.key(0))
    checkpointer = Checkpointer(os.path.join(run_dir, "checkpoints"))
    checkpointer.save(0, state, {"policy_version": 0, "config": json.loads(config.to_json())})
    checkpointer.close()


# Leagues (test_league_service) --------------------
def league_config(**overrides):
    c = base_config().league
    c = ml_collections.ConfigDict(c.to_dict())
    c.update(overrides)
    return c
