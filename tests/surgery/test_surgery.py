"""Surgery: exactness of every op on random networks, optimizer moments, plans, whole checkpoints.

Parameters are random (not trained) but with non-trivial scales, biases and normalizer statistics;
verification uses random observations and random non-zero LSTM carries.
"""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import optax
import pytest

import surgery
from networks import make_network
from seedlike.algos.batches import SampleBatch
from seedlike.algos.ppo import make_ppo_loss
from seedlike.checkpoint import Checkpointer
from seedlike.config import base_config, load_config_file
from seedlike.learning import train_state as ts
from seedlike.types import ArraySpec, EnvSpec
from surgery import ops
from surgery.plan import Context, layout_of
from tests.helpers import (
    F32,
    SPEC_MORE_OBS,
    TOL,
    assert_exact,
    check,
    derive_and_apply,
    make_net,
    random_obs_norm,
    random_params,
    save_run,
    shapes,
    spec_fn,
)
from tests.helpers import SURGERY_SPEC as SPEC
from tests.helpers import adam_state as _adam
from tests.helpers import replace_adam as _replace_adam
from tests.helpers import surgery_config as small_config
from tests.procs import ROOT

MASK = {"legal_action_mask": ArraySpec(np.bool_, (3,))}


def G(network):
    return network.layer_graph()


# Exact ops on random architectures ---------------------------------------------------------------

ARCHS = [
    dict(hidden_sizes=(8, 6)),  # separate policy/value torsos
    dict(hidden_sizes=(8, 6), shared_torso=True, residual_blocks=2, activation="relu"),
    dict(hidden_sizes=(8, 6), core="lstm", core_size=5),
    dict(hidden_sizes=(7,), residual_blocks=1, activation="silu"),
]


@pytest.mark.parametrize("seed", range(4))
def test_widen_dense_is_exact(seed):
    """Random architecture, layer sizes and mode: every widened dense layer, readers found."""
    gen = np.random.default_rng(seed)
    arch = dict(ARCHS[seed % len(ARCHS)])
    old_sizes = tuple(int(gen.integers(3, 9)) for _ in arch["hidden_sizes"])
    new_sizes = tuple(h + int(gen.integers(1, 12)) for h in old_sizes)
    mode = ("random", "replicate")[seed % 2]
    old_net = make_net(**{**arch, "hidden_sizes": old_sizes})
    new_net = make_net(**{**arch, "hidden_sizes": new_sizes})
    params = random_params(old_net, seed)
    plan, result = derive_and_apply(old_net, new_net, params, mode=mode)
    assert all(isinstance(op, surgery.WidenDense) and op.mode == mode for op in plan.ops)
    assert len(plan.ops) == len(old_sizes) * (1 if old_net.module.torso_spec.shared else 2)
    assert_exact(check(old_net, new_net, params, random_obs_norm(old_net, seed), result))


def test_replicate_copies_units_divides_readers_and_scales_moments():
    """Net2Wider on a fixture: copy columns, halve both readers' rows, zero-sum noise; Adam
    moments: incoming mu/n, nu/n^2 for the unit and its copy, outgoing rows' moments kept."""
    net = make_net(hidden_sizes=(3,))
    params = random_params(net, 0)
    result = ops.widen_dense(
        params, "policy_torso/dense_0", 4, graph=G(net), rng=1, mode="replicate", noise=0
    )
    ((axis, amap),) = result.param_map.leaves[("params", "policy_torso", "dense_0", "kernel")].axes
    u = int(amap.src[3])
    assert axis == 1 and list(amap.src[:3]) == [0, 1, 2] and 0 <= u < 3
    old_k = params["params"]["policy_torso"]["dense_0"]["kernel"]
    new_k = result.params["params"]["policy_torso"]["dense_0"]["kernel"]
    np.testing.assert_array_equal(new_k[:, 3], old_k[:, u])
    old_head = params["params"]["policy_head"]["logits"]["kernel"]
    new_head = result.params["params"]["policy_head"]["logits"]["kernel"]
    np.testing.assert_allclose(new_head[[u, 3]], np.stack([old_head[u] / 2] * 2), rtol=1e-6)
    np.testing.assert_array_equal(np.delete(new_head, [u, 3], 0), np.delete(old_head, u, 0))

    noisy = ops.widen_dense(
        params, "policy_torso/dense_0", 4, graph=G(net), rng=1, mode="replicate", noise=0.1
    )
    head = noisy.params["params"]["policy_head"]["logits"]["kernel"]
    assert np.abs(head[u] - head[3]).min() > 1e-4  # the copies' rows differ ...
    np.testing.assert_allclose(head[u] + head[3], old_head[u], atol=1e-6)  # ... and sum to the old

    opt = ts.make_optimizer(base_config().optimizer)
    opt_state = jax.jit(opt.init)(params)
    gen = np.random.default_rng(0)
    adam = _adam(opt_state)
    randomize = lambda t: jax.tree.map(lambda x: gen.uniform(0.1, 1, x.shape).astype(F32), t)
    adam_state = adam._replace(count=np.asarray(9, np.int32), mu=randomize(adam.mu))
    adam_state = adam_state._replace(nu=randomize(adam.nu))
    opt_state = _replace_adam(opt_state, adam_state)
    new_adam = _adam(surgery.transform_opt_state(opt_state, [result.param_map]))
    assert int(new_adam.count) == 9
    pt = ("params", "policy_torso", "dense_0", "kernel")
    mu, nu = _get(adam_state.mu, pt), _get(adam_state.nu, pt)
    new_mu, new_nu = _get(new_adam.mu, pt), _get(new_adam.nu, pt)
    for j in (u, 3):
        np.testing.assert_allclose(new_mu[:, j], mu[:, u] / 2, rtol=1e-6)
        np.testing.assert_allclose(new_nu[:, j], nu[:, u] / 4, rtol=1e-6)
    head_path = ("params", "policy_head", "logits", "kernel")
    np.testing.assert_array_equal(
        _get(new_adam.mu, head_path)[3], _get(adam_state.mu, head_path)[u]
    )
    assert shapes(new_adam.mu) == shapes(result.params)


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return np.asarray(tree)


