"""MazeBase's threshold curriculum inside one job: the rule, the server's per-level bookkeeping, the
level probabilities on the wire, and actors that move between levels at episode ends."""

import dataclasses
import os

import jax
import numpy as np
import pytest

from networks import make_network
from seedlike.config import ConfigError, base_config, env_spec, validate
from seedlike.envs import _level_config, make_env_spec
from seedlike.envs.envpool_env import EnvpoolAdapter
from seedlike.envs.levels import LevelsAdapter
from seedlike.policy import PolicyRegistry
from seedlike.rpc import client, codec
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.rpc.listen import listen
from seedlike.server.curriculum import Curriculum, threshold_rule, uniform_up_to
from seedlike.server.inference import InferenceService
from seedlike.server.matchmaking import Matchmaker
from seedlike.types import LEVEL, ArraySpec, EnvSpec, Rows, take_rows
from tests.procs import ROOT, Processes, metrics


def test_threshold_rule_by_hand():
    # T_l = 0.3, T_u = 0.8, levels 0..3
    assert threshold_rule(0, 0.81, 0.3, 0.8, 3) == 1
    assert threshold_rule(3, 0.99, 0.3, 0.8, 3) == 3  # the top stays the top
    assert threshold_rule(2, 0.8, 0.3, 0.8, 3) == 2  # inside [T_l, T_u]: stays
    assert threshold_rule(2, 0.3, 0.3, 0.8, 3) == 2
    assert threshold_rule(2, 0.29, 0.3, 0.8, 3) == 1
    assert threshold_rule(0, 0.0, 0.3, 0.8, 3) == 0  # the easiest level stays in the range
    np.testing.assert_allclose(uniform_up_to(1, 4), [0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(uniform_up_to(3, 4), [0.25] * 4)


def test_the_bound_moves_once_a_window_of_episodes_at_levels_up_to_it_has_ended():
    c = Curriculum(3, lower=0.3, upper=0.8, window=10, full_range_steps=1000)
    assert c.probs()[0] == 0 and list(c.probs()[1]) == [1.0, 0.0, 0.0]
    c.report(np.zeros(9, int), np.ones(9, bool))  # 9 of 10: no decision yet
    c.report(np.array([2, 2]), np.array([False, False]))  # above the bound: not counted
    assert c.bound == 0
    c.report(np.array([0]), np.array([True]))  # 10 of 10 successes
    assert c.bound == 1 and c.probs()[0] == 1 and list(c.probs()[1]) == [0.5, 0.5, 0.0]
    c.report(np.array([0, 1] * 5), np.array([True, False] * 5))  # 0.5: inside, stays
    assert c.bound == 1 and c.probs()[0] == 1
    c.report(np.array([1] * 10), np.zeros(10, bool))  # 0.0 < T_l: back down
    assert c.bound == 0 and c.probs()[0] == 2
    m = c.take_metrics()
    assert m["curriculum/bound"] == 0 and m["curriculum/full_range"] == 0
    assert m["curriculum/success_0"] == 1.0  # 9 + 1 + 5 episodes, all successes
    assert m["curriculum/success_1"] == 0.0  # 5 + 10
    assert m["curriculum/success_2"] == 0.0
    shares = [m[f"curriculum/share_{i}"] for i in range(3)]
    assert shares == pytest.approx([15 / 32, 15 / 32, 2 / 32])
    assert c.take_metrics()["curriculum/success_0"] is None  # per interval
    c.progress(999)
    assert c.probs()[0] == 2
    c.progress(1000)  # the last part of training: every level
    assert c.probs()[0] == 3 and list(c.probs()[1]) == pytest.approx([1 / 3] * 3)
    assert c.take_metrics()["curriculum/full_range"] == 1
    restored = Curriculum(3, 0.3, 0.8, 10)
    restored.load_state_dict({**c.state_dict(), "bound": 2})
    assert restored.bound == 2 and list(restored.probs()[1]) == pytest.approx([1 / 3] * 3)


def test_measured_at_the_bound_only_the_hardest_level_in_play_moves_it():
    c = Curriculum(3, lower=0.3, upper=0.8, window=4, measure="bound")
    c.report(np.zeros(4, int), np.ones(4, bool))
    assert c.bound == 1
    c.report(np.zeros(10, int), np.ones(10, bool))  # level 0 no longer counts
    assert c.bound == 1
    c.report(np.array([1, 1, 1, 1]), np.zeros(4, bool))
    assert c.bound == 0
    with pytest.raises(ValueError, match="curriculum.measure='top' is not one of"):
        Curriculum(3, 0.3, 0.8, 4, measure="top")


def cartpole_levels(num_envs=3):
    c = base_config()
    c.env.name, c.env.num_envs = "CartPole-v1", num_envs
    c.env.levels = ("CartPole-v0", "CartPole-v1")  # the same spaces; 200 and 500 steps
    return c


def test_slots_move_between_levels_at_episode_ends_and_each_env_runs_on_undisturbed():
    """Every (level, slot) env sees exactly the actions of its slot's episodes on that level, so
    its rows equal those of a separate env with the same seed stepped with the same actions."""
    c = cartpole_levels()
    spec = make_env_spec(c.env)
    assert spec.extras[LEVEL] == ArraySpec(np.int32, ())
    one = dataclasses.replace(spec, extras={})
    made = {}

    def make(level, slot, seed):
        made[(level, slot)] = seed
        return EnvpoolAdapter(_level_config(c.env, c.env.levels[level], 1), one, seed)

    env = LevelsAdapter(make, 2, 3, seed=4)
    env.set_level_probs([0.5, 0.5])
    env.reset()
    refs = {}

    def ref(key):
        if key not in refs:
            refs[key] = EnvpoolAdapter(
                _level_config(c.env, c.env.levels[key[0]], 1), one, made[key]
            )
            refs[key].reset()
        return refs[key]

    rng = np.random.default_rng(0)
    last_level, was_done = None, None
    switches = 0
    for _ in range(1500):
        rows = env.recv()
        level = rows.extras[LEVEL]
        if last_level is not None:
            moved = level != last_level
            assert not np.any(moved & ~was_done), "a slot changed level in the middle of an episode"
            switches += int(moved.sum())
        for slot in range(3):
            want = ref((int(level[slot]), slot)).recv()
            np.testing.assert_array_equal(rows.obs["obs"][slot], want.obs["obs"][0])
            assert rows.terminated[slot] == want.terminated[0]
            assert rows.truncated[slot] == want.truncated[0]
            assert rows.reward[slot] == want.reward[0]
        actions = rng.integers(0, 2, 3).astype(np.int32)
        was_done, last_level = rows.terminated | rows.truncated, level.copy()
        env.send(actions, rows)
        for slot in range(3):
            # The slot's env for its next row: stepped (an auto-reset after a terminal step) unless
            # it was made just now; an env the slot left stays parked at its terminal step.
            key = (int(env.level[slot]), slot)
            if key in refs:
                part = take_rows(rows, np.array([slot]))
                refs[key].send(
                    actions[slot : slot + 1], part._replace(env_id=np.zeros(1, np.int32))
                )
    assert switches >= 20 and set(made) == {(lv, s) for lv in (0, 1) for s in range(3)}


def test_levels_with_other_spaces_or_no_success_measure_are_config_errors():
    c = cartpole_levels()
    c.env.levels = ("CartPole-v1", "Acrobot-v1")
    with pytest.raises(
        ConfigError, match=r"env.levels: Acrobot-v1 has observations .* same spaces"
    ):
        env_spec(c)
    c.env.levels = ("CartPole-v1", "CartPole-v9")
    c.log.success_threshold = 100.0
    with pytest.raises(ConfigError, match="env.levels: env.name='CartPole-v9' is not an envpool"):
        validate(c)
    c.env.levels = ("CartPole-v0", "CartPole-v1")
    c.log.success_threshold = None
    needs = r"needs a backend that plays levels \(envpool\) and log.success_threshold"
    with pytest.raises(ConfigError, match=needs):
        validate(c)
    c.log.success_threshold = 100.0
    c.curriculum.start = 2
    with pytest.raises(ConfigError, match=r"curriculum.start=2 must be a level index in \[0, 2\)"):
        validate(c)


def test_actors_refuse_level_probabilities_that_are_no_distribution():
    message = pb.ActionBatch()
    assert client.decode_level_probs(message, 2) is None
    message.level_probs.extend([1.0, 3.0])
    np.testing.assert_allclose(client.decode_level_probs(message, 2), [0.25, 0.75])
    for bad in ([0.5, -0.1], [0.0, 0.0], [float("nan"), 1.0]):
        del message.level_probs[:]
        message.level_probs.extend(bad)
        with pytest.raises(client.Disconnected, match="not a distribution over this actor's 2"):
            client.decode_level_probs(message, 2)
    # Another number of levels: the learner's config is not the actor's; the actor stops (2).
    for bad in ([1.0], [1.0, 1.0, 1.0]):
        del message.level_probs[:]
        message.level_probs.extend(bad)
        with pytest.raises(client.Rejected, match=r"this actor has 2 env.levels; start the actor"):
            client.decode_level_probs(message, 2)


SPEC = EnvSpec(
    "t", {"obs": ArraySpec(np.float32, (2,))}, 3, extras={LEVEL: ArraySpec(np.int32, ())}
)


def level_service(curriculum):
    config = base_config()
    config.network.hidden_sizes = (4,)
    network = make_network(config.network, SPEC)
    registry = PolicyRegistry()
    registry.publish(0, {"params": network.init(jax.random.key(0)), "obs_norm": {}})
    matchmaker = Matchmaker(SPEC, curriculum=curriculum, success_threshold=0.5)
    service = InferenceService.from_config(
        config, spec=SPEC, network=network, registry=registry, matchmaker=matchmaker
    )
    service.start()
    return service, config


def level_rows(level, reward, done):
    n = len(level)
    no = np.zeros(n, bool)
    return Rows(
        {"obs": np.zeros((n, 2), np.float32)}, {LEVEL: np.asarray(level, np.int32)},
        np.asarray(reward, np.float32), np.asarray(done, bool), no, np.arange(n, dtype=np.int32),
        np.zeros(n, np.int32), ~np.asarray(done, bool), np.asarray(done, bool),
    )  # fmt: skip


def test_the_recorder_reports_each_ended_episode_with_its_level_and_success():
    curriculum = Curriculum(3, 0.3, 0.8, window=1000)
    service, _ = level_service(curriculum)
    try:
        session = service.open_session(0, 4)
        service.submit(session, level_rows([0, 1, 2, 1], [0, 0, 0, 0], [0, 0, 0, 0])).result(10)
        # Returns so far: 0.0 each; this step ends seats 0, 1 and 3 with rewards 1, 0, 2.
        step = level_rows([0, 1, 2, 1], [1.0, 0.0, 5.0, 2.0], [1, 1, 0, 1])
        service.submit(session, step).result(10)
        service.flush()
    finally:
        service.stop(finished=True)
    m = curriculum.take_metrics()
    assert m["curriculum/success_0"] == 1.0 and m["curriculum/success_1"] == 0.5
    assert m["curriculum/success_2"] is None  # still playing
    assert m["curriculum/share_0"] == pytest.approx(1 / 3)


def test_level_probabilities_reach_actors_in_the_welcome_and_whenever_they_change():
    curriculum = Curriculum(2, 0.3, 0.8, window=2)
    service, config = level_service(curriculum)
    rpc, port = listen(service, "127.0.0.1", 0, config.server)
    hello = codec.make_hello(SPEC, 0, 2)
    connection = client.Connection(f"127.0.0.1:{port}", hello)
    try:
        assert list(connection.welcome.level_probs) == [1.0, 0.0]
        step = level_rows([0, 0], [0, 0], [0, 0])
        first = connection.step(codec.encode_step(0, step))
        assert not first.level_probs  # unchanged since the Welcome
        curriculum.report(np.array([0, 0]), np.array([True, True]))  # 2 of 2 > T_u: bound 1
        moved = connection.step(codec.encode_step(1, step))
        assert list(moved.level_probs) == [0.5, 0.5]
        assert not connection.step(codec.encode_step(2, step)).level_probs
    finally:
        connection.close()
        rpc.stop()
        service.stop(finished=True)


@pytest.mark.slow
def test_a_run_climbs_the_levels_without_restarts_and_resumes_its_bound(tmp_path):
    """CartPole-v0 then -v1 as levels, a success being a return above 12 (random play mostly
    succeeds): the server raises the bound, the actor plays level 1 from then on, and a resumed
    run starts at the saved bound."""
    config = os.path.join(ROOT, "configs", "cartpole_ppo.py")
    flags = [
        "--config.env.levels=('CartPole-v0','CartPole-v1')", "--config.log.success_threshold=12",
        "--config.curriculum.window=20", "--config.curriculum.upper=0.5",
        "--config.log.interval_s=1", "--config.log.wandb_mode=disabled",
    ]  # fmt: skip
    logdir = tmp_path / "run"
    procs = Processes(tmp_path)
    try:
        learner, address = procs.learner(logdir, "--config.total_env_steps=12000", *flags)
        actor = procs.actor(address, 0, *flags, "--config.env.num_envs=8", config=config)
        assert actor.wait(timeout=240) == 0 and learner.wait(timeout=120) == 0
        rows = metrics(logdir)
        assert rows[-1]["curriculum/bound"] == 1
        assert any((r.get("curriculum/share_1") or 0) > 0.3 for r in rows)
        # A resumed run where the bound cannot move (a huge window) starts where it stopped.
        learner, address = procs.learner(
            logdir, "--config.total_env_steps=18000", *flags, "--config.curriculum.window=100000",
            name="learner2.log",
        )  # fmt: skip
        actor = procs.actor(address, 1, *flags, "--config.env.num_envs=8", config=config)
        assert actor.wait(timeout=240) == 0 and learner.wait(timeout=120) == 0
        resumed = metrics(logdir)[len(rows) :]
        assert resumed and all(r["curriculum/bound"] == 1 for r in resumed)
        assert any((r.get("curriculum/share_1") or 0) > 0.3 for r in resumed)
    finally:
        procs.stop_all()
