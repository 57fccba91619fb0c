"""Teams: reward shaping against hand-computed examples, game results through agents that die and
appear, per-env opponents for team seats, and the shaped rewards the trajectory store learns."""

import numpy as np
import pytest

from seedlike.algos.shaping import team_rewards, time_decay
from seedlike.config import section
from seedlike.league.players import LEARNER, UNSEEN
from seedlike.policy import PolicyOutput
from seedlike.server.episodes import Episodes
from seedlike.server.matchmaking import Matchmaker
from seedlike.server.recorder import Recorder
from seedlike.server.trajectory_store import BatchQueue, StepRecord, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.teams import GameTracker, Teams
from seedlike.types import ArraySpec, EnvSpec, Rows

# One env, teams (a, b) vs (c, d); raw rewards a=1, b=0, c=2, d=0.
R = np.array([1.0, 0.0, 2.0, 0.0])
ENV = np.zeros(4, np.int64)
TEAM = np.array([0, 0, 1, 1])


def test_team_spirit_blends_with_the_team_mean():
    # tau = 0.5: team means 0.5 and 1.0 -> a: 0.5*1 + 0.5*0.5 = 0.75, b: 0.25, c: 1.5, d: 0.5.
    got = team_rewards(R, ENV, TEAM, 2, 0.5, zero_sum=False)
    np.testing.assert_allclose(got, [0.75, 0.25, 1.5, 0.5])
    np.testing.assert_allclose(team_rewards(R, ENV, TEAM, 2, 0.0, False), R)
    np.testing.assert_allclose(team_rewards(R, ENV, TEAM, 2, 1.0, False), [0.5, 0.5, 1, 1])


def test_zero_sum_subtracts_the_opponents_mean_per_env():
    # tau = 0.5 then zero-sum: team 0 loses team 1's mean (1.0), team 1 loses 0.5.
    got = team_rewards(R, ENV, TEAM, 2, 0.5, zero_sum=True)
    np.testing.assert_allclose(got, [-0.25, -0.75, 1.0, 0.0])
    assert got.sum() == pytest.approx(0.0)  # equal teams: zero-sum
    # A second env is shaped on its own; an env where only one team reports subtracts nothing.
    reward = np.concatenate([R, [3.0, 1.0]])
    env = np.array([7, 7, 7, 7, 9, 9])
    team = np.array([0, 0, 1, 1, 0, 0])
    got = team_rewards(reward, env, team, 2, 0.0, zero_sum=True)
    np.testing.assert_allclose(got, [0.0, -1.0, 1.5, -0.5, 3.0, 1.0])


def test_time_decay_follows_openai_fives_schedule():
    # 0.6 per horizon: t = 0, horizon/2, horizon, 2 horizons.
    got = time_decay(np.ones(4), np.array([0, 50, 100, 200]), 0.6, 100)
    np.testing.assert_allclose(got, [1.0, 0.6**0.5, 0.6, 0.36], rtol=1e-6)
    np.testing.assert_allclose(time_decay(np.ones(2), np.array([0, 900]), 0.6, 0), [1, 1])


def test_teams_from_config_and_spirit_schedule():
    spec = EnvSpec("x", {"obs": ArraySpec(np.float32, (2,))}, 3, num_players=5)
    config = section("teams", sizes=(2, 3), spirit=0.2, spirit_final=1.0, spirit_updates=100)
    teams = Teams.from_config(config, spec)
    np.testing.assert_array_equal(teams.team_of, [0, 0, 1, 1, 1])
    assert teams.num_teams == 2 and teams.shapes
    assert [teams.spirit_at(v) for v in (0, 50, 100, 500)] == pytest.approx([0.2, 0.6, 1, 1])
    with pytest.raises(ValueError, match=r"covers 4 agents; x has 5"):
        Teams.from_config(section("teams", sizes=(2, 2)), spec)
    one_side = Teams.from_config(section("teams"), spec)
    np.testing.assert_array_equal(one_side.team_of, Teams.of_env(spec).team_of)
    assert one_side.num_teams == 1 and not one_side.shapes