@pytest.mark.parametrize("arch", [dict(hidden_sizes=(6, 5)), dict(core="lstm", core_size=4)])
def test_add_observations_is_exact_and_extends_normalizer(arch):
    old_net, new_net = make_net(SPEC, **arch), make_net(SPEC_MORE_OBS, **arch)
    params, obs_norm = random_params(old_net, 1), random_obs_norm(old_net, 1)
    plan, result = derive_and_apply(old_net, new_net, params)
    assert [op.kind for op in plan.ops] == ["add_observations"]
    assert_exact(check(old_net, new_net, params, obs_norm, result))
    # Old rows kept in place, new rows 0: flattened sorted keys a(2) b(2x4) obs(4) z(3).
    torso = "torso" if "core" in arch else "policy_torso"
    old_k = params["params"][torso]["dense_0"]["kernel"]
    new_k = result.params["params"][torso]["dense_0"]["kernel"]
    old_rows = [2 + r * 4 + c for r in range(2) for c in range(3)] + [10, 11, 12, 13]
    np.testing.assert_array_equal(new_k[old_rows], old_k)
    assert not new_k[np.setdiff1d(np.arange(17), old_rows)].any()
    norm = surgery.extend_obs_norm(obs_norm, new_net.init_obs_norm())
    np.testing.assert_array_equal(norm["b"].mean[:, :3], obs_norm["b"].mean)
    assert (norm["b"].mean[:, 3] == 0).all() and (norm["b"].var[:, 3] == 1).all()
    assert float(norm["b"].count) == 100.0 and float(norm["z"].count) == 0.0


@pytest.mark.parametrize("mode", ["random", "replicate"])
def test_widen_lstm_is_exact_over_unrolls_from_random_carries(mode):
    old_net = make_net(hidden_sizes=(6,), core="lstm", core_size=5)
    new_net = make_net(hidden_sizes=(6,), core="lstm", core_size=9)
    params = random_params(old_net, 2)
    result = ops.widen_lstm(params, 9, graph=G(old_net), rng=3, mode=mode)
    assert result.exact and result.carry_map.new_size == 9
    assert_exact(check(old_net, new_net, params, random_obs_norm(old_net, 2), result))
    c = np.arange(10, dtype=F32).reshape(2, 5)
    padded = surgery.pad_carry((c, -c), result.carry_map)
    np.testing.assert_array_equal(padded[0][:, :5], c)
    if mode == "random":
        assert not padded[0][:, 5:].any() and not padded[1][:, 5:].any()


def test_widen_lstm_with_noise_reports_an_error_that_grows_with_the_noise():
    old_net = make_net(hidden_sizes=(6,), core="lstm", core_size=5)
    new_net = make_net(hidden_sizes=(6,), core="lstm", core_size=9)
    params, obs_norm = random_params(old_net, 4), random_obs_norm(old_net, 4)
    verifier = surgery.verify.Verifier(old_net, new_net)
    new_norm = surgery.extend_obs_norm(obs_norm, new_net.init_obs_norm())
    reports = {}
    for noise in (1e-4, 1e-2):
        result = ops.widen_lstm(params, 9, graph=G(old_net), rng=5, noise=noise)
        assert not result.exact
        reports[noise] = verifier(
            params, obs_norm, result.params, new_norm, rng=7, carry_map=result.carry_map
        )
        print(f"LSTM 5->9 units, noise {noise:g}: {reports[noise]}")
    small, large = reports[1e-4], reports[1e-2]
    assert 0 < small.max_abs_logits < large.max_abs_logits
    assert small.max_abs_value < large.max_abs_value
    assert large.error > TOL  # reported, and refused at the default tolerance
    # First order in the noise: 100x the noise gives roughly 100x the error.
    assert 20 < large.max_abs_value / small.max_abs_value < 500


def test_add_actions_bound_mask_and_anneal():
    """Tanh MLP: guaranteed bias from the feature bound; old logits unchanged; masking the new
    action reproduces the old policy exactly; a new action inserted in the middle is mapped."""
    spec = dataclasses.replace(SPEC, extras=MASK)
    new_spec = dataclasses.replace(
        SPEC, num_actions=5, extras={"legal_action_mask": ArraySpec(np.bool_, (5,))}
    )
    old_net, new_net = make_net(spec, hidden_sizes=(6, 6)), make_net(new_spec, hidden_sizes=(6, 6))
    params, obs_norm = random_params(old_net, 5), random_obs_norm(old_net, 5)
    result = surgery.Plan([surgery.AddActions(2, positions=(1, 4), tolerance=1e-7)]).apply(
        params, 0, Context(layout_of(old_net))
    )
    (info,) = result.action_infos
    assert info.rule == "bound" and info.new_actions == (1, 4) and info.kl_bound <= 1e-7
    report = check(old_net, new_net, params, obs_norm, result)
    # (Old logits and value up to float32 rounding: the logits come out of a wider matmul.)
    assert report.max_abs_logits <= TOL and report.max_abs_value <= TOL
    assert report.max_kl <= 1e-7 and report.max_new_action_prob <= info.max_new_prob
    obs = surgery.sample_observations(spec, obs_norm, 0, (16,))
    mask = np.tile(info.legal_mask_old, (16, 1))
    old_logits, _ = jax.jit(old_net.apply)(params, obs_norm, obs)
    new_logits, _ = jax.jit(new_net.apply)(
        result.params, obs_norm, obs, {"legal_action_mask": mask}
    )
    old_p = jax.nn.softmax(old_logits)
    np.testing.assert_allclose(jax.nn.softmax(new_logits)[:, [0, 2, 3]], old_p, atol=1e-7)
    anneal = surgery.annealed_legal_mask(info, 0.25, 0, 4000)
    assert anneal[:, [0, 2, 3]].all() and abs(anneal[:, 1].mean() - 0.25) < 0.03


def test_add_actions_batch_rule_on_unbounded_features():
    old_net = make_net(hidden_sizes=(6,), activation="relu")
    new_net = make_net(
        dataclasses.replace(SPEC, num_actions=4), hidden_sizes=(6,), activation="relu"
    )
    params, obs_norm = random_params(old_net, 6), random_obs_norm(old_net, 6)
    assert layout_of(old_net).feature_bound is None
    with pytest.raises(surgery.SurgeryError, match="needs bias, feature_bound or a batch"):
        ops.add_actions(params, 1, graph=G(old_net))
    obs = surgery.sample_observations(SPEC, obs_norm, 9, (256,))
    logits, _ = jax.jit(old_net.apply)(params, obs_norm, obs)
    result = ops.add_actions(params, 1, graph=G(old_net), logits=logits, tolerance=1e-6)
    assert result.action_info.rule == "batch"
    report = check(old_net, new_net, params, obs_norm, result)
    assert report.max_abs_logits <= TOL and report.max_kl <= TOL


