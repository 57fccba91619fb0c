"""League: snapshot pool, payoff matrix, opponent samplers and TrueSkill evaluation."""

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from seedlike.league import (
    BOTS,
    LEARNER,
    OpenAIFiveSampler,
    OpponentPool,
    PayoffMatrix,
    PFSPSampler,
    TrueSkillEvaluator,
    make_env,
    make_sampler,
    pick_opponents,
    rate_references,
    win_probability,
)
from seedlike.league.samplers import sample

RANDOM, SCRIPTED = BOTS["random"].id, BOTS["scripted"].id
WEAK, STRONG = 100, 200  # snapshots as references


def pool_of(*versions, **kwargs):
    pool = OpponentPool(**kwargs)
    for v in versions:
        pool.add(v, created=1000.0 + v)
    return pool


def json_round_trip(state):
    return json.loads(json.dumps(state))


# Pool.


def test_new_snapshots_enter_at_max_quality_and_oldest_are_dropped():
    pool = OpponentPool(max_size=3)
    assert pool.add(10).quality == 0.0  # empty pool: 0
    pool.add(20)
    pool.set_quality(10, -0.5)
    pool.set_quality(20, 0.3)
    assert pool.add(30).quality == 0.3
    pool.set_quality(30, -0.2)
    assert pool.add(40).quality == 0.3  # the max among 10, 20, 30
    assert pool.ids == [20, 30, 40]  # 10, the oldest, dropped at max_size 3
    np.testing.assert_allclose(pool.qualities(), [0.3, -0.2, 0.3])
    with pytest.raises(ValueError, match="already"):
        pool.add(40)


def test_pool_state_dict_round_trip():
    pool = pool_of(5, 7, 9, max_size=8)
    pool.set_quality(7, -0.125)
    restored = OpponentPool.from_state_dict(json_round_trip(pool.state_dict()))
    assert restored.state_dict() == pool.state_dict()
    assert restored.ids == [5, 7, 9] and restored.max_size == 8
    assert restored[7].quality == -0.125 and restored[9].created == 1009.0
    assert restored.add(11).quality == 0.0  # max of (0, -0.125, 0)


# Payoff matrix.


def test_payoff_records_both_sides_and_smooths_win_rates():
    payoff = PayoffMatrix(prior=0.5, prior_games=1.0)
    assert payoff.win_rate(LEARNER, 3) == 0.5  # no games: the prior
    for outcome in (1, 1, 0, -1):
        payoff.record(LEARNER, np.int64(3), outcome)  # numpy ids are the same player as ints
    assert payoff.counts(LEARNER, 3) == (2.0, 1.0, 1.0)
    assert payoff.counts(3, LEARNER) == (1.0, 1.0, 2.0)
    # (wins + draws / 2 + prior * prior_games) / (games + prior_games)
    assert payoff.win_rate(LEARNER, 3) == pytest.approx((2 + 0.5 + 0.5) / 5)
    assert payoff.win_rate(3, LEARNER) == pytest.approx((1 + 0.5 + 0.5) / 5)
    raw = PayoffMatrix(prior_games=0.0)
    raw.record(RANDOM, LEARNER, -1)
    assert raw.win_rate(LEARNER, RANDOM) == pytest.approx(1.0)
    assert raw.win_rate(RANDOM, LEARNER) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="outcome"):
        raw.record(LEARNER, 3, 2)


def test_payoff_decay_and_matrix():
    payoff = PayoffMatrix(prior_games=0.0, decay=0.5)
    payoff.record(LEARNER, 1, 1)
    payoff.record(LEARNER, 1, -1)  # the earlier win now weighs 0.5
    assert payoff.counts(LEARNER, 1) == (0.5, 0.0, 1.0)
    assert payoff.win_rate(LEARNER, 1) == pytest.approx(1 / 3)
    payoff.record(1, 2, 0)
    np.testing.assert_allclose(
        payoff.matrix([LEARNER, 1, 2]),
        [[0.5, 1 / 3, 0.5], [2 / 3, 0.5, 0.5], [0.5, 0.5, 0.5]],
    )


