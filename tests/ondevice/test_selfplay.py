"""Two-player games on the device (pgx, seedlike.ondevice.selfplay and .opponents): the league's
opponents drawn with the SEED path's probabilities, bots that are the SEED path's bots, masks
kept, a run that learns and resumes exactly, and configs refused in one line."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedlike import checkpoint as ckpt_lib
from seedlike import envs
from seedlike.config import ConfigError
from seedlike.envs import device
from seedlike.envs.device import Turn, TurnEnv
from seedlike.league import connect_four, games
from seedlike.league.players import LEARNER
from seedlike.metrics import read_metrics
from seedlike.ondevice import opponents, program, rollout, run, selfplay
from tests.helpers import config_file

pytest.importorskip("pgx")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "configs", "pgx_tictactoe.py")


def config(**values):
    """The shipped config, its TrueSkill evaluation off unless asked (test_roles rates one)."""
    return config_file(CONFIG, **{"league.eval_interval_s": 0.0, **values})


def game(name="connect_four"):
    c = config(**{"env.name": name, "league.bots": (), "league.p_bots": 0.0})
    spec = envs.make_env_spec(c.env)
    return c, spec, envs.device_env(c.env, spec)


def test_pgx_connect_four_shows_envpools_planes_from_the_movers_side():
    """Columns 3, 3, 0 from an empty board: the mover (the first player again) sees its two stones
    in plane 0 on the bottom row (row 5) and the reply on row 4 in plane 1, as
    seedlike.league.connect_four reads envpool's ConnectFour-v1."""
    _, spec, env = game()
    assert spec.observation["obs"].shape == (6, 7, 2) and spec.num_players == 2
    turn = env.reset(jax.random.key(0))
    first = int(turn.mover)
    for column in (3, 3, 0):
        turn = env.step(turn, jnp.int32(column), jax.random.key(1))
    board = np.asarray(turn.obs["obs"])
    assert int(turn.mover) == 1 - first
    mine = np.zeros((6, 7), bool)
    theirs = np.zeros((6, 7), bool)
    theirs[5, 3] = theirs[5, 0] = True  # the first player's, seen by the second
    mine[4, 3] = True
    np.testing.assert_array_equal(board[..., 0], mine)
    np.testing.assert_array_equal(board[..., 1], theirs)
    np.testing.assert_array_equal(env.observe(turn, jnp.int32(first))["obs"][..., 0], theirs)


def test_the_device_scripted_bot_wins_and_blocks_where_the_seed_paths_does():
    """On 2,000 random positions: the columns the JAX bot may play are those the numpy bot's
    win-then-block rule allows (seedlike.league.connect_four, over envpool's boards)."""
    rng = np.random.default_rng(0)
    cells = rng.integers(0, 3, size=(2000, 6, 7))  # 0 empty, 1 mine, 2 theirs, then gravity
    filled = np.sort(cells > 0, axis=1)  # stones fall: the filled cells at the bottom
    owner = np.where(filled, rng.integers(1, 3, size=cells.shape), 0)
    mine, theirs = owner == 1, owner == 2
    legal = ~filled[:, 0, :]
    keep = legal.any(1)
    mine, theirs, legal = mine[keep], theirs[keep], legal[keep]
    win = connect_four.winning_moves(mine, mine | theirs, legal)
    block = connect_four.winning_moves(theirs, mine | theirs, legal)
    expected = np.where(
        win.any(1, keepdims=True), win, np.where(block.any(1, keepdims=True), block, legal)
    )
    device_win = jax.vmap(selfplay.connect_four_wins)(mine, mine | theirs, legal)
    np.testing.assert_array_equal(np.asarray(device_win), win)
    boards = jnp.asarray(np.stack([mine, theirs], -1))

    def pick(board, mask, key):
        turn = Turn(None, {"obs": board, "legal_action_mask": mask}, None, None, None, None)
        return selfplay.scripted_connect_four(turn, key)

    keys = jax.random.split(jax.random.key(0), 16)
    picks = jax.vmap(lambda k: jax.vmap(lambda b, m: pick(b, m, k))(boards, legal))(keys)
    picks = np.asarray(picks)
    assert expected[np.arange(len(expected))[None], picks].all()  # never outside the rule
    seen = np.zeros_like(expected)
    seen[np.arange(len(expected))[None].repeat(16, 0), picks] = True
    assert (seen & ~expected).sum() == 0 and seen.sum() > expected.shape[0] * 1.5  # ties at random


def _league(c, tmp_path, spec):
    from networks import make_network
    from seedlike.learning import train_state as ts

    network = make_network(c.network, spec)
    state = ts.init_train_state(network, ts.make_optimizer(c.optimizer), jax.random.key(0))
    policy = {"params": state.params, "obs_norm": state.obs_norm}
    return network, state, opponents.DeviceLeague(c, str(tmp_path), jax.device_get(policy))


