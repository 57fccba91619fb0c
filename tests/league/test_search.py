"""Play-time search (seedlike.league.search): the rules against enumerated lines, negamax values
of TicTacToe positions whose game-theoretic value is known, Connect Four tactics that need each
depth, the value head's side at the leaves, and play.py --search_depth end to end."""

import itertools
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from networks import make_network
from seedlike.checkpoint import Checkpointer
from seedlike.config import base_config
from seedlike.league import connect_four, games, search
from seedlike.league.league import save_snapshot
from seedlike.learning import train_state as ts
from seedlike.types import ArraySpec, EnvSpec
from tests.procs import ROOT

MASK = "legal_action_mask"
C4 = search.GAMES["ConnectFour-v1"]
TTT = search.GAMES["TicTacToe-v1"]
D = search.DISCOUNT


def enumerated_lines(rows, cols, length):
    """Every line of `length` cells, written out cell by cell."""
    lines = []
    for r, c in itertools.product(range(rows), range(cols)):
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            cells = [(r + i * dr, c + i * dc) for i in range(length)]
            if all(0 <= y < rows and 0 <= x < cols for y, x in cells):
                lines.append(cells)
    return lines


@pytest.mark.parametrize("rows, cols, length, count", [(6, 7, 4, 69), (3, 3, 3, 8)])
def test_has_line_agrees_with_every_enumerated_line(rows, cols, length, count):
    lines = enumerated_lines(rows, cols, length)
    assert len(lines) == count  # 69 lines of four in Connect Four, 8 in TicTacToe
    rng = np.random.default_rng(0)
    stones = rng.random((3000, rows, cols)) < 0.4
    expected = [any(all(b[y, x] for y, x in line) for line in lines) for b in stones]
    np.testing.assert_array_equal(search.has_line(stones, length), expected)
    assert 0.2 < np.mean(expected) < 0.9  # both outcomes are exercised
    if length == 4:
        np.testing.assert_array_equal(connect_four.has_four(stones), expected)


def board(game, mine_cells, theirs_cells):
    mine = np.zeros((1, game.rows, game.cols), bool)
    theirs = np.zeros_like(mine)
    for r, c in mine_cells:
        mine[0, r, c] = True
    for r, c in theirs_cells:
        theirs[0, r, c] = True
    return mine, theirs


def random_positions(n, plies, seed):
    """Connect Four positions after `plies` random moves (fewer where a game ended), from the side
    of the player to move."""
    rng = np.random.default_rng(seed)
    mine = np.zeros((n, 6, 7), bool)
    theirs = np.zeros_like(mine)
    live = np.ones(n, bool)
    for _ in range(plies):
        after, legal, win, _ = C4.moves(mine, theirs)
        pick = np.where(legal, rng.random(legal.shape), -1.0).argmax(1)
        live &= ~win[np.arange(n), pick] & legal.any(1)
        moved = np.where(live[:, None, None], after[np.arange(n), pick], theirs)
        mine, theirs = np.where(live[:, None, None], theirs, mine), moved
    return mine, theirs


def zero_value(mine, theirs):
    return np.zeros(mine.shape[0])


def never_called(mine, theirs):
    raise AssertionError("the search reached a non-terminal leaf")


def test_tictactoe_values_match_the_solved_game():
    """With X in the centre, O draws by taking a corner and loses by taking an edge (searched to
    the end of the game, so the value head is never asked)."""
    mine, theirs = board(TTT, [], [(1, 1)])  # O to move
    q = search.action_values(TTT, never_called, mine, theirs, depth=8)[0]
    assert q[4] == -np.inf
    np.testing.assert_array_equal(q[[0, 2, 6, 8]], 0.0)
    assert (q[[1, 3, 5, 7]] < -0.9).all()
    # X to move after centre / edge: X wins (by the 7th ply); after centre / corner: a draw.
    mine, theirs = board(TTT, [(1, 1)], [(0, 1)])
    assert search.action_values(TTT, never_called, mine, theirs, depth=7)[0].max() >= D**4
    mine, theirs = board(TTT, [(1, 1)], [(0, 0)])
    assert search.action_values(TTT, never_called, mine, theirs, depth=7)[0].max() == 0.0


