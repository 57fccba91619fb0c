"""Entities and pointers: factorized action distributions against the joint distribution written
out by hand, the entity encoder's and pointer head's symmetries, factorized actions through the
spec, wire and PettingZoo actor, and a small task that must learn."""

import dataclasses
import itertools
import json
import os
import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import surgery
from networks import heads, make_network
from seedlike.checkpoint import Checkpointer
from seedlike.config import section
from seedlike.envs import make_env, make_env_spec
from seedlike.envs.spaces import spec_from_spaces
from seedlike.envs.targets import KINDS, Targets
from seedlike.league.players import RandomAgent
from seedlike.learning import train_state as ts
from seedlike.rpc import codec
from seedlike.types import LEGAL_ACTION_MASK, ArraySpec, EnvSpec
from surgery.plan import Context, layout_of
from tests.helpers import (
    TOL,
    assert_exact,
    check,
    derive_and_apply,
    random_obs_norm,
    random_params,
    save_run,
)
from tests.helpers import adam_state as _adam
from tests.helpers import surgery_config as small_config
from tests.procs import ROOT, returns, train

SIZES = (3, 4, 2)
F32 = np.float32


def joint(logits: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """The joint distribution [n, prod(SIZES)] over actions a = ravel_multi_index(args), from
    per-head softmaxes over the legal choices: the reference the factorized functions must match."""
    probs = []
    for part, legal in zip(
        np.split(logits, np.cumsum(SIZES)[:-1], -1),
        np.split(np.ones_like(logits, bool) if mask is None else mask, np.cumsum(SIZES)[:-1], -1),
    ):
        e = np.where(legal, np.exp(part - part.max(-1, keepdims=True)), 0.0)
        probs.append(e / e.sum(-1, keepdims=True))
    out = np.ones((logits.shape[0], int(np.prod(SIZES))))
    for a, args in enumerate(itertools.product(*(range(n) for n in SIZES))):
        assert np.ravel_multi_index(args, SIZES) == a
        out[:, a] = np.prod([p[:, d] for p, d in zip(probs, args)], axis=0)
    return out


def test_digits_and_join_are_numpys_mixed_radix():
    actions = np.arange(int(np.prod(SIZES)))
    args = heads.digits(jnp.asarray(actions), SIZES)
    np.testing.assert_array_equal(np.stack(args), np.unravel_index(actions, SIZES))
    np.testing.assert_array_equal(heads.join(args, SIZES), actions)


def test_factorized_log_prob_entropy_kl_match_the_joint_distribution():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, sum(SIZES))).astype(F32) * 2
    other = rng.normal(size=(5, sum(SIZES))).astype(F32)
    mask = rng.random((5, sum(SIZES))) < 0.7
    mask[0, :3] = False  # a head with no legal choice falls back to all of its choices
    want_mask = mask.copy()
    want_mask[0, :3] = True
    masked = heads.apply_mask(jnp.asarray(logits), jnp.asarray(mask), SIZES)
    p = joint(logits, want_mask)
    q = joint(other)
    actions = np.array([rng.choice(p.shape[1], p=row / row.sum()) for row in p])
    np.testing.assert_allclose(
        heads.log_prob(masked, jnp.asarray(actions), SIZES),
        np.log(p[np.arange(5), actions]),
        rtol=1e-5,
        atol=1e-5,
    )
    logp = np.log(np.where(p > 0, p, 1.0))
    np.testing.assert_allclose(heads.entropy(masked, SIZES), -(p * logp).sum(1), rtol=1e-5)
    np.testing.assert_allclose(
        heads.kl_divergence(masked, jnp.asarray(other), SIZES),
        (p * (logp - np.log(q))).sum(1),
        rtol=1e-4,
        atol=1e-6,
    )


def test_sample_and_greedy_follow_the_heads():
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.normal(size=(1, sum(SIZES))).astype(F32))
    draws = heads.sample(jax.random.key(0), jnp.repeat(logits, 40000, 0), SIZES)
    freq = np.bincount(np.asarray(draws), minlength=int(np.prod(SIZES))) / 40000
    np.testing.assert_allclose(freq, joint(np.asarray(logits))[0], atol=0.01)
    assert int(heads.greedy(logits, SIZES)[0]) == int(np.argmax(joint(np.asarray(logits))[0]))