def test_shape_uses_seats_of_several_envs_and_each_rows_time():
    teams = Teams(np.array([0, 0, 1, 1]), spirit=1.0, zero_sum=True, decay=0.5, decay_horizon=10)
    # Seats of env slots 3 and 8 (4 players each); the second env's rows are 10 steps in.
    seat = np.array([12, 13, 14, 15, 32, 34])
    got = teams.shape(
        np.array([1.0, 0.0, 2.0, 0.0, 4.0, 0.0]), seat, np.array([0] * 4 + [10] * 2), 0
    )
    # env 3: team means 0.5 / 1.0 -> -0.5, -0.5, 0.5, 0.5; env 8: 4 - 0 = 4 and -4, halved.
    np.testing.assert_allclose(got, [-0.5, -0.5, 0.5, 0.5, 2.0, -2.0])


def test_game_tracker_waits_for_every_seat_and_counts_survivors():
    teams = Teams(np.array([0, 0, 1, 1]), result="survivors")
    tracker = GameTracker(teams, UNSEEN)
    seats = np.arange(4) + 8  # env slot 2
    none = np.zeros(0, np.int64)
    assert tracker.update(seats, np.array([LEARNER, LEARNER, 5, 5]), none, none) == []
    # Team 0 loses an agent (seat 8); the game goes on.
    assert tracker.update(none, none, np.array([8]), np.array([-1.0])) == []
    # It reappears: a new episode joins the same game.
    assert tracker.update(np.array([8]), np.array([LEARNER]), none, none) == []
    # Blue loses one, then the game ends for everyone else together: 2 red against 1 blue alive.
    assert tracker.update(none, none, np.array([10]), np.array([5.0])) == []
    results = tracker.update(none, none, np.array([8, 9, 11]), np.array([0.0, 0.0, 0.0]))
    assert results == [(5, 1, 8)]  # against snapshot 5, a win (the game of seats 8-11)

    by_return = GameTracker(Teams(np.array([0, 0, 1, 1]), result="return"), UNSEEN)
    by_return.update(seats, np.array([LEARNER, LEARNER, -2, -2]), none, none)
    # Team 1 has the larger summed return (5 > -1) although team 0 has more survivors.
    assert by_return.update(none, none, np.array([10]), np.array([5.0])) == []
    ended = by_return.update(none, none, np.array([8, 9, 11]), np.array([-1.0, 0, 0]))
    assert ended == [(-2, -1, 8)]


def test_game_tracker_forgets_games_of_closed_sessions():
    tracker = GameTracker(Teams(np.array([0, 1])), UNSEEN)
    none = np.zeros(0, np.int64)
    tracker.update(np.array([0, 1]), np.array([LEARNER, 3]), none, none)
    tracker.forget(np.array([0, 1]))
    # A new session's game on the reused slot starts afresh and ends when its own seats end.
    tracker.update(np.array([0, 1]), np.array([LEARNER, 4]), none, none)
    assert tracker.update(none, none, np.array([0, 1]), np.array([1.0, -1.0])) == [(4, 1, 0)]


def test_a_game_without_a_rival_seat_is_against_an_unseen_policy():
    """A shared game (league.shared_games): the actor sends only team 0's seat here, so the game
    ends with that seat, against UNSEEN, and its result is that seat's return alone; a slot that
    held a normal game before does not keep its old opponent."""
    tracker = GameTracker(Teams(np.array([0, 1])), UNSEEN)
    none = np.zeros(0, np.int64)
    tracker.update(np.array([2, 3]), np.array([LEARNER, 7]), none, none)
    assert tracker.update(none, none, np.array([2, 3]), np.array([-1.0, 1.0])) == [(7, -1, 2)]
    for ret, outcome in ((1.0, 1), (-1.0, -1), (0.0, 0)):
        assert tracker.update(np.array([2]), np.array([LEARNER]), none, none) == []
        assert tracker.update(none, none, np.array([2]), np.array([ret])) == [(UNSEEN, outcome, 2)]
    # A rival that starts in the same batch makes it an ordinary game again.
    tracker.update(np.array([2, 3]), np.array([LEARNER, 9]), none, none)
    assert tracker.update(none, none, np.array([2, 3]), np.array([0.0, 0.0])) == [(9, 0, 2)]