@pytest.mark.parametrize("index", [None, 0])
def test_add_residual_block_is_exact(index):
    old_net = make_net(hidden_sizes=(6, 5), residual_blocks=1)
    new_net = make_net(hidden_sizes=(6, 5), residual_blocks=2)
    params = random_params(old_net, 7)
    result, graph = params, G(old_net)
    for torso in ("policy_torso", "value_torso"):
        result = ops.add_residual_block(
            getattr(result, "params", result), torso, graph=graph, rng=1, index=index
        )
        graph = result.graph
    assert_exact(check(old_net, new_net, params, random_obs_norm(old_net, 7), result))
    moved = result.params["params"]["value_torso"]["res_1" if index == 0 else "res_0"]
    old_block = params["params"]["value_torso"]["res_0"]
    jax.tree.map(np.testing.assert_array_equal, moved, old_block)
    new_block = result.params["params"]["value_torso"][f"res_{1 if index is None else 0}"]
    assert not new_block["dense_1"]["kernel"].any() and new_block["dense_0"]["kernel"].any()


CNN_SPEC = EnvSpec(
    "Cnn-v0", {"obs": ArraySpec(np.uint8, (44, 44, 3)), "x": ArraySpec(F32, (2,))}, 4
)


@pytest.mark.parametrize(
    "torso, old, new",
    [
        ("nature_cnn", ((3, 4, 5), 8), ((5, 4, 7), 11)),  # conv_2: 2x2 positions interleave
        ("impala_cnn", ((3, 4), 8), ((4, 6), 9)),  # stack streams + residual blocks
        ("small_cnn", ((3, 4, 5), 8), ((5, 4, 7), 11)),  # a max-pool between conv_0 and conv_1
        ("board_cnn", ((3, 4), 8), ((4, 6), 9)),  # SAME convs keep all 44x44 positions
        ("board_cnn_valid4", ((3, 4), 8), ((4, 6), 9)),  # two 4x4 VALID convs: 38x38 positions
    ],
)
def test_widen_cnn_channels_is_exact(torso, old, new):
    extra = {}
    if torso == "board_cnn_valid4":
        torso, extra = "board_cnn", {"cnn_kernel": 4, "cnn_padding": "VALID"}

    def cnn(spec, channels, hidden):
        return make_net(spec, torso=torso, cnn_channels=channels, cnn_hidden=hidden, **extra)

    # One more image channel and one more (non-image) feature after the conv features.
    observation = {"obs": ArraySpec(np.uint8, (44, 44, 4)), "w": ArraySpec(F32, (1,))}
    more = dataclasses.replace(CNN_SPEC, observation={**CNN_SPEC.observation, **observation})
    old_net, new_net = cnn(CNN_SPEC, *old), cnn(more, *new)
    # H*W of the last feature map of a 44x44 image, worked out by hand for each torso.
    positions = {"nature_cnn": 2 * 2, "impala_cnn": 11 * 11, "small_cnn": 19 * 19}
    expected = 38 * 38 if extra else positions.get(torso, 44 * 44)
    assert layout_of(old_net).feature_positions == expected
    params = random_params(old_net, 8)
    plan, result = derive_and_apply(old_net, new_net, params, mode="random")
    kinds = [op.kind for op in plan.ops]
    assert kinds[0] == "add_observations" and "widen_conv" in kinds and kinds[-1] == "widen_dense"
    report = check(old_net, new_net, params, random_obs_norm(old_net, 8), result, batch_size=8)
    assert_exact(report)


def test_widening_a_mirrored_board_network_is_exact_and_mirror_cannot_be_switched():
    board = EnvSpec("ConnectFour-v1", {"obs": ArraySpec(np.int8, (6, 7, 2))}, 7, 2)
    kw = {"normalize_obs": False, "activation": "relu", "mirror": "columns"}
    old_net = make_net(board, hidden_sizes=(8, 6), **kw)
    new_net = make_net(board, hidden_sizes=(12, 6), **kw)
    params = random_params(old_net, 4)
    plan, result = derive_and_apply(old_net, new_net, params)
    assert [op.kind for op in plan.ops] == ["widen_dense", "widen_dense"]  # policy, value
    assert_exact(check(old_net, new_net, params, {}, result))
    with pytest.raises(surgery.PlanError, match="network.mirror changes from 'columns' to ''"):
        surgery.derive_plan(
            old_net, make_net(board, hidden_sizes=(8, 6), normalize_obs=False, activation="relu")
        )


def test_line_features_join_a_board_network_exactly_and_cannot_be_redefined():
    board = EnvSpec("ConnectFour-v1", {"obs": ArraySpec(np.int8, (6, 7, 2))}, 7, 2)
    kw = {"normalize_obs": False, "activation": "relu", "hidden_sizes": (8, 6)}
    old_net = make_net(board, **kw)
    new_net = make_net(board, board_lines=4, board_gravity=True, **kw)
    params = random_params(old_net, 4)
    plan, result = derive_and_apply(old_net, new_net, params)
    assert [op.kind for op in plan.ops] == ["add_observations"]
    assert_exact(check(old_net, new_net, params, {}, result))
    with pytest.raises(surgery.PlanError, match="network.board_lines changes from 4 to 3"):
        surgery.derive_plan(new_net, make_net(board, board_lines=3, board_gravity=True, **kw))
    with pytest.raises(surgery.PlanError, match="observation 'obs_lines' .* is removed"):
        surgery.derive_plan(new_net, old_net)