def test_random_bot_draws_each_argument_from_its_own_mask():
    mask = np.zeros((200, sum(SIZES)), bool)
    mask[:, [1, 2, 3 + 3, 7 + 0]] = True  # head 0: {1, 2}, head 1: {3}, head 2: {0}
    actions = RandomAgent(SIZES).act({}, mask, None, None, np.random.default_rng(0))
    args = np.stack(np.unravel_index(actions, SIZES), -1)
    assert set(args[:, 0]) == {1, 2} and set(args[:, 1]) == {3} and set(args[:, 2]) == {0}


def targets_env(num_envs=2, **kwargs):
    return section(
        "env", backend="pettingzoo", name="seedlike.envs.targets", num_envs=num_envs,
        kwargs={"num_agents": 2, "entities": 5, **kwargs},
    )  # fmt: skip


def network(spec, **overrides):
    return make_network(
        section(
            "network",
            **{"entities": "entities", "pointer_heads": (1,), "hidden_sizes": (32,),
               "entity_size": 16, **overrides},
        ),
        spec,
    )  # fmt: skip


def test_multidiscrete_becomes_a_factorized_spec_and_travels_in_the_hello():
    spec = make_env_spec(targets_env())
    assert spec.action_heads == (KINDS, 5) and spec.num_actions == KINDS * 5
    assert spec.extras[LEGAL_ACTION_MASK].shape == (KINDS + 5,) == (spec.logits_size,)
    assert "action_mask" not in spec.observation
    codec.check_hello(codec.make_hello(spec, 0, 2), spec, 8)
    flat = EnvSpec(spec.name, spec.observation, spec.num_actions, extras=spec.extras)
    with pytest.raises(codec.ProtocolError, match="hello.action_heads"):
        codec.check_hello(codec.make_hello(flat, 0, 2), spec, 8)
    with pytest.raises(ValueError, match="need num_actions = their product"):
        EnvSpec("x", {}, 7, action_heads=(2, 3))
    with pytest.raises(ValueError, match="Discrete, 1-d MultiDiscrete, Box"):
        box = gymnasium.spaces.Box(0, 1, (2,))
        spec_from_spaces("x", box, gymnasium.spaces.MultiDiscrete([[2, 2], [2, 2]]), 1)


def test_the_actor_sends_each_argument_to_the_env():
    """Targets scores 1 for the weakest entity with the style of its kind: the optimal action,
    sent as one mixed-radix int, must reach the env as its two arguments."""
    config = targets_env(num_envs=3)
    spec = make_env_spec(config)
    env = make_env(config, spec, seed=0)
    env.reset()
    for _ in range(3):
        rows = env.recv()
        units = rows.obs["entities"]
        health = np.where(units[..., KINDS + 1] > 0, units[..., KINDS], np.inf)
        target = health.argmin(1)
        style = units[np.arange(len(target)), target, :KINDS].argmax(1)
        assert rows.extras[LEGAL_ACTION_MASK][np.arange(len(target)), KINDS + target].all()
        env.send(np.ravel_multi_index((style, target), spec.action_heads).astype(np.int32), rows)
        rewards = env.recv().reward
        np.testing.assert_array_equal(rewards, 1.0)
        env.send(np.zeros_like(rewards, np.int32), rows)  # style 0 at slot 0: mostly wrong
    env.close()


def random_units(rng, n, e, f, present=None):
    units = rng.normal(size=(n, e, f)).astype(F32)
    if present is not None:
        units[~present] = 0.0
    return units


def test_pointer_logits_follow_their_entities_and_skip_absent_ones():
    spec = make_env_spec(targets_env(entities=6))
    net = network(spec)
    params = jax.jit(net.init)(jax.random.key(0))
    rng = np.random.default_rng(0)
    present = rng.random((4, 6)) < 0.7
    present[:, 0] = True
    units = random_units(rng, 4, 6, 5, present)
    apply = jax.jit(net.apply)  # one compilation, not one per op
    logits, value = apply(params, {}, {"entities": units})
    perm = rng.permutation(6)
    logits_p, value_p = apply(params, {}, {"entities": units[:, perm]})
    # the pointer's logits move with their entities; style logits and the value do not change
    np.testing.assert_allclose(logits_p[:, KINDS:], logits[:, KINDS:][:, perm], atol=1e-5)
    np.testing.assert_allclose(logits_p[:, :KINDS], logits[:, :KINDS], atol=1e-5)
    np.testing.assert_allclose(value_p, value, atol=1e-5)
    assert np.all(np.asarray(logits[:, KINDS:])[~present] == heads.MASKED_LOGIT)
    assert np.all(np.asarray(logits[:, KINDS:])[present] > heads.MASKED_LOGIT / 2)