@pytest.mark.parametrize("sampler", ["openai_five", "pfsp"])
def test_episodes_draw_their_opponents_with_the_seed_paths_probabilities(tmp_path, sampler):
    """Three snapshots with results against them (qualities and win rates moved), a random bot
    at p_bots 0.3: the table's probabilities are the League's (what a SEED episode start draws),
    and 20,000 episode starts on the device draw each choice that often (within 5 sigma)."""
    c = config(**{"league.sampler": sampler, "league.p_bots": 0.3, "league.max_snapshots": 4})
    spec = envs.make_env_spec(c.env)
    network, state, league = _league(c, tmp_path, spec)
    for version in (10, 20, 30):
        league.after_update(version, 0, lambda: jax.device_get(
            {"params": state.params, "obs_norm": state.obs_norm}
        ))  # fmt: skip
    outcomes = np.zeros((len(league.choices()) + 1, 3), np.float32)  # + the games left out
    outcomes[1] = (0, 1, 5)  # v10: beaten 5 times
    outcomes[2] = (3, 0, 1)
    outcomes[-1] = (50, 0, 0)  # against a lane's snapshot that changed: never counted
    league.record(outcomes)
    before = league.league.probabilities()
    league.after_update(35, 0, None)  # not a snapshot's version: the games wait
    assert league.league.probabilities() == pytest.approx(before)
    league.after_update(40, 0, lambda: jax.device_get(
        {"params": state.params, "obs_norm": state.obs_norm}
    ))  # fmt: skip
    assert league.league.payoff.state_dict() != {} and len(league.league.pool) == 4
    want = league.league.probabilities()
    assert want[LEARNER] == pytest.approx(0.7 * league.league.sampler.probabilities()[LEARNER])
    got = dict(zip(league.choices(), np.exp(league.logits()).tolist()))
    for choice, p in got.items():
        assert p == pytest.approx(want.get(choice, 0.0), abs=1e-6), choice
    env = envs.device_env(c.env, spec)
    table, lanes, updates = league.table(), int(c.league.device_lanes), 400

    def labels(key):
        lane_key, reset_key = jax.random.split(key)
        seat = program.seat_of(env, network, state, table, lanes, lane_key, 0, c.league.bots)
        slots = device.start_all(seat, jax.random.split(reset_key, 64))
        return slots.env_state[1], seat.data[1]  # each env's kind, each lane's slot

    kinds, slots = jax.jit(jax.vmap(labels))(jax.random.split(jax.random.key(1), updates))
    kinds, slots = np.asarray(kinds), np.asarray(slots)
    lane = np.repeat(np.arange(lanes), 64 // lanes)
    choice = np.where(kinds == 0, 0, np.where(kinds == 1, slots[:, lane], len(got) - 1))
    drawn = np.bincount(choice.reshape(-1), minlength=len(got)) / choice.size
    p = np.exp(league.logits())
    # Lanes share their snapshot: count lane draws, the coarser sample, in the tolerance.
    sigma = np.sqrt(p * (1 - p) / (updates * lanes))
    np.testing.assert_array_less(np.abs(drawn - p), 5 * sigma + 1e-9)


def _tracked(env: TurnEnv) -> TurnEnv:
    """`env` whose rewards count an illegal move 100 to both players (pgx would end the game)."""

    def step(turn, action, key):
        illegal = ~turn.obs["legal_action_mask"][action]
        after = env.step(turn, action, key)
        return after._replace(rewards=after.rewards + 100.0 * illegal)

    return TurnEnv(env.reset, step, env.observe)


def test_no_illegal_move_is_played_on_either_side(tmp_path):
    """3,000 steps of 64 Connect Four games, the untrained policy against itself, snapshots and
    the random and scripted bots: no episode's return shows an illegal move."""
    c = config(**{"env.name": "connect_four", "league.bots": ("random", "scripted"),
                  "league.p_bots": 0.5, "league.max_snapshots": 2})  # fmt: skip
    spec = envs.make_env_spec(c.env)
    network, state, league = _league(c, tmp_path, spec)
    league.after_update(10, 0, lambda: jax.device_get(
        {"params": state.params, "obs_norm": state.obs_norm}
    ))  # fmt: skip
    env = _tracked(envs.device_env(c.env, spec))
    lanes = int(c.league.device_lanes)
    seat = program.seat_of(
        env, network, state, league.table(), lanes, jax.random.key(3), 0, tuple(c.league.bots)
    )
    acting = rollout.start(network, seat, 64, jax.random.key(0))
    go = jax.jit(lambda a: rollout.rollout(network, seat, state.params, state.obs_norm, a, 50, 0))
    ends = np.zeros((league.table().logits.shape[0] + 1, 3))
    for _ in range(60):
        acting, unroll, episodes = go(acting)
        ends += np.asarray(episodes.outcomes)
        valid = np.asarray(unroll.valid[:, :-1])
        mask = np.asarray(unroll.extras["legal_action_mask"][:, :-1])
        taken = np.take_along_axis(mask, np.asarray(unroll.action[:, :-1])[..., None], -1)[..., 0]
        assert taken[valid].all()
        assert float(episodes.return_sum) <= float(episodes.count)  # +1 at most per game
        assert np.all(np.abs(np.asarray(unroll.reward)) <= 1.0)
    # Many games, each counted against its opponent: the snapshot's at its slot (label 1), the
    # scripted bot's (label -2) mostly lost (its replies' rewards reach the learner), none left
    # out (one period: no lane changed under a game).
    assert ends.sum() > 1000 and ends[1].sum() > 50 and not ends[-1].any()  # counts
    assert ends[-2].sum() > 100 and ends[-2, 0] > ends[-2, 2]


def test_self_play_on_the_device_beats_random_play_and_resumes_exactly(tmp_path):
    """configs/pgx_tictactoe.py for 60k env steps: at least 0.7 of 400 games won against random
    play from the host (play.py's match, the pgx adapter), where random play wins about 0.44
    of its games against itself; and the same run stopped at half and resumed holds the
    parameters, pool and qualities of the unbroken one, bit for bit."""
    # The learning rate held (annealed, the half run would anneal over its own budget).
    small = {"total_env_steps": 60 * 64 * 8, "log.interval_s": 0.5, "optimizer.anneal_lr": False}
    small["league.max_snapshots"] = 2
    whole = run.train(config(**small), str(tmp_path / "whole"))
    assert whole["policy_version"] == 60
    # Stopped between snapshots (games pending) after the pool has dropped one (2 at most): the
    # pending games and the slots come back from the checkpoint.
    run.train(config(**{**small, "total_env_steps": 35 * 64 * 8}), str(tmp_path / "broken"))
    resumed = run.train(config(**small), str(tmp_path / "broken"))
    assert resumed["policy_version"] == 60
    saved = []
    for name in ("whole", "broken"):
        _, _, state, meta = ckpt_lib.load_checkpoint(str(tmp_path / name / "checkpoints"))
        saved.append((jax.tree.leaves(state.params), meta["league"]))
    # Bitwise: both runs execute the same compiled program on this CPU, update for update
    # (tests/ondevice/test_run.py's resume test says why call sizes do not matter).
    for a, b in zip(saved[0][0], saved[1][0], strict=True):
        np.testing.assert_array_equal(a, b)
    pools = [[(e["id"], e["quality"]) for e in league["pool"]["entries"]] for _, league in saved]
    # The qualities, not the clock times: both runs make the same updates from the same games
    # in the same order on this CPU (as the parameters, bit for bit); ids exactly.
    assert [i for i, _ in pools[0]] == [i for i, _ in pools[1]] and len(pools[0]) == 2
    assert [q for _, q in pools[0]] == pytest.approx([q for _, q in pools[1]], abs=1e-9)
    assert saved[0][1]["device_slots"] == saved[1][1]["device_slots"]
    rows = read_metrics(str(tmp_path / "whole"))
    assert rows[-1]["league/pool_size"] == 2 and rows[-1]["league/win_rate_vs_random"] is not None
    # As play.py does it: the checkpoint names its game (pgx's, through the host adapter).
    agent, rand = games.make_agent(str(tmp_path / "whole")), games.make_agent("random")
    result = games.play_match(games.game_of((agent, rand)), agent, rand, 400, seed=1)
    assert result.win_rate() >= 0.7, games.summarize(result)
    assert set(result.first_mover) == {True, False}  # both colours
    searching = games.make_agent(str(tmp_path / "whole"), search_depth=2)
    result = games.play_match(games.game_of((searching, rand)), searching, rand, 100, seed=2)
    assert result.losses <= 10, games.summarize(result)  # depth 2 never misses a block


def test_what_a_two_player_game_cannot_run_on_the_device_is_one_line():
    with pytest.raises(ValueError, match="is not a pgx game; pgx has"):
        envs.check_env(config(**{"env.name": "tictactoe"}).env)
    with pytest.raises(ConfigError, match="with seeds > 1"):
        run.check(config(seeds=2))
    with pytest.raises(ConfigError, match=r"'scripted', which does not play tic_tac_toe"):
        run.check(config(**{"league.bots": ("scripted",)}))
    with pytest.raises(ConfigError, match="league.max_snapshots = 0"):
        run.check(config(**{"league.max_snapshots": 0}))
    with pytest.raises(ConfigError, match=r"league.shared_games \(an exploiter's actors"):
        run.check(config(**{"league.roles": ("main", "main_exploiter"),
                            "league.shared_games": ("main_exploiter",)}))  # fmt: skip
