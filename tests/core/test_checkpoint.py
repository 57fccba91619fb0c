"""orbax checkpoints: exact round trip, fallback past a damaged step, clear incompatibility."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from networks import make_network
from seedlike.checkpoint import (
    DIGEST_KEY,
    Checkpointer,
    DamagedCheckpoint,
    IncompatibleCheckpoint,
    params_fingerprint,
)
from seedlike.config import base_config
from seedlike.learning import train_state as ts
from seedlike.types import ArraySpec, EnvSpec

SPEC = EnvSpec("test", {"obs": ArraySpec(np.float32, (4,))}, num_actions=2)


def make_state(hidden=(8, 8), seed=0, **network):
    c = base_config()
    c.network.hidden_sizes = hidden
    c.network.update(network)
    network = make_network(c.network, SPEC)
    return ts.init_train_state(network, ts.make_optimizer(c.optimizer), jax.random.key(seed))


def test_round_trip_is_exact(tmp_path):
    state = make_state(seed=1)
    state = state.replace(policy_version=state.policy_version + 7)
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(7, state, {"env_steps": 1234})
    ckpt.wait()  # saves are written in the background
    restored, meta = Checkpointer(str(tmp_path)).restore(make_state(seed=2))
    assert meta == {"env_steps": 1234}
    jax.tree.map(np.testing.assert_array_equal, restored, state)
    assert params_fingerprint(restored.params) == params_fingerprint(state.params)
    assert params_fingerprint(make_state(seed=2).params) != params_fingerprint(state.params)


def test_a_q_networks_target_parameters_round_trip(tmp_path):
    q = dict(policy_head="q", dueling=True, atoms=3, normalize_obs=False)
    state = make_state(seed=1, **q)
    state = state.replace(target_params=make_state(seed=3, **q).params)
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(1, state, {})
    ckpt.wait()
    restored, _ = Checkpointer(str(tmp_path)).restore(make_state(seed=2, **q))
    jax.tree.map(np.testing.assert_array_equal, restored.target_params, state.target_params)
    jax.tree.map(np.testing.assert_array_equal, restored.params, state.params)
    assert params_fingerprint(restored.target_params) != params_fingerprint(restored.params)


def test_orbax_info_lines_stay_off_the_console_and_other_lines_pass(tmp_path, caplog):
    from absl import logging as absl_logging

    caplog.set_level("INFO")
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(1, make_state(), {"env_steps": 1})
    ckpt.close()
    orbax_info = [r for r in caplog.records if f"{os.sep}orbax{os.sep}" in r.pathname]
    assert not orbax_info, [r.getMessage()[:80] for r in orbax_info]
    # Without the filter orbax logs through absl at INFO on every save; the filter keeps the rest.
    absl_logging.info("seedlike line")
    assert "seedlike line" in caplog.text


def test_background_saves_keep_what_was_passed_and_all_commit(tmp_path):
    """save() returns before orbax has written; the state is copied first, so changing the
    caller's arrays afterwards changes nothing saved, and back-to-back saves all commit."""
    ckpt = Checkpointer(str(tmp_path), max_to_keep=5)
    states = [jax.tree.map(np.array, make_state(seed=s)) for s in range(3)]
    expected = [jax.tree.map(np.copy, s) for s in states]
    for step, state in enumerate(states):
        ckpt.save(step, state, {"env_steps": step})
        for leaf in jax.tree.leaves(state.params):
            leaf[...] = 7.0  # the caller reuses its buffers at once
    ckpt.wait()
    assert ckpt.steps() == [0, 1, 2]
    for step in range(3):
        restored, meta = ckpt.restore(make_state(), step)
        assert meta["env_steps"] == step
        jax.tree.map(np.testing.assert_array_equal, restored.params, expected[step].params)
    ckpt.close()


def test_no_checkpoint_returns_none(tmp_path):
    assert Checkpointer(str(tmp_path / "empty")).restore(make_state()) is None


def test_damaged_latest_falls_back_to_previous(tmp_path, caplog):
    ckpt = Checkpointer(str(tmp_path), max_to_keep=3)
    first = make_state(seed=1)
    ckpt.save(1, first, {"env_steps": 1})
    ckpt.save(2, make_state(seed=2), {"env_steps": 2})
    ckpt.close()
    shutil.rmtree(os.path.join(tmp_path, "2", "state"))
    restored, meta = Checkpointer(str(tmp_path)).restore(make_state())
    assert meta["env_steps"] == 1
    jax.tree.map(np.testing.assert_array_equal, restored.params, first.params)
    assert "checkpoint step 2" in caplog.text and "unreadable" in caplog.text


def _two_steps(tmp_path, second):
    ckpt = Checkpointer(str(tmp_path), max_to_keep=3)
    first = make_state(seed=1)
    ckpt.save(1, first, {"env_steps": 1})
    ckpt.save(2, second, {"env_steps": 2})
    ckpt.close()
    return first