def test_extra_pointer_choices_and_empty_sets_are_finite():
    units = ArraySpec(F32, (4, 3))
    spec = EnvSpec(
        "e", {"entities": units, "obs": ArraySpec(F32, (2,))}, 2 * 5, action_heads=(2, 5)
    )
    net = network(spec)  # head 1 has 5 choices: 4 entities and one more
    params = jax.jit(net.init)(jax.random.key(1))
    obs = {"entities": np.zeros((2, 4, 3), F32), "obs": np.ones((2, 2), F32)}
    obs["entities"][1, 2] = 1.0

    def loss(p):
        logits, value = net.apply(p, {}, obs)
        return heads.log_prob(logits, jnp.array([4, 2]), net.action_sizes).sum() + value.sum()

    logits, _ = jax.jit(net.apply)(params, {}, obs)
    assert logits.shape == (2, 2 + 5)
    assert np.all(np.asarray(logits[0, 2:6]) == heads.MASKED_LOGIT)  # nobody there
    assert np.all(np.asarray(logits[1, [2, 3, 5]]) == heads.MASKED_LOGIT)
    grads = jax.jit(jax.grad(loss))(params)
    assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"entities": "nope"}, "needs a float \\[E, F\\] observation"),
        ({"pointer_heads": (0,)}, "at least E choices"),
        ({"pointer_heads": (1,), "entities": ""}, "not set"),
    ],
)
def test_bad_entity_settings_are_one_line_errors(overrides, match):
    spec = make_env_spec(targets_env())
    with pytest.raises(ValueError, match=match):
        network(spec, **overrides)


@pytest.mark.slow
def test_entity_encoder_and_pointer_head_learn_targets(tmp_path):
    config = os.path.join(ROOT, "configs", "targets_pointer.py")
    rows = train(
        tmp_path / "targets", config, "--config.total_env_steps=80000",
        "--config.stop_at_return=6.5", "--config.log.stop_hold_s=1",  # ends it once learned
        "--config.log.interval_s=2", "--config.log.wandb_mode=disabled",
    )  # fmt: skip
    # random legal play scores about 2.4 of 8; the optimum is 8
    assert returns(rows)[0] < 4 and max(returns(rows)) >= 6.5, returns(rows)


def test_targets_random_play_scores_about_a_third():
    env = Targets(num_agents=1, entities=8, steps=8)
    rng = np.random.default_rng(0)
    total = 0.0
    for episode in range(300):
        obs, _ = env.reset(seed=episode)
        while env.agents:
            legal = np.flatnonzero(obs["agent_0"]["action_mask"][1])
            obs, rewards, *_ = env.step({"agent_0": (rng.integers(KINDS), rng.choice(legal))})
            total += rewards["agent_0"]
    assert 2.0 < total / 300 < 2.8, total / 300


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_padding_changes_nothing_in_the_entity_encoder():
    """Absent entities are masked as attention keys and out of the pool: more padding rows leave
    the present entities' embeddings and the pooled features as they were."""
    from networks.entities import EntityEncoder, present

    rng = np.random.default_rng(2)
    units = random_units(rng, 3, 5, 4, rng.random((3, 5)) < 0.6)
    units[:, 0] = 1.0
    padded = np.concatenate([units, np.zeros((3, 4, 4), F32)], axis=1)
    encoder = EntityEncoder(features=16, num_heads=2)
    params = encoder.init(jax.random.key(0), units, present(units))
    pooled, embedded = encoder.apply(params, units, present(units))
    pooled_p, embedded_p = encoder.apply(params, padded, present(padded))
    np.testing.assert_allclose(pooled_p, pooled, atol=1e-5)
    mask = np.asarray(present(units))
    np.testing.assert_allclose(
        np.asarray(embedded_p[:, :5])[mask], np.asarray(embedded)[mask], atol=1e-5
    )