def test_derived_plan_for_everything_at_once_and_json_round_trip():
    """hidden_sizes up, new observations, core_size up, a residual block and an extra action."""
    old_net = make_net(SPEC, hidden_sizes=(8, 8), core="lstm", core_size=6)
    new_spec = dataclasses.replace(SPEC_MORE_OBS, num_actions=4)
    new_net = make_net(
        new_spec, hidden_sizes=(16, 12), core="lstm", core_size=10, residual_blocks=1
    )
    params, obs_norm = random_params(old_net, 9), random_obs_norm(old_net, 9)
    plan, result = derive_and_apply(old_net, new_net, params)
    assert [op.kind for op in plan.ops] == [
        "add_observations",
        "widen_dense",
        "widen_dense",
        "add_residual_block",
        "widen_lstm",
        "add_actions",
    ]
    assert plan.exact and result.exact
    assert_exact(check(old_net, new_net, params, obs_norm, result))
    again = surgery.Plan.from_json(plan.to_json())
    assert again.ops == plan.ops
    jax.tree.map(
        np.testing.assert_array_equal,
        again.apply(params, 3, Context(layout_of(old_net))).params,
        result.params,
    )


# Errors ------------------------------------------------------------------------------------------


def test_incompatible_requests_name_the_layer_and_shapes():
    base = make_net(hidden_sizes=(64, 64))
    small = make_net(hidden_sizes=(8, 8))
    params, graph = random_params(small, 0), G(small)

    def derive_error(new, **kw):
        with pytest.raises(surgery.PlanError) as info:
            surgery.derive_plan(kw.pop("old", base), new)
        return str(info.value)

    message = derive_error(make_net(hidden_sizes=(32, 64)))
    assert (
        "params/policy_torso/dense_0 and params/value_torso/dense_0 would shrink from 64 to 32 "
        "units (kernel [*, 64] -> [*, 32])" in message
    )
    assert "dense layer" in derive_error(make_net(hidden_sizes=(64, 64, 64)))
    assert "network.core" in derive_error(make_net(hidden_sizes=(64, 64), core="lstm"))
    removed = EnvSpec("x", {"obs": ArraySpec(F32, (4,))}, 3)
    assert "observation 'b' float32[2, 3] is removed" in derive_error(
        make_net(removed, hidden_sizes=(64, 64))
    )
    fewer = dataclasses.replace(SPEC, num_actions=2)
    assert "num_actions 3 -> 2" in derive_error(make_net(fewer, hidden_sizes=(64, 64)))
    assert "network.activation" in derive_error(make_net(hidden_sizes=(64, 64), activation="relu"))

    with pytest.raises(
        surgery.SurgeryError, match=r"no layer params/policy_torso/dense_5; the net"
    ):
        ops.widen_dense(params, "policy_torso/dense_5", 9, graph=graph, rng=0)
    with pytest.raises(
        surgery.SurgeryError, match="params/policy_torso/dense_1 would shrink from 8"
    ):
        ops.widen_dense(params, "params/policy_torso/dense_1", 4, graph=graph, rng=0)
    with pytest.raises(surgery.SurgeryError, match="policy head: use add_actions"):
        ops.widen_dense(params, "policy_head/logits", 4, graph=graph, rng=0)
    res_net = make_net(hidden_sizes=(8,), residual_blocks=1)
    res = random_params(res_net, 0)
    with pytest.raises(surgery.SurgeryError, match="widen the stream's writer .*dense_0"):
        ops.widen_dense(res, "policy_torso/res_0/dense_1", 12, graph=G(res_net), rng=0)
    with pytest.raises(surgery.SurgeryError, match="has no LSTM core"):
        ops.widen_lstm(params, 12, graph=graph, rng=0)
    bad_obs = surgery.Plan([surgery.AddObservations({"obs": (5,)}, {"obs": (6,)})])
    with pytest.raises(surgery.PlanError) as info:
        bad_obs.apply(params, 0, Context(layout_of(small)))
    assert str(info.value).startswith(
        "op 0 (add_observations): params/policy_torso/dense_0/kernel has 10 entries on axis 0, "
        "expected 5"
    )
    with pytest.raises(surgery.PlanError, match="unknown op 'widen_everything'"):
        surgery.Plan.from_dict({"ops": [{"op": "widen_everything"}]})
    with pytest.raises(
        surgery.PlanError, match=r"unknown fields \['size'\], missing fields \['width'\]"
    ):
        surgery.Plan.from_dict({"ops": [{"op": "widen_dense", "path": "torso/dense_0", "size": 3}]})


# Training after surgery --------------------------------------------------------------------------


def _sgd_step(network, config):
    """seedlike's PPO sgd_step, vmapped over a device axis of size 1."""
    loss = make_ppo_loss(network, config.ppo, ts.AXIS)
    optimizer = ts.make_optimizer(config.optimizer)
    step = ts.make_sgd_step(loss, optimizer, ts.make_learning_rate_fn(config.optimizer, 100))
    return jax.jit(jax.vmap(step, axis_name=ts.AXIS))


def _ppo_batch(network, obs_norm, seed, n=64):
    gen = np.random.default_rng(seed)
    obs = surgery.sample_observations(network.spec, obs_norm, gen, (n,))
    return SampleBatch(
        obs=obs,
        extras={},
        action=gen.integers(0, network.spec.num_actions, n).astype(np.int32),
        behaviour_logp=np.full(n, -1.0, F32),
        behaviour_value=gen.standard_normal(n).astype(F32),
        advantage=gen.standard_normal(n).astype(F32),
        value_target=gen.standard_normal(n).astype(F32),
        mask=np.ones(n, F32),
    )