def test_payoff_state_dict_round_trip_keeps_policy_ids_and_reads_older_names():
    payoff = PayoffMatrix(prior=0.4, prior_games=2.0, decay=0.9)
    payoff.record(LEARNER, 7, 1)
    payoff.record(LEARNER, RANDOM, 1)
    payoff.record(np.int64(7), RANDOM, 0)  # numpy ids from the seat arrays are the same ids
    restored = PayoffMatrix.from_state_dict(json_round_trip(payoff.state_dict()))
    assert restored.state_dict() == payoff.state_dict()
    assert restored.players() == [LEARNER, 7, RANDOM]
    assert restored.win_rate(LEARNER, 7) == payoff.win_rate(LEARNER, 7)
    with pytest.raises(ValueError, match="not a policy id"):
        restored.win_rate(LEARNER, "7")  # neither snapshot 7 ("v7") nor a bot
    restored.remove(7)
    assert restored.games(LEARNER, 7) == 0 and restored.games(LEARNER, RANDOM) == 1
    # Older checkpoints named the learner "latest" and bots by name.
    both = [["latest", "random", 1.0, 0.0, 0.0], ["random", "latest", 0.0, 0.0, 1.0]]
    old = {**payoff.state_dict(), "counts": both}
    assert PayoffMatrix.from_state_dict(old).players() == [LEARNER, RANDOM]


# Samplers.


@pytest.mark.parametrize("name", ["latest", "openai_five", "pfsp", "uniform_recent"])
def test_every_sampler_plays_latest_when_the_pool_is_empty(name):
    sampler = make_sampler(name, pool=OpponentPool(), payoff=PayoffMatrix())
    rng = np.random.default_rng(0)
    assert set(sample(sampler, rng, 50).tolist()) == {LEARNER}
    assert sampler.probabilities() == {LEARNER: 1.0}
    sampler.update(LEARNER, 1)  # a self-play result changes nothing


def test_make_sampler_rejects_unknown_names_and_options():
    with pytest.raises(ValueError, match="latest.*openai_five.*pfsp.*uniform_recent"):
        make_sampler("elo", pool=OpponentPool())
    with pytest.raises(TypeError):
        make_sampler("uniform_recent", pool=OpponentPool(), K=3)
    with pytest.raises(ValueError, match="weighting"):
        make_sampler("pfsp", pool=OpponentPool(), payoff=PayoffMatrix(), weighting="easy")


def test_openai_five_quality_update_by_hand():
    pool = pool_of(100, 200, 300)
    sampler = make_sampler("openai_five", pool=pool)
    probs = sampler.probabilities()
    assert probs[LEARNER] == 0.8
    np.testing.assert_allclose([probs[i] for i in (100, 200, 300)], [0.2 / 3] * 3)

    # q = [0, 0, 0] -> p = 1/3 each; the learner beats snapshot 100:
    # q_0 = 0 - 0.01 / (N p_0) = -0.01 / (3 * 1/3) = -0.01.
    sampler.update(100, 1)
    np.testing.assert_allclose(pool.qualities(), [-0.01, 0.0, 0.0])
    p0 = math.exp(-0.01) / (math.exp(-0.01) + 2)
    p_other = 1.0 / (math.exp(-0.01) + 2)
    np.testing.assert_allclose(sampler.past_probabilities(), [p0, p_other, p_other])
    # Losses and draws against a past opponent change nothing (App. N).
    sampler.update(200, -1)
    sampler.update(200, 0)
    np.testing.assert_allclose(pool.qualities(), [-0.01, 0.0, 0.0])
    # A second win against 100 divides by its now smaller p_0.
    sampler.update(100, 1)
    q0 = -0.01 - 0.01 / (3 * p0)
    np.testing.assert_allclose(pool.qualities(), [q0, 0.0, 0.0])
    assert p0 == pytest.approx(0.331115, abs=1e-6) and q0 == pytest.approx(-0.0200670, abs=1e-7)
    # A new snapshot enters at the max quality, 0, and N becomes 4.
    pool.add(400)
    sampler.update(400, 1)
    p3 = 1.0 / (math.exp(q0) + 3)
    np.testing.assert_allclose(pool.qualities(), [q0, 0.0, 0.0, -0.01 / (4 * p3)])
    sampler.update(999, 1)  # not (or no longer) in the pool: ignored
    assert len(pool) == 4