def test_connect_four_tactics_need_their_depth():
    # Rows count from the top: row 5 is the bottom.
    # 1. Take a win: three in the bottom row, column 3 open.
    mine, theirs = board(C4, [(5, 0), (5, 1), (5, 2)], [(4, 0), (4, 1), (4, 2)])
    q = search.action_values(C4, zero_value, mine, theirs, depth=1)[0]
    assert q[3] == 1.0 and (np.delete(q, 3) == 0.0).all()

    # 2. Block: the opponent threatens column 3; depth 1 cannot see it, depth 2 can.
    mine, theirs = board(C4, [(4, 0), (4, 1), (5, 6)], [(5, 0), (5, 1), (5, 2)])
    prior = np.eye(7)[[6]]  # the policy would rather play column 6
    q1 = search.action_values(C4, zero_value, mine, theirs, depth=1)
    assert search.choose(q1, prior)[0] == 6
    q2 = search.action_values(C4, zero_value, mine, theirs, depth=2)
    assert q2[0, 3] == 0.0 and (np.delete(q2[0], 3) == -D).all()
    assert search.choose(q2, prior)[0] == 3

    # 3. Do not play under the opponent's threat at (4, 3).
    mine, theirs = board(C4, [(5, 0), (5, 2), (5, 6)], [(5, 1), (4, 0), (4, 1), (4, 2)])
    q2 = search.action_values(C4, zero_value, mine, theirs, depth=2)
    assert q2[0, 3] == -D and (np.delete(q2[0], 3) == 0.0).all()
    assert search.choose(q2, np.eye(7)[[3]])[0] != 3

    # 4. Make a double threat: columns 1 or 4 give an open three on the bottom row.
    mine, theirs = board(C4, [(5, 2), (5, 3)], [(4, 2), (4, 3)])
    q2 = search.action_values(C4, zero_value, mine, theirs, depth=2)
    assert q2.max() == 0.0
    q3 = search.action_values(C4, zero_value, mine, theirs, depth=3)[0]
    np.testing.assert_allclose(q3[[1, 4]], D**2)
    assert (np.delete(q3, [1, 4]) <= 0.0).all()


def test_leaves_are_valued_from_the_side_of_the_player_to_move():
    """At depth 1 the leaf is the opponent's turn: evaluate(their stones, my stones after my move)
    and the move is worth minus the discounted result."""
    mine, theirs = random_positions(5, 12, seed=1)
    calls = []

    def evaluate(m, t):
        calls.append((m, t))
        return (m.sum((1, 2)) - 2.0 * t.sum((1, 2))) / 100.0

    q = search.action_values(C4, evaluate, mine, theirs, depth=1)
    after, legal, win, full = C4.moves(mine, theirs)
    live = legal & ~win & ~full
    expected = -D * (theirs.sum((1, 2))[:, None] - 2.0 * (mine.sum((1, 2))[:, None] + 1)) / 100
    np.testing.assert_allclose(q[live], np.broadcast_to(expected, q.shape)[live])
    m, t = calls[0]
    np.testing.assert_array_equal(m, theirs[np.nonzero(live)[0]])
    np.testing.assert_array_equal(t, after[live])


def small_network(spec, **overrides):
    c = base_config()
    c.network.hidden_sizes = (16,)
    c.network.normalize_obs = False
    for key, value in overrides.items():
        c.network[key] = value
    return c, make_network(c.network, spec)


C4_SPEC = EnvSpec(
    "ConnectFour-v1", {"obs": ArraySpec(np.bool_, (6, 7, 2))}, 7, 2, {MASK: ArraySpec(bool, (7,))}
)