# Surgery on entity networks (surgery/entities.py) ------------------------------------------------


def entity_spec(attributes=5, image=False):
    obs = {"entities": ArraySpec(F32, (6, attributes)), "self": ArraySpec(F32, (3,))}
    if image:
        obs["tiles"] = ArraySpec(F32, (7, 7, 3))
    mask = {LEGAL_ACTION_MASK: ArraySpec(np.bool_, (5 + 3 + 7,))}
    return EnvSpec("e", obs, 5 * 3 * 7, extras=mask, action_heads=(5, 3, 7))


def entity_network(spec, **overrides):
    return network(spec, **{"pointer_heads": (2,), "entity_heads": 2, **overrides})


@pytest.mark.parametrize(
    "kind",
    [
        {},
        {"torso": "small_cnn", "image_key": "tiles", "core": "lstm", "core_size": 16},
        {"shared_torso": True, "hidden_sizes": (16, 16)},
    ],
    ids=["mlp", "cnn_lstm", "shared"],
)
def test_entity_surgery_is_exact(kind):
    image = "image_key" in kind
    old = entity_network(entity_spec(5, image), **kind)
    new = entity_network(entity_spec(8, image), entity_size=24, **kind)
    params = random_params(old, 0)
    plan, result = derive_and_apply(old, new, params)
    assert [op.kind for op in plan.ops] == ["add_entity_attributes", "widen_entities"]
    report = check(old, new, params, random_obs_norm(old, 1), result)
    assert_exact(report)
    # the new units are live: random incoming weights where the function allows them
    enc = result.params["params"]["entity_encoder"]
    assert np.abs(enc["embed"]["kernel"][:5, 16:]).min() > 0
    assert np.abs(enc["attention"]["key"]["kernel"][:16, :, 8:]).max() > 0
    assert np.all(enc["embed"]["kernel"][5:, :16] == 0)  # new attributes reach new units only


def entity_spec_with(attributes=5, heads=(5, 3, 7), extra_obs=False, image=False):
    """entity_spec with other action heads (the pointer head is the one of size 7) and maybe one
    more ordinary observation."""
    spec = entity_spec(attributes, image)
    obs = dict(spec.observation)
    if extra_obs:
        obs["more"] = ArraySpec(F32, (2,))
    mask = {LEGAL_ACTION_MASK: ArraySpec(np.bool_, (sum(heads),))}
    return EnvSpec("e", obs, int(np.prod(heads)), extras=mask, action_heads=tuple(heads))


@pytest.mark.parametrize(
    "image, autoregressive",
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["mlp", "cnn_lstm", "mlp_autoregressive", "cnn_lstm_autoregressive"],
)
def test_surgery_by_layer_graph_on_an_entity_network_with_pointer_heads(image, autoregressive):
    """Everything at once on a network whose torso and core also feed a pointer head: a new
    observation (its rows go before the entity pool's), wider torso, core and entity encoder,
    two more choices for an ordinary head and a new action head in front of the pointer head
    (with autoregressive heads: the tables grow, move and appear with them)."""
    kind = {"torso": "small_cnn", "image_key": "tiles", "core": "lstm"} if image else {}
    kind["autoregressive"] = autoregressive
    small = {"cnn_hidden": 32, "core_size": 16} if image else {}
    old = entity_network(entity_spec_with(image=image), **kind, **small)
    heads_new = (5, 5, 2, 7)  # head 1 grows 3 -> 5, a new head of 2 at index 2
    wider = {"cnn_hidden": 40, "core_size": 24} if image else {"hidden_sizes": (48,)}
    new = entity_network(
        entity_spec_with(8, heads_new, extra_obs=True, image=image),
        **kind,
        **wider,
        entity_size=24,
        pointer_heads=(3,),
    )
    params = random_params(old, 3)
    graph, layers = old.layer_graph(), surgery.layer_paths(params)
    e = graph.entities
    named = {*graph.layers(), *e.stream_writers, *e.stream_readers}
    assert {f"params/{x}" for x in named} == set(layers)  # the graph names every layer
    plan = surgery.derive_plan(old, new)
    # PolicySurgery: as python -m surgery, with the old policy's logits for the new choices'
    # biases where the heads' inputs are unbounded (relu CNN, autoregressive tables).
    result = surgery.PolicySurgery(plan, old, new, seed=3).transform_params(params, {})
    kinds = [op.kind for op in plan.ops]
    assert kinds[0] == "add_observations" and kinds[-2:] == ["add_action_head", "add_actions"]
    assert {"add_entity_attributes", "widen_entities"} <= set(kinds)
    assert ("widen_lstm" in kinds) == image
    report = check(old, new, params, random_obs_norm(old, 1), result)
    assert report.max_abs_logits <= 1e-5 and report.max_abs_value <= 1e-5, report
    # the new choices are where the action map says, below the tolerance, masked in old games
    assert report.max_kl <= 1.01e-6 and 0 < report.max_new_action_prob <= 1.01e-6, report
    (grow, head) = result.action_infos[1], result.action_infos[0]
    assert head.new_actions == (11,)  # choice 1 of the new head (logits 10-11)
    assert grow.new_actions == (8, 9)  # head 1's new choices 3 and 4 (logits 5-9)
    assert result.action_map.new_size == sum(heads_new)
    old_ids = heads.join(heads.digits(np.arange(5 * 3 * 7), (5, 3, 7)), (5, 3, 7))
    np.testing.assert_array_equal(old_ids, np.arange(5 * 3 * 7))  # ids round-trip the digits