def test_openai_five_wins_reported_at_their_draw_probability_decrease_linearly():
    """300 wins of one period against snapshot 1 of 2 (drawn at p = 1/2 the whole period, as on
    the device): q_1 = -300 * eta / (2 * 1/2) = -3.0 exactly. At the present p each win divides
    by a smaller p_1: q_1 falls to -inf (p_1 underflows) within 200 such wins, where a SEED run
    would have drawn snapshot 1 less and less."""
    pool = pool_of(1, 2)
    sampler = OpenAIFiveSampler(pool, eta=0.01)
    for _ in range(300):
        sampler.update(1, 1, drawn=0.5)
    np.testing.assert_allclose(pool.qualities(), [-3.0, 0.0])
    runaway = pool_of(1, 2)
    sampler = OpenAIFiveSampler(runaway, eta=0.01)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(300):
            sampler.update(1, 1)
    assert not np.isfinite(runaway.qualities()[0])


def test_openai_five_sampling_frequencies():
    pool = pool_of(1, 2)
    pool.set_quality(1, math.log(3.0))  # softmax -> p = [3/4, 1/4] of the past 20%
    sampler = OpenAIFiveSampler(pool)
    rng = np.random.default_rng(0)
    draws = sample(sampler, rng, 20000).tolist()
    freq = {k: draws.count(k) / len(draws) for k in (LEARNER, 1, 2)}
    assert freq[LEARNER] == pytest.approx(0.8, abs=0.01)
    assert freq[1] == pytest.approx(0.15, abs=0.01)
    assert freq[2] == pytest.approx(0.05, abs=0.01)
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    np.testing.assert_array_equal(sample(sampler, rng_a, 100), sample(sampler, rng_b, 100))


def test_pfsp_weights_from_a_payoff_matrix():
    pool = pool_of(10, 20, 30)
    payoff = PayoffMatrix(prior_games=0.0)
    for outcome in (1, 1, 1, -1):  # x_10 = 0.75
        payoff.record(LEARNER, 10, outcome)
    for outcome in (1, 0, -1, -1):  # x_20 = (1 + 0.5) / 4 = 0.375
        payoff.record(LEARNER, 20, outcome)
    # 30 never played: x_30 = 0.5
    hard = PFSPSampler(pool, payoff)  # f(x) = (1 - x)^2
    np.testing.assert_allclose(hard.weights(), [0.25**2, 0.625**2, 0.5**2])
    np.testing.assert_allclose(hard.past_probabilities(), [4 / 45, 25 / 45, 16 / 45])
    cubic = PFSPSampler(pool, payoff, p=3.0)
    np.testing.assert_allclose(cubic.weights(), [0.25**3, 0.625**3, 0.5**3])
    variance = make_sampler("pfsp", pool=pool, payoff=payoff, weighting="variance")
    np.testing.assert_allclose(variance.weights(), [0.1875, 0.234375, 0.25])
    np.testing.assert_allclose(variance.past_probabilities(), [12 / 43, 15 / 43, 16 / 43])
    mixed = PFSPSampler(pool, payoff, p_latest=0.35)
    probs = mixed.probabilities()
    assert probs[LEARNER] == 0.35 and probs[20] == pytest.approx(0.65 * 25 / 45)
    rng = np.random.default_rng(1)
    draws = sample(hard, rng, 9000).tolist()
    assert draws.count(20) / 9000 == pytest.approx(25 / 45, abs=0.02)


def test_pfsp_falls_back_to_uniform_when_the_learner_beats_everyone():
    pool = pool_of(1, 2)
    payoff = PayoffMatrix(prior_games=0.0)
    payoff.record(LEARNER, 1, 1)
    payoff.record(LEARNER, 2, 1)
    np.testing.assert_allclose(PFSPSampler(pool, payoff).past_probabilities(), [0.5, 0.5])


