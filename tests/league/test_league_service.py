"""The league inside the server: opponent assignment, training masks, per-policy inference,
results, and the league state surviving a checkpoint round trip."""

import json

import jax
import numpy as np
import pytest
import trueskill

from networks import make_network
from seedlike.config import base_config
from seedlike.envs.envpool_env import make_env_spec
from seedlike.league import players
from seedlike.league.evaluation import Evaluation
from seedlike.league.league import League
from seedlike.league.players import BOTS, LEARNER
from seedlike.policy import PolicyRegistry
from seedlike.server.inference import InferenceService
from seedlike.server.matchmaking import Matchmaker
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.types import ArraySpec, EnvSpec, Rows
from tests.helpers import league_config

SPEC = EnvSpec(
    "TicTacToe-v1",
    {"obs": ArraySpec(np.bool_, (3, 3, 2))},
    num_actions=9,
    num_players=2,
    extras={"legal_action_mask": ArraySpec(np.bool_, (9,))},
)


def tiny_network():
    c = base_config()
    c.network.hidden_sizes = (8,)
    return c, make_network(c.network, SPEC)


def tiny_connect_four():
    """A Connect Four network of 16 hidden units and its initial policy."""
    config = base_config()
    config.env.name = "ConnectFour-v1"
    config.network.hidden_sizes = (16,)
    config.network.normalize_obs = False
    network = make_network(config.network, make_env_spec(config.env))
    return network, {"params": network.init(jax.random.key(0)), "obs_norm": {}}


def forced_params(network, action):
    """Params whose policy plays `action` (logit bias +50) whatever the board."""
    params = network.init(jax.random.key(0))
    bias = np.zeros(SPEC.num_actions, np.float32)
    bias[action] = 50.0
    params["params"]["policy_head"]["logits"]["bias"] = bias
    params["params"]["policy_head"]["logits"]["kernel"] *= 0.0
    return {"params": params, "obs_norm": {}}


def board_rows(n_envs, acting_player, first=False, done=False):
    """Both rows of n envs: one player to move."""
    env_id = np.repeat(np.arange(n_envs, dtype=np.int32), 2)
    player = np.tile(np.array([0, 1], np.int32), n_envs)
    acting = (player == acting_player) & (not done)
    flag = np.full(2 * n_envs, done)
    return Rows(
        obs={"obs": np.zeros((2 * n_envs, 3, 3, 2), bool)},
        extras={"legal_action_mask": np.ones((2 * n_envs, 9), bool)},
        reward=np.where(flag, np.where(player == 0, 1.0, -1.0), 0.0).astype(np.float32),
        terminated=flag,
        truncated=np.zeros(2 * n_envs, bool),
        env_id=env_id,
        player_id=player,
        acting=acting,
        game_over=flag,
    )


def play_six_turns(config, network, league, only_legal=None):
    """Four TicTacToe envs through an InferenceService, players alternating for six turns (the
    learning policy plays cell 0), then every game ends. only_legal[turn]: the one legal cell.

    Returns the acting player's moves [6, 4] and the unrolls sent to the learner.
    """
    registry = PolicyRegistry()
    registry.publish(9, forced_params(network, 0))
    batches = BatchQueue(slots=1000)
    store = TrajectoryStore(UnrollPool(SPEC, 2), 1, batches)
    matchmaker = Matchmaker(SPEC, league)
    service = InferenceService.from_config(
        config, spec=SPEC, network=network, registry=registry, store=store, matchmaker=matchmaker
    )
    service.start()
    try:
        session = service.open_session(0, 4)
        moves = []
        for turn in range(6):
            rows = board_rows(4, turn % 2)
            if only_legal is not None:
                rows.extras["legal_action_mask"][:] = np.eye(9, dtype=bool)[only_legal[turn]]
            actions, _ = service.submit(session, rows).result(timeout=30)
            moves.append(actions.reshape(4, 2)[:, turn % 2])
        service.submit(session, board_rows(4, 0, done=True)).result(timeout=30)
        service.flush()
    finally:
        service.stop(finished=True)
    unrolls = [
        jax.tree.map(lambda x: x[0], b.unroll()) for b in iter(lambda: batches.next_batch(0), None)
    ]
    return np.array(moves), unrolls


def test_snapshots_play_their_seats_and_are_not_trained_on(tmp_path):
    c, network = tiny_network()
    league = League(
        league_config(sampler="uniform_recent", p_latest=0.0), snapshot_dir=str(tmp_path)
    )
    league.add_snapshot(5, forced_params(network, 4))
    moves, unrolls = play_six_turns(c, network, league)
    assert (moves[0::2] == 0).all(), "player 0 is the learning policy (plays 0)"
    assert (moves[1::2] == 4).all(), "player 1 is snapshot 5 (plays 4)"
    # Only the learner's seats produced unrolls, and every valid step is one of its moves.
    assert unrolls and all(u.action[u.valid].tolist() == [0] * u.valid.sum() for u in unrolls)
    assert all(u.valid.any() for u in unrolls)
    metrics = league.take_metrics()
    assert metrics["league/games_vs_pool"] == 4 and metrics["league/win_rate_vs_pool"] == 1.0
    assert league.payoff.counts(LEARNER, 5) == (4.0, 0.0, 0.0)