def test_add_action_head_bounds_the_new_choices_for_every_input():
    spec = entity_spec_with(heads=(5, 3, 7))
    net = entity_network(spec)
    params = random_params(net, 4, head_scale=3.0)  # large logits: no help from the features
    result = surgery.add_action_head(params, 6, graph=net.layer_graph(), index=0, tolerance=1e-4)
    info = result.action_info
    assert info.rule == "new head" and info.new_actions == (1, 2, 3, 4, 5)
    assert info.max_new_prob <= 1e-4 and abs(info.kl_bound - 1e-4) < 1e-8
    bias = result.params["params"]["policy_head"]["logits"]["bias"]
    np.testing.assert_allclose(bias[1:6], info.bias)
    assert (
        bias[0] == 0 and not result.params["params"]["policy_head"]["logits"]["kernel"][:, :6].any()
    )
    new = entity_network(entity_spec_with(heads=(6, 5, 3, 7)), pointer_heads=(3,))
    report = check(net, new, params, {}, result)
    # The old heads' logits come out of a wider matmul now: equal up to float32 rounding, which
    # depends on the CPU (0 with AVX-512 here, 1.9e-6 with AVX2), not bit for bit.
    assert report.max_abs_logits <= TOL and report.max_kl <= 1e-4 and report.max_kl > 1e-5


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_entity_surgery_refuses_what_it_cannot_keep():
    old = entity_network(entity_spec())
    for overrides, match in (
        ({"hidden_sizes": (64, 64)}, "adding or removing a dense layer"),
        ({"entity_size": 8}, "surgery only widens"),
        ({"entity_heads": 4}, "network.entity_heads changes"),
        ({"pointer_heads": ()}, "network.pointer_heads .* must stay pointers"),
    ):
        with pytest.raises(surgery.PlanError, match=match):
            surgery.derive_plan(old, entity_network(entity_spec(), **overrides))
    with pytest.raises(surgery.PlanError, match="action head 2 is a pointer head"):
        surgery.derive_plan(old, entity_network(entity_spec_with(heads=(5, 3, 8))))
    with pytest.raises(surgery.PlanError, match="adds one action head at a time"):
        two_more = entity_spec_with(heads=(2, 5, 3, 2, 7))
        surgery.derive_plan(old, entity_network(two_more, pointer_heads=(4,)))
    graph = old.layer_graph()
    with pytest.raises(surgery.SurgeryError, match="action head 2 is a pointer head"):
        surgery.add_actions(old.init(jax.random.key(0)), 1, graph=graph, head=2, bias=-20.0)
    with pytest.raises(surgery.PlanError, match="multiple of its 2 attention heads"):
        plan = surgery.derive_plan(old, entity_network(entity_spec(), entity_size=21))
        plan.apply(old.init(jax.random.key(0)), 0, Context(layout_of(old)))


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_entity_surgery_on_a_whole_checkpoint_with_a_league_snapshot(tmp_path):
    import surgery

    # More attributes, a wider encoder and LSTM, two more choices for head 1 and a new head.
    new_spec = entity_spec_with(8, (5, 5, 2, 7), image=True)
    specs = {"Ent-v0": entity_spec(5, image=True), "Ent2-v0": new_spec}

    def spec_fn(env_config):
        return specs[env_config.name]

    settings = {"entities": "entities", "pointer_heads": (2,), "entity_heads": 2,
                "entity_size": 16, "torso": "small_cnn", "image_key": "tiles",
                "core": "lstm", "core_size": 16}  # fmt: skip
    run, out = str(tmp_path / "run"), str(tmp_path / "out")
    save_run(run, small_config("Ent-v0", **settings), 5, env_spec_fn=spec_fn)
    grown = {"entity_size": 24, "core_size": 24, "pointer_heads": (3,)}
    new_config = small_config("Ent2-v0", **{**settings, **grown})
    outcome = surgery.run_surgery(run, out, new_config=new_config, spec_fn=spec_fn)
    assert outcome.written
    assert_exact(outcome.report)
    with open(os.path.join(out, "surgery.json")) as f:
        actions = [a["new_actions"] for a in json.load(f)["actions"]]
    assert actions == [[11], [8, 9]]  # legal-mask columns to anneal in (anneal.new_actions)
    assert_exact(outcome.snapshot_reports["league/snapshots/3"])
    new_net = make_network(new_config.network, spec_fn(new_config.env))
    target = ts.abstract_train_state(new_net, new_config.optimizer)
    restored, _ = Checkpointer(os.path.join(out, "checkpoints")).restore(target)
    nu = _adam(restored.opt_state).nu["params"]["entity_encoder"]["embed"]["kernel"]
    assert nu.shape == (8, 24) and np.all(nu[:, 16:] == 0) and np.all(nu[:5, :16] > 0)


