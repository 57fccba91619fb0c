"""The generalization protocol: levels, intervals, play on one level against envpool itself, new
runs from another run's parameters (init_from), and evaluate.py end to end on a tiny budget."""

import json
import os
import subprocess
import sys

import envpool
import jax
import numpy as np
import pytest

from networks import make_network
from seedlike import generalization as gen
from seedlike.checkpoint import Checkpointer, IncompatibleCheckpoint, init_from
from seedlike.config import base_config, load_config_file
from seedlike.envs import make_env_spec
from seedlike.learning import train_state as ts
from tests.procs import NEEDS_QT, ROOT, has_qt5

needs_qt = pytest.mark.skipif(not has_qt5(), reason=NEEDS_QT)


def test_levels_are_ranges_steps_or_lists():
    assert gen.parse_levels("200:205") == [200, 201, 202, 203, 204]
    assert gen.parse_levels("0:30:10") == [0, 10, 20]
    assert gen.parse_levels("3, 17,42") == [3, 17, 42]
    for bad in ("5:5", "a:b", "1:9:0", "", "-1,2"):
        with pytest.raises(ValueError, match="levels"):
            gen.parse_levels(bad)


def test_interval_is_the_mean_and_1_96_standard_errors():
    i = gen.Interval.of([0.0, 10.0, 10.0, 0.0])
    half = 1.96 * np.std([0, 10, 10, 0], ddof=1) / 2.0  # 5.7735 / 2 * 1.96
    assert (i.mean, i.n) == (5.0, 4) and i.low == pytest.approx(5 - half)
    assert i.high == pytest.approx(5 + half) and half == pytest.approx(5.658, abs=1e-3)
    assert gen.Interval.of([3.0]).low == 3.0
    report = gen.summarize({7: gen.Played(np.array([10.0, 0.0]), np.array([5, 9]))})
    assert report["levels"]["7"]["mean"] == 5.0 and report["score"]["mean"] == 5.0


def procgen_config():
    c = load_config_file(os.path.join(ROOT, "configs", "procgen_coinrun.py:cpu"))
    c.unlock()
    c.network.cnn_hidden = 32
    return c


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@needs_qt
def test_a_level_is_played_alone_and_as_envpool_plays_it():
    """Greedy play of a fixed network: Procgen is deterministic given the level and the actions,
    so each episode's return and length must equal those of envpool's own env made with
    num_levels=1, start_level=level, stepped by the same network."""
    c = procgen_config()
    network = make_network(c.network, make_env_spec(c.env))
    # Noisy weights, so that the greedy action depends on what the agent sees: with these it
    # takes the coin on levels 3 and 12 and dies on level 9 (different lengths per level).
    leaves, tree = jax.tree.flatten(network.init(jax.random.key(2)))
    keys = jax.random.split(jax.random.key(12), len(leaves))
    noisy = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
    params = {"params": jax.tree.unflatten(tree, noisy), "obs_norm": {}}
    levels = [3, 9, 12]
    played = gen.play_levels(network, params, c.env, levels, episodes=2, greedy=True, seed=1)
    apply = jax.jit(lambda o: network.apply(params["params"], {}, {"obs": o})[0])
    for level in levels:
        env = envpool.make(c.env.name, env_type="gymnasium", num_envs=1, num_levels=1,
                           start_level=level, seed=123)  # fmt: skip
        obs, _ = env.reset()
        total, steps = 0.0, 0
        while True:
            obs, reward, term, trunc, _ = env.step(np.asarray(apply(obs)).argmax(-1))
            total, steps = total + float(reward[0]), steps + 1
            if term[0] or trunc[0]:
                break
        np.testing.assert_array_equal(played[level].returns, [total, total])
        np.testing.assert_array_equal(played[level].lengths, [steps, steps])
    assert len({int(played[lv].lengths[0]) for lv in levels}) == 3  # the levels differ
    rand = gen.play_levels(network, None, c.env, [5], episodes=3, seed=2)
    assert rand[5].lengths.min() >= 1 and rand[5].returns.shape == (3,)