class _League:
    """The league's interface to the matchmaker: hands out distinct opponent ids, counts results."""

    bot_names = ()

    def __init__(self):
        self.next_id, self.results = 100, []

    def opponents(self, n):
        out = np.arange(self.next_id, self.next_id + n)
        self.next_id += n
        return out

    def record(self, opponent, outcome):
        self.results.append((opponent, outcome))


def test_matchmaker_gives_each_env_one_opponent_for_its_whole_team():
    spec = EnvSpec("x", {"obs": ArraySpec(np.float32, (2,))}, 3, num_players=4)
    league = _League()
    mm = Matchmaker(spec, league, teams=Teams(np.array([0, 0, 1, 1])))
    # Env slots 0 and 1 start together: red seats get the learner; each env's blue pair one draw.
    seats = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    policy, changed = mm.draw_players(seats, version=3)
    assert changed.all()
    np.testing.assert_array_equal(policy[[0, 1, 4, 5]], LEARNER)
    assert policy[2] == policy[3] and policy[6] == policy[7] and policy[2] != policy[6]

    # The recorder's report: every seat ends in one batch -> one result per env.
    step = StepRecord.of(
        seats, _rows(np.zeros(8), done=True), np.ones(8, bool), {}, {}, np.zeros(8, bool),
        policy, (), _output(8), 3,
    )  # fmt: skip
    mm.report(step._replace(first=np.ones(8, bool)), Episodes.empty())
    ended = Episodes(
        seats, np.array([1.0, 1, 0, 0, 0, 0, 1, 1]), np.ones(8, np.int64), policy,
        np.zeros(8, np.int64),
    )  # fmt: skip
    mm.report(step, ended)
    assert sorted(league.results) == sorted([(int(policy[2]), 1), (int(policy[6]), -1)])


def test_store_learns_shaped_rewards_and_reports_raw_returns():
    spec = EnvSpec("x", {"obs": ArraySpec(np.float32, (1,))}, 2, num_players=2)
    teams = Teams(np.array([0, 1]), zero_sum=True)  # two agents, one per team
    batches = BatchQueue(2)  # room for the batch and the next one the store reserves
    pool = UnrollPool(spec, horizon=2)
    recorder = Recorder(TrajectoryStore(pool, batch_unrolls=2, batches=batches), teams)
    seats = np.array([0, 1])
    pool.open(seats)
    recorder.open(seats, 0)

    def record(reward, done, first):
        n, ran = 2, np.ones(2, bool)
        return recorder.record_batch(
            StepRecord.of(
                seats, _rows(reward, done), ran, {"obs": np.zeros((n, 1), np.float32)}, {},
                np.full(n, first), np.full(n, LEARNER), (), _output(n), 0,
                pool.place(seats, ran),
            )
        )  # fmt: skip

    record([0, 0], False, True)
    record([3, 1], False, False)
    episodes = record([1, 0], True, False)
    batch = batches.next_batch(timeout=1).unroll()
    # Zero-sum of (3, 1) is (2, -2); of (1, 0), (1, -1).
    np.testing.assert_allclose(batch.reward, [[2, 1], [-2, -1]])
    np.testing.assert_allclose(episodes.episode_return, [4.0, 1.0])  # raw


def _rows(reward, done: bool) -> Rows:
    """Per-row fields of n rows that all end their episode (done) or all act."""
    n = len(reward)
    flag = np.full(n, done)
    return Rows(
        {}, {}, np.asarray(reward, np.float32), flag, np.zeros(n, bool),
        np.arange(n, dtype=np.int32), np.zeros(n, np.int32), ~flag, flag,
    )  # fmt: skip


def _output(n: int) -> PolicyOutput:
    return PolicyOutput(np.zeros(n, np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32), ())
