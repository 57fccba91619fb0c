"""Every shipped config loads, validates and builds its environment, network and learner."""

import glob
import os

import jax
import pytest

from networks import make_network
from seedlike.config import load_config_file, validate
from seedlike.envs.envpool_env import make_env_spec
from seedlike.learner.learner import Learner
from tests.procs import ROOT

CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def test_every_config_file_is_found():
    names = {os.path.basename(p) for p in CONFIGS}
    assert {"cartpole_ppo.py", "connect4_selfplay.py", "atari_ppo.py"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_builds_on_two_devices(path):
    config = load_config_file(path)
    assert config.is_locked, "configs must lock so misspelled keys fail"
    validate(config)
    spec = make_env_spec(config.env)
    assert spec.name == config.env.name
    network = make_network(config.network, spec)
    params = jax.eval_shape(network.init, jax.random.key(0))
    logits = params["params"]["policy_head"]["logits"]["kernel"]
    assert logits.shape[-1] == spec.num_actions
    # Batch and minibatches split over the suite's two forced devices (raises if not).
    learner = Learner(config, network)
    assert learner.num_devices == 2