def test_bots_play_their_seats_are_not_trained_on_and_report_win_rates():
    """With p_bots = 1 every opponent is the random bot: it plays the only legal cell it is given,
    its steps never reach the learner, and its games do not enter the payoff matrix."""
    c, network = tiny_network()
    league = League(league_config(bots=("random",), p_bots=1.0))
    moves, unrolls = play_six_turns(c, network, league, only_legal=np.arange(6))
    np.testing.assert_array_equal(moves, np.repeat(np.arange(6)[:, None], 4, 1))
    trained = np.concatenate([u.action[u.valid] for u in unrolls])
    assert sorted(trained.tolist()) == [0] * 4 + [2] * 4 + [4] * 4, "the learner's moves only"
    metrics = league.take_metrics()
    assert metrics["league/win_rate_vs_random"] == 1.0 and metrics["league/games_vs_pool"] == 0
    assert league.payoff.players() == []


def test_bots_are_mixed_in_at_their_share_and_checked():
    league = League(league_config(sampler="openai_five", bots=("random", "scripted"), p_bots=0.3))
    league.add_snapshot(10, {"w": np.zeros(1)})
    picks = league.opponents(6000)
    assert abs(np.mean(picks == BOTS["random"].id) - 0.15) < 0.02
    assert abs(np.mean(picks == BOTS["scripted"].id) - 0.15) < 0.02
    assert abs(np.mean(picks == LEARNER) - 0.7 * 0.8) < 0.03
    with pytest.raises(ValueError, match=r"unknown league.bots \['minimax'\]"):
        League(league_config(bots=("minimax",), p_bots=0.5))
    with pytest.raises(ValueError, match=r"p_bots = 0.2 with league.bots = \(\)"):
        League(league_config(p_bots=0.2))
    with pytest.raises(
        ValueError, match="scripted bot plays ConnectFour-v1, connect_four, not TicTacToe-v1"
    ):
        players.make_bot("scripted", SPEC)


def test_opponents_follow_the_sampler():
    league = League(league_config(sampler="openai_five"), seed=0)
    assert (league.opponents(100) == LEARNER).all(), "empty pool: pure self-play"
    for v in (10, 20):
        league.add_snapshot(v, {"w": np.zeros(1)})
    picks = league.opponents(4000)
    assert abs(np.mean(picks == LEARNER) - 0.8) < 0.03
    assert set(np.unique(picks)) == {LEARNER, 10, 20}


def test_league_state_survives_a_checkpoint_round_trip(tmp_path):
    c, network = tiny_network()
    league = League(
        league_config(sampler="openai_five", max_snapshots=2), snapshot_dir=str(tmp_path)
    )
    for v in (10, 20, 30):
        league.add_snapshot(v, forced_params(network, v % 9))
    league.record(20, 1)
    league.record(30, -1)
    state = json.loads(json.dumps(league.state_dict()))  # as stored in checkpoint metadata

    restored = League(
        league_config(sampler="openai_five", max_snapshots=2), snapshot_dir=str(tmp_path)
    )
    restored.load_state_dict(state, forced_params(network, 0))
    assert restored.pool.ids == [20, 30]  # 10 left the pool (max_snapshots=2)
    np.testing.assert_allclose(restored.pool.qualities(), league.pool.qualities())
    assert restored.payoff.counts(LEARNER, 20) == (1.0, 0.0, 0.0)
    assert restored.payoff.counts(LEARNER, 30) == (0.0, 0.0, 1.0)
    for v in (20, 30):
        jax.tree.map(np.testing.assert_array_equal, restored.params(v), league.params(v))
    assert restored.params(10) is None


def test_a_resumed_league_draws_on_where_it_was_and_takes_the_configs_pool_size(tmp_path):
    """Opponent draws continue the saved stream (a restart replayed the first draws), and a
    resume with a smaller league.max_snapshots drops the oldest snapshots and their results."""
    c, network = tiny_network()
    league = League(league_config(sampler="uniform_recent", max_snapshots=4, p_latest=0.0),
                    seed=3, snapshot_dir=str(tmp_path))  # fmt: skip
    for v in (10, 20, 30, 40):
        league.add_snapshot(v, forced_params(network, v % 9))
        league.record(v, 1)
    league.opponents(50)
    state = json.loads(json.dumps(league.state_dict()))
    expected = league.opponents(200)

    same = League(league_config(sampler="uniform_recent", max_snapshots=4, p_latest=0.0),
                  seed=3, snapshot_dir=str(tmp_path))  # fmt: skip
    same.load_state_dict(state, forced_params(network, 0))
    np.testing.assert_array_equal(same.opponents(200), expected)

    smaller = League(league_config(sampler="uniform_recent", max_snapshots=2, p_latest=0.0),
                     seed=3, snapshot_dir=str(tmp_path))  # fmt: skip
    smaller.load_state_dict(state, forced_params(network, 0))
    assert smaller.pool.ids == [30, 40] and smaller.params(10) is None
    assert smaller.payoff.counts(LEARNER, 10) == pytest.approx((0.0, 0.0, 0.0))
    assert smaller.payoff.counts(LEARNER, 40) == pytest.approx((1.0, 0.0, 0.0))
    smaller.add_snapshot(50, forced_params(network, 5))
    assert smaller.pool.ids == [40, 50]