def test_lr_zero_update_keeps_params_and_gradients_reach_new_units():
    """After surgery + one learning-rate-0 PPO update: parameters identical, Adam moments moved,
    non-zero gradients on the new observation rows, the readers' rows of new units and the new
    residual block's output layer."""
    config = base_config()
    config.network.hidden_sizes = (6, 6)
    old_net = make_network(config.network, SPEC)
    new_config = base_config()
    new_config.network.hidden_sizes = (9, 6)
    new_config.network.residual_blocks = 1
    new_net = make_network(new_config.network, SPEC_MORE_OBS)
    optimizer = ts.make_optimizer(config.optimizer)
    state = ts.TrainState(
        params=random_params(old_net, 10),
        opt_state=jax.jit(optimizer.init)(random_params(old_net, 10)),
        obs_norm=random_obs_norm(old_net, 10),
        sgd_steps=np.asarray(40, np.int32),
        policy_version=np.asarray(5, np.int32),
        lr_zero_until=np.asarray(0, np.int32),
    )
    plan = surgery.derive_plan(old_net, new_net)
    policy_surgery = surgery.PolicySurgery(plan, old_net, new_net)
    new_state, result = policy_surgery.transform_state(state, lr_zero_sgd_steps=3)
    assert int(new_state.lr_zero_until) == 43 and int(new_state.sgd_steps) == 40

    step = _sgd_step(new_net, new_config)
    batch = _ppo_batch(new_net, new_state.obs_norm, 0)
    stacked = jax.tree.map(lambda x: np.asarray(x)[None], (new_state, batch))
    after, (metrics, _) = step(*stacked)
    assert float(metrics["learning_rate"][0]) == 0.0
    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a)[0], b),
        after.params,
        new_state.params,
    )
    assert int(after.sgd_steps[0]) == 41
    # The moments of new entries were 0; with lr 0 Adam still updates them to (1 - b1) * g, so a
    # non-zero first moment there is a non-zero (clipped) gradient.
    mu = _adam(after.opt_state).mu
    before = _adam(new_state.opt_state).mu["params"]["policy_torso"]
    assert not np.asarray(before["res_0"]["dense_1"]["kernel"]).any()
    assert not np.asarray(before["dense_1"]["kernel"])[6:].any()
    g = jax.tree.map(lambda x: np.asarray(x)[0], mu)["params"]["policy_torso"]
    new_obs_rows = [0, 1, 5, 9, 14, 15, 16]  # a(2), b[:, 3], z(3) in 'a b obs z' order
    assert (np.abs(g["dense_0"]["kernel"][new_obs_rows]).max(axis=1) > 0).all()
    assert (np.abs(g["dense_1"]["kernel"][6:]).max(axis=1) > 0).all()  # new units' readers
    assert np.abs(g["res_0"]["dense_1"]["kernel"]).max() > 0  # the new block's zero layer
    assert np.abs(g["res_0"]["dense_0"]["kernel"]).max() == 0  # (it sees no gradient yet)


def test_lstm_widening_gradients_reach_the_new_units_readers():
    old_net = make_net(hidden_sizes=(6,), core="lstm", core_size=4)
    params = random_params(old_net, 11)
    result = ops.widen_lstm(params, 7, graph=G(old_net), rng=0)
    new_net = make_net(hidden_sizes=(6,), core="lstm", core_size=7)
    gen = np.random.default_rng(0)
    obs = surgery.sample_observations(SPEC, {}, gen, (4, 5))
    carry = surgery.pad_carry(surgery.random_carry(old_net, gen, 4), result.carry_map)
    first = np.zeros((4, 5), bool)

    def loss(p):
        logits, value, _ = new_net.unroll(p, {}, obs, {}, carry, first)
        return (logits * np.linspace(-1, 1, 3)).sum() + (value**2).sum()

    grads = jax.jit(jax.grad(loss))(result.params)["params"]
    assert np.abs(grads["policy_head"]["logits"]["kernel"][4:]).sum() > 0
    assert np.abs(grads["value_head"]["value"]["kernel"][4:]).sum() > 0


def test_optimizer_reset_and_random_mode_moments():
    net = make_net(hidden_sizes=(4,))
    params = random_params(net, 12)
    opt_state = jax.jit(ts.make_optimizer(base_config().optimizer).init)(params)
    adam = _adam(opt_state)
    ones = jax.tree.map(np.ones_like, adam.mu)
    opt_state = _replace_adam(opt_state, adam._replace(mu=ones, nu=ones, count=np.int32(7)))
    result = ops.widen_dense(params, "policy_torso/dense_0", 6, graph=G(net), rng=0)
    new_adam = _adam(surgery.transform_opt_state(opt_state, [result.param_map]))
    mu = _get(new_adam.mu, ("params", "policy_torso", "dense_0", "kernel"))
    assert (mu[:, :4] == 1).all() and (mu[:, 4:] == 0).all() and int(new_adam.count) == 7
    reset = _adam(surgery.reset_opt_state(opt_state, result.params))
    assert int(reset.count) == 0 and not any(np.any(x) for x in jax.tree.leaves(reset.nu))
    assert shapes(reset.mu) == shapes(result.params)
    assert isinstance(_adam(opt_state), optax.ScaleByAdamState)


# Whole checkpoints -------------------------------------------------------------------------------


def test_checkpoint_round_trip_restores_into_the_new_config(tmp_path):
    run, out = str(tmp_path / "run"), str(tmp_path / "out")
    old_net, state = save_run(run, small_config(), 13)
    new_config = small_config("New-v0", hidden_sizes=(12, 8), residual_blocks=1)
    outcome = surgery.run_surgery(
        run, out, new_config=new_config, lr_zero_updates=2, spec_fn=spec_fn
    )
    assert outcome.written and outcome.step == 5
    assert outcome.warnings == [
        "the environment changes from Old-v0 to New-v0: the function is preserved on Old-v0's "
        "observations, not on the new task's"
    ]
    assert_exact(outcome.report)
    assert_exact(outcome.snapshot_reports["league/snapshots/3"])
    assert outcome.lr_zero_until == 80 + 2 * new_config.ppo.epochs * new_config.ppo.num_minibatches

    new_net = make_network(new_config.network, spec_fn(new_config.env))
    # What the learner does on resume: restore into the new config's TrainState structure.
    target = ts.abstract_train_state(new_net, new_config.optimizer)
    restored, meta = Checkpointer(os.path.join(out, "checkpoints")).restore(target)
    assert int(restored.sgd_steps) == 80 and int(restored.policy_version) == 5
    assert int(restored.lr_zero_until) == outcome.lr_zero_until
    assert int(_adam(restored.opt_state).count) == 80
    assert meta["env_steps"] == 5120 and meta["config"] == json.loads(new_config.to_json())
    assert meta["surgery"][-1]["plan"]["ops"][0]["op"] == "add_observations"
    # The checkpoint holds exactly the parameters that were verified (the plan is deterministic).
    again = surgery.PolicySurgery(outcome.plan, old_net, new_net).transform_state(state)[0]
    jax.tree.map(np.testing.assert_array_equal, restored.params, again.params)
    jax.tree.map(np.testing.assert_array_equal, restored.obs_norm, again.obs_norm)
    snapshot = surgery.read_snapshot(os.path.join(out, "league", "snapshots", "3"), new_net)
    assert shapes(snapshot["params"]) == shapes(restored.params)
    written = load_config_file(os.path.join(out, "config.py"))
    assert written.network.hidden_sizes == (12, 8) and written.network.residual_blocks == 1
    with pytest.raises(surgery.SurgeryError, match="already exists"):
        surgery.run_surgery(run, out, new_config=new_config, spec_fn=spec_fn)
    missing = tmp_path / "no_such_run"
    with pytest.raises(FileNotFoundError, match="no run or checkpoint at"):
        surgery.run_surgery(str(missing), out, new_config=new_config, spec_fn=spec_fn)
    assert not missing.exists()


