"""Board-game network options: the mirrored (left-right equivariant) network, VALID convs."""

import jax
import numpy as np
import pytest

from networks import make_network
from networks.actor_critic import mirror_actions
from seedlike.config import base_config
from seedlike.types import ArraySpec, EnvSpec

MASK = "legal_action_mask"
CONNECT_FOUR = EnvSpec(
    "ConnectFour-v1", {"obs": ArraySpec(np.int8, (6, 7, 2))}, 7, 2, {MASK: ArraySpec(bool, (7,))}
)
TIC_TAC_TOE = EnvSpec(
    "TicTacToe-v1", {"obs": ArraySpec(np.int8, (3, 3, 2))}, 9, 2, {MASK: ArraySpec(bool, (9,))}
)


def build(spec, **overrides):
    c = base_config().network
    c.normalize_obs = False
    c.image_scale = 1.0
    for key, value in overrides.items():
        c[key] = value
    return make_network(c, spec)


def noisy_params(network, seed):
    """Init plus noise, so that the heads (initialized near zero) give clearly distinct logits."""
    params = network.init(jax.random.key(seed))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    noisy = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
    return jax.tree.unflatten(tree, noisy)


def boards_and_masks(spec, n, seed):
    rng = np.random.default_rng(seed)
    h, w, _ = spec.observation["obs"].shape
    cells = rng.random((n, h, w)) < 0.5
    mine = rng.random((n, h, w)) < 0.5
    obs = np.stack([cells & mine, cells & ~mine], -1).astype(np.int8)
    return {"obs": obs}, rng.random((n, spec.num_actions)) < 0.7


def test_mirror_actions_by_hand():
    np.testing.assert_array_equal(mirror_actions("columns", 7, 7), [6, 5, 4, 3, 2, 1, 0])
    # TicTacToe cells 0 1 2 / 3 4 5 / 6 7 8 mirror to 2 1 0 / 5 4 3 / 8 7 6.
    np.testing.assert_array_equal(mirror_actions("cells", 9, 3), [2, 1, 0, 5, 4, 3, 8, 7, 6])
    np.testing.assert_array_equal(mirror_actions("cells", 6, width=3), [2, 1, 0, 5, 4, 3])


@pytest.mark.parametrize(
    "spec, mirror, overrides",
    [
        (CONNECT_FOUR, "columns", {"hidden_sizes": (32, 16), "activation": "relu"}),
        (TIC_TAC_TOE, "cells", {"torso": "board_cnn", "cnn_channels": (8,), "cnn_hidden": 16}),
    ],
)
def test_mirrored_network_is_equivariant_and_the_plain_one_is_not(spec, mirror, overrides):
    obs, mask = boards_and_masks(spec, 16, 0)
    perm = mirror_actions(mirror, spec.num_actions, spec.observation["obs"].shape[1])
    flipped = {"obs": obs["obs"][:, :, ::-1]}

    def gaps(network):
        params = noisy_params(network, 3)
        logits, value = network.apply(params, {}, obs, {MASK: mask})
        logits_m, value_m = network.apply(params, {}, flipped, {MASK: mask[:, perm]})
        logits, logits_m = np.asarray(logits), np.asarray(logits_m)[:, perm]
        legal = mask | ~mask.any(-1, keepdims=True)
        return np.abs(logits - logits_m)[legal].max(), np.abs(value - value_m).max()

    logit_gap, value_gap = gaps(build(spec, mirror=mirror, **overrides))
    assert logit_gap < 1e-5 and value_gap < 1e-5
    plain_logit_gap, plain_value_gap = gaps(build(spec, **overrides))
    assert plain_logit_gap > 1e-2 and plain_value_gap > 1e-3


def test_mirrored_policy_averages_the_two_views():
    """logits(s) = (f(s) + f(mirror s)[mirror actions]) / 2 with f the plain network's logits."""
    plain = build(CONNECT_FOUR, hidden_sizes=(16,))
    mirrored = build(CONNECT_FOUR, hidden_sizes=(16,), mirror="columns")
    params = noisy_params(plain, 5)  # the same parameter tree
    obs, _ = boards_and_masks(CONNECT_FOUR, 4, 1)
    f, v = plain.apply(params, {}, obs)
    fm, vm = plain.apply(params, {}, {"obs": obs["obs"][:, :, ::-1]})
    logits, value = mirrored.apply(params, {}, obs)
    np.testing.assert_allclose(logits, 0.5 * (f + np.asarray(fm)[:, ::-1]), atol=1e-6)
    np.testing.assert_allclose(value, 0.5 * (v + vm), atol=1e-6)


def test_mirror_rejects_envs_and_networks_it_does_not_fit():
    with pytest.raises(ValueError, match="needs 3 actions and boards 3 wide; TicTacToe-v1 has 9"):
        build(TIC_TAC_TOE, mirror="columns")
    with pytest.raises(ValueError, match="feed-forward"):
        build(CONNECT_FOUR, mirror="columns", core="lstm")
    with pytest.raises(ValueError, match="is not one of '', 'columns', 'cells'"):
        build(CONNECT_FOUR, mirror="diagonal")
    with pytest.raises(ValueError, match=r"flips \[H, W, C\] board observations"):
        build(CONNECT_FOUR, mirror="columns", torso="board_cnn", image_layout="CHW")
    vector = EnvSpec("CartPole-v1", {"obs": ArraySpec(np.float32, (4,))}, 2)
    with pytest.raises(ValueError, match=r"flips \[H, W, C\] board observations"):
        build(vector, mirror="columns")


def test_valid_4x4_board_conv_reads_the_12_windows_of_a_connect_four_board():
    network = build(
        CONNECT_FOUR,
        torso="board_cnn",
        cnn_channels=(5,),
        cnn_kernel=4,
        cnn_padding="VALID",
        cnn_hidden=8,
    )
    params = network.init(jax.random.key(0))["params"]["torso"]
    assert params["conv_0"]["kernel"].shape == (4, 4, 2, 5)
    assert params["dense_0"]["kernel"].shape == (3 * 4 * 5, 8)  # 3x4 windows of 5 channels
    default = build(CONNECT_FOUR, torso="board_cnn")
    explicit = build(CONNECT_FOUR, torso="board_cnn", cnn_kernel=3, cnn_padding="SAME")
    assert default.module == explicit.module  # so surgery sees no change between them
    with pytest.raises(ValueError, match="board_cnn torso only"):
        build(CONNECT_FOUR, torso="mlp", cnn_kernel=4)
    with pytest.raises(ValueError, match="cnn_padding='FULL'"):
        build(CONNECT_FOUR, torso="board_cnn", cnn_padding="FULL")