def test_arrays_that_do_not_match_their_digest_fall_back_to_the_previous_step(tmp_path, caplog):
    first = _two_steps(tmp_path, make_state(seed=2))
    # What flipped bytes that still decode look like: the arrays no longer match the digest.
    meta_file = tmp_path / "2" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    assert len(meta[DIGEST_KEY]) == 64
    meta_file.write_text(json.dumps({**meta, DIGEST_KEY: "0" * 64}))
    restored, meta = Checkpointer(str(tmp_path)).restore(make_state())
    assert meta == {"env_steps": 1}
    jax.tree.map(np.testing.assert_array_equal, restored.params, first.params)
    assert "does not match the digest saved with it); falling back" in caplog.text
    with pytest.raises(DamagedCheckpoint, match=f"checkpoint {tmp_path}/2 does not match"):
        Checkpointer(str(tmp_path)).restore(make_state(), step=2)


def test_non_finite_arrays_are_damage(tmp_path, caplog):
    state = make_state(seed=2)
    params = jax.tree.map(np.array, state.params)  # writable copies
    kernel = params["params"]["policy_torso"]["dense_0"]["kernel"]
    kernel[0, 0] = np.nan
    _two_steps(tmp_path, state.replace(params=params))
    _, meta = Checkpointer(str(tmp_path)).restore(make_state())
    assert meta == {"env_steps": 1}
    assert "non-finite values in params.params.policy_torso.dense_0.kernel" in caplog.text


# orbax 0.12.8's name for a step being written (atomicity.py), and older versions' one.
@pytest.mark.parametrize(
    "tmp", ["2.orbax-checkpoint-tmp", "2.orbax-checkpoint-tmp-1700000000123456"]
)
def test_a_save_interrupted_by_a_kill_leaves_nothing_behind(tmp_path, caplog, tmp):
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(1, make_state(), {"env_steps": 1})
    ckpt.close()
    partial = tmp_path / tmp / "state"
    partial.mkdir(parents=True)
    (partial / "chunk").write_bytes(b"half written")
    reader = Checkpointer(str(tmp_path))  # evaluating a live run: its save may be in progress
    assert reader.steps() == [1] and partial.exists()
    reader.close()
    writer = Checkpointer(str(tmp_path))  # the learner, restarting
    writer.remove_interrupted_saves()
    assert sorted(os.listdir(tmp_path)) == ["1"] and writer.steps() == [1]
    assert f"removing {tmp}," in caplog.text
    writer.close()


def test_incompatible_network_names_the_layer_and_shapes(tmp_path):
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(1, make_state(hidden=(8, 8)), {"env_steps": 1})
    ckpt.wait()
    with pytest.raises(IncompatibleCheckpoint) as info:
        Checkpointer(str(tmp_path)).restore(make_state(hidden=(16, 8)))
    message = str(info.value)
    assert (
        "params.params.policy_torso.dense_0.kernel is float32[4, 8] in the checkpoint, "
        "float32[4, 16] in the config" in message
    )
    assert "surgery" in message


def test_saving_a_step_again_replaces_its_counters_and_never_leaves_it_missing(
    tmp_path, monkeypatch
):
    """An interval with no update (or a resume stopped before its first) saves the same policy
    version again: the step stays on disk throughout, with the new counters once written; a
    write that fails leaves the earlier copy, and the error says it is complete."""
    from seedlike.runtime.storage import StorageError

    state = make_state(seed=1)
    ckpt = Checkpointer(str(tmp_path), max_to_keep=1)  # the only copy: nothing to fall back on
    ckpt.save(5, state, {"env_steps": 100})
    ckpt.wait()
    ckpt.save(5, state, {"env_steps": 180})
    assert sorted(os.listdir(tmp_path)) == ["5"]  # no moment without it
    _, meta = Checkpointer(str(tmp_path)).restore(make_state(seed=2))
    assert meta == {"env_steps": 180}

    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(StorageError, match=f"The last complete checkpoint is {tmp_path}/5;"):
        ckpt.save(5, state, {"env_steps": 260})
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["5"] and sorted(
        os.listdir(tmp_path / "5" / "meta")
    ) == [
        "commit_success.txt",
        "metadata",
    ]
    restored, meta = Checkpointer(str(tmp_path)).restore(make_state(seed=2))
    assert meta == {"env_steps": 180}
    jax.tree.map(np.testing.assert_array_equal, restored, state)

    # A different state under the same version (not something training does) is written anew.
    other = make_state(seed=3)
    ckpt.save(5, other, {"env_steps": 300})
    ckpt.wait()
    restored, meta = Checkpointer(str(tmp_path)).restore(make_state(seed=2))
    assert meta == {"env_steps": 300}
    jax.tree.map(np.testing.assert_array_equal, restored.params, other.params)
    ckpt.close()