def test_checkpoint_surgery_refuses_inexact_plans_unless_forced(tmp_path):
    run = str(tmp_path / "run")
    save_run(run, small_config(core="lstm", core_size=4), 14)
    plan = surgery.Plan([surgery.WidenLSTM(7, noise=0.05)])
    with pytest.raises(surgery.SurgeryRefused) as info:
        surgery.run_surgery(run, str(tmp_path / "a"), plan=plan, spec_fn=spec_fn)
    assert info.value.reports["learner"].error > TOL and "tolerance" in str(info.value)
    assert not os.path.exists(tmp_path / "a")
    outcome = surgery.run_surgery(
        run, str(tmp_path / "b"), plan=plan, force=True, reset_optimizer=True, spec_fn=spec_fn
    )
    assert outcome.config.network.core_size == 7  # read from the plan's result
    assert outcome.warnings == []  # same environment
    meta = Checkpointer(str(tmp_path / "b" / "checkpoints")).read_meta(5)
    assert meta["surgery"][-1]["forced"] and meta["config"]["network"]["core_size"] == 7
    assert isinstance(ml_collections.ConfigDict(meta["config"]), ml_collections.ConfigDict)


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "surgery", *args], cwd=ROOT, capture_output=True, text=True
    )


@pytest.mark.slow  # runs the entrypoint in a process of its own
def test_cli_applies_a_json_plan_to_a_cartpole_run(tmp_path):
    from seedlike.envs.envpool_env import make_env_spec

    config = small_config("CartPole-v1")
    save_run(str(tmp_path / "run"), config, 15, env_spec_fn=make_env_spec)
    plan = surgery.Plan(
        [
            surgery.WidenDense("policy_torso/dense_0", 12, mode="replicate"),
            surgery.WidenDense("value_torso/dense_0", 12, mode="replicate"),
        ]
    )
    (tmp_path / "plan.json").write_text(plan.to_json())
    done = run_cli(
        f"--checkpoint={tmp_path / 'run' / 'checkpoints' / '5'}",
        f"--plan={tmp_path / 'plan.json'}",
        f"--out={tmp_path / 'out'}",
        "--lr_zero_updates=1",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "learner policy: max|Δlogits|" in done.stdout and "resume with" in done.stdout
    assert "snapshot league/snapshots/3:" in done.stdout
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["network"]["hidden_sizes"] == [12, 8]  # read from the plan's result

    (tmp_path / "bad.json").write_text(surgery.Plan([surgery.WidenLSTM(8)]).to_json())
    failed = run_cli(
        f"--checkpoint={tmp_path / 'run'}", f"--plan={tmp_path / 'bad.json'}", "--out=unused"
    )
    assert failed.returncode == 1
    assert "surgery failed: op 0 (widen_lstm): the network has no LSTM core" in failed.stderr
    typo = run_cli(
        "--checkpoint=x",
        "--out=y",
        "--new_config=configs/cartpole_ppo.py",
        "--new_config.network.hidden_size=(3,)",
    )
    assert typo.returncode == 1 and "unknown config key 'network.hidden_size'" in typo.stderr


# The layer graph ----------------------------------------------------------------------------------

GRAPH_NETS = [
    *((SPEC, arch) for arch in ARCHS),
    *((CNN_SPEC, dict(torso=t)) for t in ("nature_cnn", "impala_cnn", "small_cnn", "board_cnn")),
    (CNN_SPEC, dict(torso="small_cnn", core="lstm", core_size=8)),
]


@pytest.mark.parametrize("spec, arch", GRAPH_NETS)
def test_the_layer_graph_names_every_layer_and_only_real_ones(spec, arch):
    """Surgery finds layers only through the graph: a module renamed without its graph, or a
    layer the graph forgets, fails here instead of producing wrong parameters."""
    net = make_net(spec, **arch)
    params = jax.eval_shape(net.init, jax.random.key(0))
    layers = {p.removeprefix("params/") for p in surgery.layer_paths(params)}
    graph = net.layer_graph()
    assert set(graph.layers()) == layers
    for space in graph.spaces.values():  # every widenable space has its readers
        assert space.refused or space.readers, space


# Continuous action heads -------------------------------------------------------------------------

GAUSS = dict(action_low=(-1.0, -1.0), action_high=(1.0, 1.0))


@pytest.mark.parametrize("arch", [{}, dict(state_dependent_std=True, core="lstm", core_size=4)])
def test_each_head_brings_its_own_part_of_the_layer_graph(arch):
    """A mixed action's heads (networks/heads.py) each name their layers in the graph: the
    graph is the join of their parts, and with the torso's names it covers every layer."""
    spec = dataclasses.replace(SPEC, num_actions=3, action_heads=(3,), **GAUSS)
    net = make_net(spec, **arch)
    graph = net.layer_graph()
    heads_ = net.module.head_modules(parent=None)
    assert list(heads_) == ["policy_head", "gaussian_head", "value_head"]
    params = jax.eval_shape(net.init, jax.random.key(0))
    layers = {p.removeprefix("params/") for p in surgery.layer_paths(params)}
    assert set(graph.layers()) == layers
    feature_readers = (graph.core.readers if graph.core else ()) + tuple(
        r for name, t in graph.torsos.items() for r in graph.spaces[t.layers[-1]].readers
    )
    for name, head in heads_.items():
        part = head.graph(name)
        for layer, space in part.spaces.items():
            assert graph.spaces[layer] == space and space.refused.startswith(f"params/{layer} ")
        assert set(part.readers) <= set(feature_readers), name
    gaussian = ("gaussian_head/mean",) + (
        ("gaussian_head/log_std",) if arch.get("state_dependent_std") else ()
    )
    assert graph.gaussian == gaussian and graph.policy_head == "policy_head/logits"


@pytest.mark.parametrize(
    "arch",
    [
        dict(hidden_sizes=(6, 5)),
        dict(hidden_sizes=(6, 5), state_dependent_std=True, shared_torso=True),
        dict(hidden_sizes=(6,), core="lstm", core_size=4),
    ],
    ids=["vector-std", "state-std", "lstm"],
)
@pytest.mark.parametrize("discrete", [0, 3], ids=["gaussian", "mixed"])
def test_widening_and_new_observations_are_exact_on_gaussian_networks(arch, discrete):
    heads_ = dict(action_heads=(3,)) if discrete else {}
    old_spec = dataclasses.replace(SPEC, num_actions=discrete, **heads_, **GAUSS)
    new_spec = dataclasses.replace(SPEC_MORE_OBS, num_actions=discrete, **heads_, **GAUSS)
    old_net = make_net(old_spec, **arch)
    wide = tuple(h + 4 for h in arch["hidden_sizes"])
    core = {"core_size": arch["core_size"] + 3} if "core_size" in arch else {}
    new_net = make_net(new_spec, **{**arch, "hidden_sizes": wide, **core})
    params = random_params(old_net, 2)
    plan, result = derive_and_apply(old_net, new_net, params)
    kinds = {op.kind for op in plan.ops}
    assert "add_observations" in kinds and len(kinds) >= 2, kinds
    report = check(old_net, new_net, params, random_obs_norm(old_net, 2), result)
    assert_exact(report)
    assert report.continuous == 2 and "Gaussian max|Δmean|" in str(report)
    assert report.max_abs_mean <= TOL and report.max_abs_log_std <= TOL, report


def test_verify_reports_the_kl_of_a_changed_gaussian_head():
    spec = dataclasses.replace(SPEC, num_actions=0, **GAUSS)
    net = make_net(spec)
    params = random_params(net, 3)
    moved = jax.tree.map(np.array, params)
    moved["params"]["gaussian_head"]["log_std"] = params["params"]["gaussian_head"]["log_std"] + 0.5
    report = surgery.verify_policy(
        net, params, net.init_obs_norm(), net, moved, net.init_obs_norm(), rng=0
    )
    # KL(N(m, s) || N(m, s e^0.5)) per dimension: 0.5 (e^-1 - 1) + 0.5, two dimensions
    want = 2 * (0.5 * (np.exp(-1.0) - 1.0) + 0.5)
    np.testing.assert_allclose(report.max_kl, want, rtol=1e-5)
    np.testing.assert_allclose(report.max_abs_log_std, 0.5, rtol=1e-6)
    assert report.max_abs_mean <= TOL


@pytest.mark.parametrize("state_dependent", [False, True], ids=["vector-std", "state-std"])
def test_new_action_dimensions_keep_the_old_ones_exact_and_start_as_configured(state_dependent):
    old_spec = dataclasses.replace(SPEC, num_actions=0, **GAUSS)
    new_spec = dataclasses.replace(
        SPEC, num_actions=0, action_low=(-1.0,) * 4, action_high=(1.0,) * 4
    )
    old_net = make_net(old_spec, state_dependent_std=state_dependent)
    new_net = make_net(new_spec, state_dependent_std=state_dependent)
    params, obs_norm = random_params(old_net, 4), random_obs_norm(old_net, 4)
    plan = surgery.derive_plan(old_net, new_net)
    assert [op.kind for op in plan.ops] == ["add_action_dims"]
    plan = dataclasses.replace(plan, ops=(surgery.AddActionDims(num_new=2, mean=0.3, std=0.5),))
    result = plan.apply(params, 3, Context(layout_of(old_net)))
    report = check(old_net, new_net, params, obs_norm, result)
    assert_exact(report)  # over the old two dimensions: means, log-stds, KL
    obs = verify_obs(old_spec, 16)
    out, _ = new_net.apply(result.params, obs_norm, obs)
    out = np.asarray(out)
    np.testing.assert_allclose(out[:, 2:4], 0.3, rtol=1e-6)  # new means
    np.testing.assert_allclose(out[:, 6:8], np.log(0.5), rtol=1e-6)  # new log-stds
    old_out, _ = old_net.apply(params, obs_norm, obs)
    np.testing.assert_allclose(out[:, [0, 1, 4, 5]], np.asarray(old_out), atol=1e-6)
    with pytest.raises(surgery.PlanError, match="cannot make a discrete policy continuous"):
        surgery.derive_plan(make_net(SPEC), old_net)


def verify_obs(spec, n):
    gen = np.random.default_rng(0)
    return {k: gen.standard_normal((n, *s.shape)).astype(F32) for k, s in spec.observation.items()}


def test_env_changes_no_surgery_can_follow_are_refused_in_one_line(tmp_path):
    """The old run read CartPole's features (0, 2); new ones come after the old (found in
    review: all four features put x_dot where theta was, and the check, which feeds both
    networks the same vector, saw no error). A change of action bounds or squash moves the env
    differently for the same outputs."""
    from seedlike.envs import make_env_spec

    old = small_config("CartPole-v1")
    old.env.obs_indices = (0, 2)
    run = str(tmp_path / "run")
    save_run(run, old, 3, env_spec_fn=make_env_spec)
    for indices, fits in (((), False), ((0, 1, 2, 3), False), ((0, 2, 1, 3), True)):
        new = small_config("CartPole-v1")
        new.env.obs_indices = indices
        out = str(tmp_path / f"out{len(os.listdir(tmp_path))}")
        if fits:
            assert surgery.run_surgery(run, out, new_config=new).written
            continue
        with pytest.raises(surgery.SurgeryError, match=r"use \(0, 2, 1, 3\)$"):
            surgery.run_surgery(run, out, new_config=new)
        assert not os.path.exists(out)

    specs = {"Continuous-v0": dataclasses.replace(SPEC, num_actions=0, **GAUSS)}
    continuous = small_config("Continuous-v0")
    run = str(tmp_path / "continuous")
    save_run(run, continuous, 4, env_spec_fn=lambda env: specs[env.name])
    for key, value, message in (
        ("env.action_bounds", "rescale", "env.action_bounds changes from 'clip' to 'rescale'"),
        ("network.action_squash", True, "network.action_squash changes from False to True"),
    ):
        new = small_config("Continuous-v0")
        section, name = key.split(".")
        new[section][name] = value
        with pytest.raises(surgery.SurgeryError, match=message):
            surgery.run_surgery(
                run, str(tmp_path / "c_out"), new_config=new, spec_fn=lambda env: specs[env.name]
            )


def test_a_changed_policy_head_is_refused_by_name(monkeypatch):
    from networks import heads

    monkeypatch.setitem(heads.POLICY_HEADS, "other", heads.CategoricalHead)
    changed = "network.policy_head changes from 'categorical' to 'other'"
    with pytest.raises(surgery.PlanError, match=changed):
        surgery.derive_plan(make_net(), make_net(policy_head="other"))


@pytest.mark.parametrize(
    "head",
    [dict(), dict(dueling=True), dict(dueling=True, atoms=7, value_range=(-3.0, 3.0))],
    ids=["q", "dueling", "dueling-c51"],
)
def test_widening_a_q_network_keeps_its_action_values_exact(head):
    """A Q head reads the torso like a policy head: widening the torso (new observations too)
    leaves every action's value (each atom's logit) and the greedy value as they were."""
    arch = dict(policy_head="q", normalize_obs=False, activation="relu", **head)
    old_net = make_net(hidden_sizes=(6, 5), **arch)
    new_net = make_net(SPEC_MORE_OBS, hidden_sizes=(9, 8), **arch)
    assert old_net.module.torso_spec.shared  # one torso: a Q network has no value head
    params = random_params(old_net, 5)
    plan, result = derive_and_apply(old_net, new_net, params)
    assert {op.kind for op in plan.ops} >= {"widen_dense", "add_observations"}
    assert_exact(check(old_net, new_net, params, {}, result))


def test_widening_an_r2d2_network_keeps_its_action_values_exact_over_unrolls():
    """R2D2's network: the LSTM core and the dueling Q head widen exactly, so a widened run's
    stored recurrent states (zero-padded) go on giving the same action values."""
    arch = dict(policy_head="q", normalize_obs=False, activation="relu", dueling=True,
                core="lstm")  # fmt: skip
    old_net = make_net(hidden_sizes=(6,), core_size=4, **arch)
    new_net = make_net(hidden_sizes=(9,), core_size=7, **arch)
    params = random_params(old_net, 7)
    plan, result = derive_and_apply(old_net, new_net, params)
    assert {op.kind for op in plan.ops} >= {"widen_dense", "widen_lstm"}
    assert_exact(check(old_net, new_net, params, {}, result))


@pytest.mark.parametrize(
    "head",
    [dict(), dict(atoms=11, value_range=(-4.0, 4.0)), dict(dueling=True, atoms=5)],
    ids=["q", "c51", "dueling-c51"],
)
def test_new_q_actions_keep_the_old_values_and_start_at_the_configured_value(head):
    arch = dict(policy_head="q", normalize_obs=False, hidden_sizes=(6,), **head)
    old_net = make_net(**arch)
    new_net = make_net(dataclasses.replace(SPEC, num_actions=5), **arch)
    params = random_params(old_net, 6)
    plan = surgery.derive_plan(old_net, new_net, new_action_value=1.5)
    assert [op.kind for op in plan.ops] == ["add_q_actions"]
    result = plan.apply(params, 3, Context(layout_of(old_net)))
    assert_exact(check(old_net, new_net, params, {}, result))
    obs = {k: np.random.default_rng(0).normal(size=(16, *s.shape)).astype(F32)
           for k, s in SPEC.observation.items()}  # fmt: skip
    q_new = np.asarray(new_net.q_values(new_net.apply(result.params, {}, obs)[0]))
    if head.get("dueling"):  # a dueling head's new actions start at the state's value V(s)
        features = old_net.module.apply(
            params, old_net._inputs({}, obs, 1), method=type(old_net.module).encode
        )[0]
        v = np.asarray(features) @ params["params"]["policy_head"]["value"]["kernel"]
        v = v + params["params"]["policy_head"]["value"]["bias"]
        v_mean = (jax.nn.softmax(v, -1) * np.linspace(-10, 10, 5)).sum(-1)
        np.testing.assert_allclose(q_new[:, 3:], np.repeat(v_mean[:, None], 2, 1), atol=1e-5)
    else:
        np.testing.assert_allclose(q_new[:, 3:], 1.5, atol=1e-5)


def test_a_layer_norm_torso_deepens_exactly_and_refuses_widening_by_name():
    kw = {"normalize_obs": False, "activation": "relu", "layer_norm": True, "policy_head": "q"}
    old_net = make_net(hidden_sizes=(8, 6), **kw)
    params = random_params(old_net, 2)
    deeper = make_net(hidden_sizes=(8, 6), residual_blocks=1, **kw)
    plan, result = derive_and_apply(old_net, deeper, params)
    assert [op.kind for op in plan.ops] == ["add_residual_block"]
    assert_exact(check(old_net, deeper, params, {}, result))
    with pytest.raises(surgery.PlanError, match=r"params/torso/dense_0 feeds a LayerNorm"):
        derive_and_apply(old_net, make_net(hidden_sizes=(12, 6), **kw), params)
    plain = {**kw, "layer_norm": False}
    with pytest.raises(surgery.PlanError, match="network.layer_norm changes from True to False"):
        surgery.derive_plan(old_net, make_net(hidden_sizes=(8, 6), **plain))
    board = EnvSpec("ConnectFour-v1", {"obs": ArraySpec(np.int8, (6, 7, 2))}, 7, 2)
    cnn = {**kw, "torso": "board_cnn", "cnn_channels": (4,)}
    with pytest.raises(surgery.PlanError, match=r"params/torso/conv_0 feeds a LayerNorm"):
        derive_and_apply(
            make_net(board, **cnn), make_net(board, **{**cnn, "cnn_channels": (8,)}),
            random_params(make_net(board, **cnn), 3),
        )  # fmt: skip