def test_evaluation_reports_win_rates_only_for_the_references_it_just_played():
    """A reference left behind by the rating (here random, once the agent sits at the scripted
    agent's level) must not keep reporting the win rate of an old version."""
    network, params = tiny_connect_four()
    evaluation = Evaluation(
        league_config(eval_games=4, eval_opponents=1, reference_every=0, reference_games=20),
        "ConnectFour-v1",
        network,
    )
    evaluation.setup()
    references = evaluation.evaluator.references
    assert set(references) == {BOTS["random"].id, BOTS["scripted"].id}  # policy ids
    rated = {}
    for version, nearest in enumerate(["random", "scripted"]):
        rating = references[BOTS[nearest].id]
        evaluation.evaluator.rating = trueskill.Rating(mu=rating.mu, sigma=0.5)
        metrics = evaluation.evaluate(version, params)
        rated[nearest] = {k for k in metrics if k.startswith("eval/win_rate_vs_")}
    assert rated == {
        "random": {"eval/win_rate_vs_random"},
        "scripted": {"eval/win_rate_vs_scripted"},
    }


def test_a_reference_plays_the_nearest_references_and_the_weakest_leave_beyond_the_limit(
    tmp_path,
):
    """Rating a new reference against every one already there cost more with each reference
    (the evaluation thread fell behind in long runs) and each kept its params in memory."""
    network, params = tiny_connect_four()
    league = league_config(reference_games=6, reference_opponents=2, max_references=3)
    evaluation = Evaluation(league, "ConnectFour-v1", network, snapshot_dir=str(tmp_path))
    evaluation.setup()
    played = []
    games = evaluation._games

    def spy(agent, opponent, n):  # the real games, recorded
        played.append(({id(a): r for r, a in evaluation.agents.items()}[id(opponent)], n))
        return games(agent, opponent, n)

    evaluation._games = spy
    random, scripted = BOTS["random"].id, BOTS["scripted"].id
    for version in (1, 2, 3):
        played.clear()
        evaluation.add_reference(version, params)
        assert len(played) == 2 and all(n == 6 for _, n in played), played
    assert set(evaluation.evaluator.references) == {random, scripted, 1, 2, 3}

    # Known skills; the learning policy sits at 22: 20 and 30 are nearest, 5 the weakest snapshot.
    skills = {random: 0.0, scripted: 10.0, 1: 5.0, 2: 20.0, 3: 30.0}
    evaluation._replace_references({r: trueskill.Rating(mu, 1.0) for r, mu in skills.items()})
    evaluation.evaluator.rating = trueskill.Rating(mu=22.0, sigma=1.0)
    played.clear()
    evaluation.add_reference(4, params)
    assert sorted(r for r, _ in played) == [2, 3]
    # Four snapshot references, three kept: the weakest snapshot (1) left, the bots stayed.
    references = evaluation.evaluator.references
    assert set(references) == {random, scripted, 2, 3, 4}
    assert set(evaluation.agents) == set(references)

    # A resumed run holds only the references kept.
    resumed = Evaluation(league, "ConnectFour-v1", network, snapshot_dir=str(tmp_path))
    resumed.load_state_dict(json.loads(json.dumps(evaluation.state_dict())), params)
    assert set(resumed.agents) == set(references)


def test_the_payoff_matrix_weighs_results_as_the_config_says(tmp_path):
    _, network = tiny_network()
    params = forced_params(network, 1)
    config = league_config(payoff_decay=0.5, payoff_prior_games=0.0)
    league = League(config, snapshot_dir=str(tmp_path))
    league.add_snapshot(3, params)
    for outcome in (1, 1, -1):
        league.record(3, outcome)
    # By hand: win 1; win 0.5 + 1 = 1.5; loss: wins 0.75, losses 1 -> 0.75 / 1.75.
    assert league.payoff.counts(LEARNER, 3) == pytest.approx((0.75, 0.0, 1.0))
    assert league.payoff.win_rate(LEARNER, 3) == pytest.approx(0.75 / 1.75)
    # A resumed run keeps its counts and weighs them as its own config says.
    resumed = League(league_config(payoff_prior_games=2.0), snapshot_dir=str(tmp_path))
    resumed.load_state_dict(league.state_dict(), params)
    assert resumed.payoff.decay == 1.0
    assert resumed.payoff.counts(LEARNER, 3) == pytest.approx((0.75, 0.0, 1.0))
    assert resumed.payoff.win_rate(LEARNER, 3) == pytest.approx((0.75 + 1.0) / 3.75)
    # The defaults: every result at full weight, one pseudo-game at 0.5.
    default = League(league_config())
    default.add_snapshot(3, params)
    default.record(3, 1)
    assert default.payoff.win_rate(LEARNER, 3) == pytest.approx(0.75)