# Autoregressive heads -----------------------------------------------------------------------------


def ar_network(**overrides):
    return entity_network(entity_spec_with(heads=(3, 4, 7)), autoregressive=True, **overrides)


def ar_inputs(net, rows, seed):
    gen = np.random.default_rng(seed)
    obs = surgery.sample_observations(net.spec, {}, gen, (rows,))
    obs["entities"] = random_units(gen, rows, 6, 5, gen.random((rows, 6)) < 0.7)
    mask = gen.random((rows, 3 + 4 + 7)) < 0.6
    mask[:, 7:13] &= obs["entities"].any(-1)  # a pointer's absent entities are illegal too
    for start, n in ((0, 3), (3, 4), (7, 7)):
        mask[:, start] |= ~mask[:, start : start + n].any(-1)  # a legal choice per head
    return obs, {LEGAL_ACTION_MASK: mask}


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_autoregressive_heads_act_as_the_chain_of_their_conditionals():
    """act() chooses argument by argument; step(actions=...) gives each argument's logits given
    the earlier ones. The two agree on log pi(a), pi sums to 1 over every joint action, sampled
    frequencies follow it, greedy follows the chain, and later heads read earlier arguments."""
    net = ar_network()
    params = random_params(net, 5)  # nonzero conditioning tables
    obs, extras = ar_inputs(net, 6, 0)
    first = np.zeros(6, bool)
    act, step = jax.jit(net.act, static_argnums=7), jax.jit(net.step)
    action, logp, value, _ = act(params, {}, obs, extras, (), first, jax.random.key(1), False)
    logits, value_step, _ = step(params, {}, obs, extras, (), first, action)
    np.testing.assert_allclose(heads.log_prob(logits, action, (3, 4, 7)), logp, atol=1e-5)
    np.testing.assert_allclose(value_step, value, atol=1e-6)
    for d, start in zip(heads.digits(action, (3, 4, 7)), (0, 3, 7)):
        assert extras[LEGAL_ACTION_MASK][np.arange(6), start + np.asarray(d)].all()  # legal

    every = np.arange(3 * 4 * 7)  # each row against every joint action
    rep = jax.tree.map(lambda x: np.repeat(x, len(every), 0), (obs, extras))
    actions = np.tile(every, 6)
    logits, _, _ = step(params, {}, *rep, (), np.zeros(len(actions), bool), actions)
    joint = np.exp(np.asarray(heads.log_prob(logits, actions, (3, 4, 7)))).reshape(6, -1)
    np.testing.assert_allclose(joint.sum(-1), 1.0, atol=1e-5)
    one = lambda x: np.repeat(x[:1], 20000, 0)  # noqa: E731
    drawn, *_ = act(
        params, {}, *jax.tree.map(one, (obs, extras)), (), np.zeros(20000, bool),
        jax.random.key(2), False,
    )  # fmt: skip
    freq = np.bincount(np.asarray(drawn), minlength=len(every)) / 20000
    assert np.abs(freq - joint[0]).max() < 0.02, np.abs(freq - joint[0]).max()
    greedy, *_ = act(params, {}, obs, extras, (), first, jax.random.key(3), True)
    chain = []
    for row in range(6):  # argmax of head 0, then of head 1 given it, then of head 2
        best = every
        for i, size in enumerate((3, 4, 7)):
            arg = np.asarray(heads.digits(best, (3, 4, 7))[i])
            p = np.array([joint[row, best[arg == c]].sum() for c in range(size)])
            best = best[arg == p.argmax()]
        chain.append(int(best[0]))
    np.testing.assert_array_equal(greedy, chain)

    # Head 0 reads nothing chosen; head 1 reads argument 0; a fresh network starts independent.
    a, b = np.array([0 * 28 + 1 * 7 + 2]), np.array([2 * 28 + 1 * 7 + 2])
    row = jax.tree.map(lambda x: x[:1], (obs, extras))
    la = net.step(params, {}, *row, (), first[:1], a)[0]
    lb = net.step(params, {}, *row, (), first[:1], b)[0]
    np.testing.assert_allclose(la[:, :3], lb[:, :3], atol=1e-6)
    assert np.abs(la[:, 3:7] - lb[:, 3:7]).max() > 1e-3
    fresh = net.init(jax.random.key(0))
    lf_a = net.step(fresh, {}, *row, (), first[:1], a)[0]
    np.testing.assert_allclose(lf_a, net.step(fresh, {}, *row, (), first[:1], b)[0], atol=1e-6)
    with pytest.raises(ValueError, match="network.autoregressive: the logits of later heads"):
        net.step(params, {}, *row, (), first[:1])