def test_uniform_recent_draws_only_from_the_last_k():
    pool = pool_of(*range(0, 1000, 100))
    sampler = make_sampler("uniform_recent", pool=pool, k=3)
    np.testing.assert_allclose(sampler.past_probabilities(), [0.0] * 7 + [1 / 3] * 3)
    rng = np.random.default_rng(0)
    draws = sample(sampler, rng, 600).tolist()
    assert set(draws) == {700, 800, 900}
    for v in (700, 800, 900):
        assert draws.count(v) / 600 == pytest.approx(1 / 3, abs=0.06)
    small = make_sampler("uniform_recent", pool=pool_of(1, 2), k=50, p_latest=0.5)
    assert small.probabilities() == {LEARNER: 0.5, 1: 0.25, 2: 0.25}


def test_latest_sampler_is_pure_self_play():
    sampler = make_sampler("latest", pool=pool_of(1, 2, 3))
    rng = np.random.default_rng(0)
    assert set(sample(sampler, rng, 20).tolist()) == {LEARNER}


# TrueSkill.


def test_trueskill_environment_is_openai_fives():
    env = make_env()
    assert env.sigma == pytest.approx(25 / 3) and env.beta == pytest.approx(25 / 6)
    assert env.tau == 0.0 and env.draw_probability == 0.02


def reference_update(agent, ref, agent_won):
    """TrueSkill 1-vs-1 update of the agent's rating, written out (Herbrich et al. 2007)."""
    normal = NormalDist()
    beta, draw_probability = 25 / 6, 0.02
    c = math.sqrt(2 * beta**2 + agent[1] ** 2 + ref[1] ** 2)
    epsilon = normal.inv_cdf((draw_probability + 1) / 2) * math.sqrt(2) * beta / c
    sign = 1.0 if agent_won else -1.0
    t = sign * (agent[0] - ref[0]) / c
    v = normal.pdf(t - epsilon) / normal.cdf(t - epsilon)
    w = v * (v + t - epsilon)
    mu = agent[0] + sign * agent[1] ** 2 / c * v
    sigma = agent[1] * math.sqrt(1 - agent[1] ** 2 / c**2 * w)
    return mu, sigma


def test_agent_update_matches_the_trueskill_equations():
    env = make_env()
    references = {RANDOM: env.create_rating(0.0, 2.0), SCRIPTED: env.create_rating(5.0, 1.5)}
    evaluator = TrueSkillEvaluator(references, mu=3.0)
    expected = reference_update((3.0, 25 / 3), (5.0, 1.5), agent_won=True)
    r = evaluator.update(SCRIPTED, 1)
    assert (r.mu, r.sigma) == pytest.approx(expected, rel=1e-6)
    assert r.mu == pytest.approx(9.2941, abs=1e-4)  # an upset: a large step up
    expected = reference_update(expected, (0.0, 2.0), agent_won=False)
    r = evaluator.update(RANDOM, -1)
    assert (r.mu, r.sigma) == pytest.approx(expected, rel=1e-6)


