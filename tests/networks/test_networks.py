"""Board-game network options: the mirrored (left-right equivariant) network, VALID convs, line
features."""

import dataclasses

import jax
import numpy as np
import pytest

from networks import board, make_network
from networks.actor_critic import mirror_actions
from seedlike.config import base_config
from seedlike.league import search
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


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
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
        apply = jax.jit(network.apply)  # one compilation, not one per op
        logits, value = apply(params, {}, obs, {MASK: mask})
        logits_m, value_m = apply(params, {}, flipped, {MASK: mask[:, perm]})
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


def brute_force_completions(stones, empty, line):
    """Reference for networks.board.completions: place a stone in each empty cell in turn and look
    for a line with the rules' own check (seedlike.league.search.has_line)."""
    out = np.zeros(stones.shape, bool)
    for r, c in zip(*np.nonzero(empty.any(0))):
        rows = np.nonzero(empty[:, r, c])[0]
        placed = stones[rows].copy()
        placed[:, r, c] = True
        out[rows, r, c] = search.has_line(placed, line)
    return out


def played_boards(game, n, seed):
    """Boards reached by random legal play, none of them already won, as [n, H, W, 2] int8."""
    rng = np.random.default_rng(seed)
    mine = np.zeros((n, game.rows, game.cols), bool)
    theirs = np.zeros_like(mine)
    for k in range(n):
        for _ in range(rng.integers(0, game.rows * game.cols)):
            legal = np.nonzero(game.legal(mine[k : k + 1], theirs[k : k + 1])[0])[0]
            after = game.moves(mine[k : k + 1], theirs[k : k + 1])[0][0, rng.choice(legal)]
            if search.has_line(after[None], game.line)[0]:
                break
            # The mover's stones after its move become the other side's: swap the planes.
            mine[k], theirs[k] = theirs[k], after
    return np.stack([mine, theirs], -1).astype(np.int8)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.parametrize("name", ["ConnectFour-v1", "TicTacToe-v1"])
def test_line_features_match_placing_each_stone_and_the_legal_moves(name):
    game = search.GAMES[name]
    boards = played_boards(game, 300, 0)
    features = np.asarray(board.line_features(boards, game.line, game.gravity)) > 0
    mine, theirs = boards[..., 0] > 0, boards[..., 1] > 0
    empty = ~(mine | theirs)
    for plane, stones in enumerate((mine, theirs)):
        expected = brute_force_completions(stones, empty, game.line)
        np.testing.assert_array_equal(features[..., plane], expected)
        assert 20 < expected.sum() < expected.size // 4  # threats exist and are not everywhere
    _, legal, win, _ = game.moves(mine, theirs)
    playable = features[..., 2]
    if game.gravity:  # one playable cell per column with room, the one a stone drops to
        np.testing.assert_array_equal(playable.sum(1), legal.astype(int))
        np.testing.assert_array_equal((features[..., 0] & playable).any(1), win)
    else:
        np.testing.assert_array_equal(playable.reshape(len(boards), -1), legal)
        np.testing.assert_array_equal((features[..., 0] & playable).reshape(len(boards), -1), win)


def test_line_features_of_a_hand_made_board():
    # Connect Four, row 0 on top. Mine (x) has three in the bottom row, theirs (o) three up the
    # left column: x completes at (5, 3), o at (2, 0), and (2, 0) is also where o's column is
    # playable.
    x, o = np.zeros((6, 7), bool), np.zeros((6, 7), bool)
    x[5, 1:3], x[5, 4], o[3:6, 0] = True, True, True
    x[5, 6] = x[4, 1] = True
    features = np.asarray(board.line_features(np.stack([x, o], -1)[None], 4, True))[0] > 0
    assert list(zip(*np.nonzero(features[..., 0]))) == [(5, 3)]
    assert list(zip(*np.nonzero(features[..., 1]))) == [(2, 0)]
    playable = {(2, 0), (3, 1), (4, 2), (5, 3), (4, 4), (5, 5), (4, 6)}  # column by column
    assert set(zip(*np.nonzero(features[..., 2]))) == playable


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_board_lines_feed_the_torso_and_keep_the_mirror_exact():
    lined = build(CONNECT_FOUR, hidden_sizes=(16,), board_lines=4, board_gravity=True)
    assert lined.input_spec["obs_lines"] == ArraySpec(np.float32, (6, 7, 3))
    # The same network as one that gets the features as an observation of the env.
    spec = dataclasses.replace(
        CONNECT_FOUR, observation={**CONNECT_FOUR.observation, **lined.input_spec}
    )
    given = build(spec, hidden_sizes=(16,))
    params = noisy_params(lined, 1)
    assert params["params"]["policy_torso"]["dense_0"]["kernel"].shape == (6 * 7 * (2 + 3), 16)
    obs, mask = boards_and_masks(CONNECT_FOUR, 8, 2)
    lines = np.asarray(board.line_features(obs["obs"], 4, True))
    logits, value = lined.apply(params, {}, obs, {MASK: mask})
    logits_g, value_g = given.apply(params, {}, {**obs, "obs_lines": lines}, {MASK: mask})
    np.testing.assert_allclose(logits, logits_g, atol=1e-5)
    np.testing.assert_allclose(value, value_g, atol=1e-5)
    blind, _ = given.apply(params, {}, {**obs, "obs_lines": 0 * lines}, {MASK: mask})
    assert np.abs(np.asarray(logits) - np.asarray(blind))[mask].max() > 1e-2
    mirrored = build(CONNECT_FOUR, hidden_sizes=(16,), mirror="columns", board_lines=4)
    params = noisy_params(mirrored, 3)
    logits, value = mirrored.apply(params, {}, obs)
    logits_m, value_m = mirrored.apply(params, {}, {"obs": obs["obs"][:, :, ::-1]})
    np.testing.assert_allclose(logits, np.asarray(logits_m)[:, ::-1], atol=1e-5)
    np.testing.assert_allclose(value, value_m, atol=1e-5)


def test_board_lines_reject_envs_and_torsos_they_do_not_fit():
    vector = EnvSpec("CartPole-v1", {"obs": ArraySpec(np.float32, (4,))}, 2)
    with pytest.raises(ValueError, match=r"reads a board \[H, W, 2\].*board_lines=0"):
        build(vector, board_lines=4)
    with pytest.raises(ValueError, match="2 <= lines <= 7"):
        build(CONNECT_FOUR, board_lines=8)
    with pytest.raises(ValueError, match="network.torso='mlp' \\(not 'board_cnn'\\)"):
        build(CONNECT_FOUR, board_lines=4, torso="board_cnn", image_layout="HWC")