def test_autoregressive_needs_a_factorized_action():
    spec = dataclasses.replace(entity_spec_with(heads=(7,)), action_heads=())
    with pytest.raises(ValueError, match="network.autoregressive conditions later action heads"):
        network(spec, pointer_heads=(), autoregressive=True)


def test_ppo_on_autoregressive_heads_reads_the_behaviour_logits_of_the_actions_taken():
    """The learner's logits condition on the actions the actors took, through both PPO paths
    (feed-forward samples and replayed sequences): at the acting params every ratio is 1."""
    from seedlike.algos.batches import SampleBatch, forward_sequence
    from seedlike.algos.ppo import make_ppo_loss
    from seedlike.config import base_config

    net = ar_network()
    params = random_params(net, 6)
    obs, extras = ar_inputs(net, 16, 1)
    first = np.zeros(16, bool)
    act = jax.jit(net.act, static_argnums=7)
    action, logp, value, _ = act(params, {}, obs, extras, (), first, jax.random.key(4), False)
    ones = np.ones(16, F32)
    batch = SampleBatch(obs, extras, action, logp, value, ones, ones, ones)
    _, (metrics, _) = jax.jit(make_ppo_loss(net, base_config().ppo))(params, {}, {}, batch, None)
    assert (
        float(metrics["loss/clip_fraction"]) == 0 and abs(float(metrics["loss/approx_kl"])) < 1e-6
    )
    sequences = jax.tree.map(lambda x: x.reshape(4, 4, *x.shape[1:]), (obs, extras, action))

    def replay(p, obs, extras, action):
        unroll = types.SimpleNamespace(obs=obs, extras=extras, action=action)
        return forward_sequence(net, p, {}, unroll, 4)

    logits, _ = jax.jit(replay)(params, *sequences)
    replayed = heads.log_prob(logits, sequences[2], net.action_sizes)
    np.testing.assert_allclose(np.asarray(replayed).ravel(), logp, atol=1e-5)