def test_dominated_agent_falls_dominating_agent_rises_references_stay_fixed():
    env = make_env()
    references = {
        RANDOM: env.create_rating(0.0, 1.0),
        WEAK: env.create_rating(10.0, 1.0),
        STRONG: env.create_rating(20.0, 1.0),
    }
    before = {n: (r.mu, r.sigma) for n, r in references.items()}
    loser, winner = TrueSkillEvaluator(references, mu=10.0), TrueSkillEvaluator(references, mu=10.0)
    loser_mus, winner_mus = [], []
    for game in range(30):
        ref = (RANDOM, WEAK, STRONG)[game % 3]
        loser_mus.append(loser.update(ref, -1).mu)
        winner_mus.append(winner.update(ref, 1).mu)
    assert np.all(np.diff(loser_mus) < 0) and loser.mu < 0.0  # below the random agent
    assert np.all(np.diff(winner_mus) > 0) and winner.mu > 20.0  # above the strongest
    assert loser.sigma < 25 / 3 and winner.sigma < 25 / 3 and loser.games == 30
    for evaluator in (loser, winner):
        assert {n: (r.mu, r.sigma) for n, r in evaluator.references.items()} == before
    assert {n: (r.mu, r.sigma) for n, r in references.items()} == before
    assert loser.metrics() == {"trueskill_mu": loser.mu, "trueskill_sigma": loser.sigma}
    loser.next_agent()  # App. J: the next version starts at this mu with the prior sigma
    assert loser.mu == loser_mus[-1] and loser.sigma == pytest.approx(25 / 3) and loser.games == 0


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_rate_references_anchors_random_at_zero_and_orders_by_strength():
    results = {
        (WEAK, RANDOM): [1] * 45 + [-1] * 5,
        (STRONG, WEAK): [1] * 40 + [0] * 2 + [-1] * 8,
        (RANDOM, STRONG): [-1] * 50,
    }
    ratings = rate_references(results, anchor=RANDOM)
    assert list(ratings) == [WEAK, RANDOM, STRONG]
    assert ratings[RANDOM].mu == pytest.approx(0.0, abs=1e-12)
    assert 0.0 < ratings[WEAK].mu < ratings[STRONG].mu
    # ~90% and ~80% win rates are several beta (25/6) apart.
    assert ratings[WEAK].mu > 4.0 and ratings[STRONG].mu - ratings[WEAK].mu > 3.0
    assert all(r.sigma < 25 / 3 for r in ratings.values())
    again = rate_references(results, anchor=RANDOM)
    assert {n: (r.mu, r.sigma) for n, r in again.items()} == {
        n: (r.mu, r.sigma) for n, r in ratings.items()
    }
    assert win_probability(ratings[STRONG], ratings[RANDOM]) > 0.9
    shifted = rate_references(results, anchor=WEAK)
    assert shifted[WEAK].mu == pytest.approx(0.0, abs=1e-12)
    assert shifted[STRONG].mu - shifted[RANDOM].mu == pytest.approx(
        ratings[STRONG].mu - ratings[RANDOM].mu
    )
    with pytest.raises(ValueError, match="anchor"):
        rate_references(results, anchor=SCRIPTED)


def test_pick_opponents_of_nearby_skill():
    env = make_env()
    ratings = [(RANDOM, 0), (SCRIPTED, 10), (WEAK, 20), (STRONG, 30)]
    references = {n: env.create_rating(mu, 1.0) for n, mu in ratings}
    assert pick_opponents(env.create_rating(18.0), references, 2) == [WEAK, SCRIPTED]
    assert pick_opponents(env.create_rating(26.0), references, 1) == [STRONG]
    assert TrueSkillEvaluator(references, mu=-3.0).pick_opponents(3) == [RANDOM, SCRIPTED, WEAK]


def test_evaluator_state_dict_round_trip():
    env = make_env()
    evaluator = TrueSkillEvaluator(
        {RANDOM: env.create_rating(0.0, 1.0), 40: env.create_rating(9.0)}
    )
    evaluator.update(40, 0)
    evaluator.update(RANDOM, 1)
    restored = TrueSkillEvaluator.from_state_dict(json_round_trip(evaluator.state_dict()))
    assert restored.state_dict() == evaluator.state_dict()
    assert (restored.mu, restored.sigma, restored.games) == (evaluator.mu, evaluator.sigma, 2)
    with pytest.raises(KeyError, match="not a reference"):
        restored.update(41, 1)
    # Older league states named the references ("random", "v40").
    old = {**evaluator.state_dict(), "references": [["random", 0.0, 1.0], ["v40", 9.0, 8.0]]}
    assert list(TrueSkillEvaluator.from_state_dict(old).references) == [RANDOM, 40]
    a, b = restored.update(40, 1), evaluator.update(40, 1)
    assert (a.mu, a.sigma) == (b.mu, b.sigma)