def test_search_agent_evaluates_in_chunks_and_plays_legal_winning_moves():
    _, network = small_network(C4_SPEC)
    params = {"params": network.init(jax.random.key(3)), "obs_norm": {}}
    agent = search.SearchAgent(network, params, depth=2)
    rng = np.random.default_rng(2)
    mine, theirs = random_positions(37, 16, seed=2)
    logits, values = agent.evaluate(mine, theirs)
    small_logits, small_values = agent.evaluate(mine, theirs, chunk=5)
    np.testing.assert_allclose(small_logits, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(small_values, values, rtol=1e-5, atol=1e-5)
    obs = {"obs": np.stack([mine, theirs], -1)}
    direct_logits, direct_values = network.apply(
        params["params"], {}, obs, {MASK: C4.moves(mine, theirs)[1]}
    )
    np.testing.assert_allclose(values, direct_values, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits, direct_logits, rtol=1e-5, atol=1e-5)

    m, t = board(C4, [(5, 0), (5, 1), (5, 2)], [(4, 0), (4, 1), (4, 2)])
    positions = {"obs": np.stack([np.concatenate([m, mine]), np.concatenate([t, theirs])], -1)}
    legal = C4.moves(positions["obs"][..., 0], positions["obs"][..., 1])[1]
    actions = agent.act(positions, legal, np.arange(38), np.zeros(38, bool), rng)
    assert actions[0] == 3
    assert legal[np.arange(38), actions].all()


def test_search_refuses_what_it_cannot_search():
    _, lstm = small_network(C4_SPEC, core="lstm", core_size=8)
    params = {"params": lstm.init(jax.random.key(0)), "obs_norm": {}}
    with pytest.raises(ValueError, match="feed-forward network"):
        search.SearchAgent(lstm, params, depth=2)
    othello = EnvSpec(
        "Othello-v1", {"obs": ArraySpec(np.bool_, (8, 8, 2))}, 65, 2, {MASK: ArraySpec(bool, (65,))}
    )
    _, network = small_network(othello)
    params = {"params": network.init(jax.random.key(0)), "obs_norm": {}}
    with pytest.raises(ValueError, match="search supports .*ConnectFour-v1.*not Othello-v1"):
        search.SearchAgent(network, params, depth=2)
    _, network = small_network(C4_SPEC)
    with pytest.raises(ValueError, match="depth must be 1..6"):
        search.SearchAgent(network, params, depth=0)


def save_run(run_dir):
    """A run directory with one checkpoint of an untrained Connect Four MLP."""
    config, network = small_network(C4_SPEC)
    config.env.name = "ConnectFour-v1"
    state = ts.init_train_state(network, ts.make_optimizer(config.optimizer), jax.random.key(0))
    checkpointer = Checkpointer(str(run_dir / "checkpoints"))
    checkpointer.save(0, state, {"policy_version": 0, "config": json.loads(config.to_json())})
    checkpointer.close()
    return network, state


@pytest.mark.slow  # runs the entrypoint in a process of its own
def test_play_cli_searches_with_a_checkpoint(tmp_path):
    save_run(tmp_path)
    args = [f"--a={tmp_path}", "--b=random", "--games=24", "--json"]
    out = subprocess.run(
        [sys.executable, "play.py", *args, "--search_depth=2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["games"] == 24 == result["wins"] + result["draws"] + result["losses"]
    # Exact one-move tactics on top of an untrained value beat random play clearly.
    assert result["wins"] >= 18, result


def test_league_snapshots_load_as_agents(tmp_path):
    """play.py's agents can be league snapshots: their own params in the run's network."""
    network, state = save_run(tmp_path)
    snapshot = {"params": network.init(jax.random.key(7)), "obs_norm": {}}
    save_snapshot(str(tmp_path / "league" / "snapshots"), 7, snapshot)
    loaded_net, params, label = games.load_policy(str(tmp_path / "league" / "snapshots" / "7"))
    assert label.endswith("@v7") and loaded_net.spec.name == "ConnectFour-v1"
    jax.tree.map(np.testing.assert_array_equal, params["params"], snapshot["params"])
    with pytest.raises(AssertionError):  # and not the checkpoint's params
        jax.tree.map(np.testing.assert_array_equal, params["params"], state.params)
    with pytest.raises(FileNotFoundError, match="no league snapshot 8 .* 1 snapshots: 7$"):
        games.load_policy(str(tmp_path / "league" / "snapshots" / "8"))