def saved_run(tmp_path, name, hidden):
    c = base_config()
    c.network.hidden_sizes = hidden
    network = make_network(c.network, make_env_spec(c.env))
    state = ts.init_train_state(network, ts.make_optimizer(c.optimizer), jax.random.key(len(name)))
    norm = jax.tree.map(lambda x: x + 1.5, state.obs_norm)
    state = state.replace(obs_norm=norm, policy_version=state.policy_version + 7)
    checkpointer = Checkpointer(str(tmp_path / name / "checkpoints"))
    checkpointer.save(7, state, {"config": json.loads(c.to_json()), "env_steps": 900})
    checkpointer.close()
    return network, state


def test_init_from_takes_parameters_and_statistics_and_nothing_else(tmp_path):
    _, source = saved_run(tmp_path, "source", (16, 16))
    network, _ = saved_run(tmp_path, "other", (8,))
    c = base_config()
    c.network.hidden_sizes = (16, 16)
    fresh = ts.init_train_state(
        make_network(c.network, make_env_spec(c.env)), ts.make_optimizer(c.optimizer),
        jax.random.key(42),
    )  # fmt: skip
    state = init_from(str(tmp_path / "source"), fresh)
    for got, want in zip(jax.tree.leaves(state.params), jax.tree.leaves(source.params)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(jax.tree.leaves(state.obs_norm), jax.tree.leaves(source.obs_norm)):
        np.testing.assert_array_equal(got, want)
    assert int(state.policy_version) == 0  # counters and optimizer stay the new run's
    for got, want in zip(jax.tree.leaves(state.opt_state), jax.tree.leaves(fresh.opt_state)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(IncompatibleCheckpoint, match="do not fit this config's network .*surgery"):
        init_from(str(tmp_path / "other"), fresh)
    with pytest.raises(IncompatibleCheckpoint, match="init_from=.*nothing: no run or checkpoint"):
        init_from(str(tmp_path / "nothing"), fresh)


TINY = """
from seedlike.config import load_config_file

def get_config():
    c = load_config_file({path!r})
    c.unlock()
    c.env.num_envs = 4
    c.unroll_length, c.batch_unrolls = 16, 4
    c.network.cnn_hidden = 32
    c.log.interval_s, c.log.wandb_mode = 2.0, "disabled"
    c.lock()
    return c
"""


@pytest.mark.slow
@needs_qt
def test_evaluate_scores_levels_and_fine_tunes_against_scratch(tmp_path):
    """A checkpoint of the tiny Procgen config (trained on levels 0..199), scored on 2 training
    and 2 held-out levels and fine-tuned on one of them, from the checkpoint and from scratch."""
    config = tmp_path / "tiny.py"
    config.write_text(TINY.format(path=os.path.join(ROOT, "configs", "procgen_coinrun.py:cpu")))
    c = load_config_file(str(config))
    network = make_network(c.network, make_env_spec(c.env))
    state = ts.init_train_state(network, ts.make_optimizer(c.optimizer), jax.random.key(0))
    run = tmp_path / "run"
    checkpointer = Checkpointer(str(run / "checkpoints"))
    checkpointer.save(3, state, {"config": json.loads(c.to_json()), "policy_version": 3})
    checkpointer.close()
    out = tmp_path / "report" / "gen.json"
    out.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "evaluate.py", f"--checkpoint={run}", "--test_levels=200:202",
         "--max_train_levels=2", "--episodes=2", "--finetune_levels=200",
         "--finetune_steps=600", "--num_actors=1", f"--out={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["checkpoint"].endswith("run@3")
    assert report["train"]["describe"] == "2 levels, 0..1"
    assert set(report["test"]["policy"]["levels"]) == {"200", "201"}
    for part in ("train", "test"):
        for who in ("policy", "random"):
            levels = report[part][who]["levels"].values()
            assert all(v["n"] == 2 for v in levels)
            mean = np.mean([v["mean"] for v in levels])
            assert report[part][who]["score"]["mean"] == pytest.approx(mean)
    gap = report["train"]["policy"]["score"]["mean"] - report["test"]["policy"]["score"]["mean"]
    assert report["gap"] == pytest.approx(gap)
    (row,) = report["finetune"]["levels"]
    assert row["level"] == 200 and {"zero_shot", "finetuned", "scratch"} <= set(row)
    logs = {name: (out.parent / f"finetune_200_{name}" / "console.log").read_text()
            for name in ("finetuned", "scratch")}  # fmt: skip
    assert "initialized from" in logs["finetuned"] and "initialized from" not in logs["scratch"]
    markdown = (out.parent / "gen.md").read_text()
    assert "| test (2 levels, 200..201) |" in markdown and "| 200 |" in markdown
