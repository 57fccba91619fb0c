"""PQN on CartPole-v1 through actors (the SEED path): configs/gymnax_cartpole_pqn.py's settings
(purejaxql's) with envpool's CartPole stepped by 2 actors x 16 envs, epsilon-greedy at the
inference server (one rate for every actor, annealed from 1 to 0.2 over the first 100k env
steps). No replay: each 2048-step batch (32 unrolls of 64 steps) is learned from in 4 passes of
16 minibatches.

    scripts/train.sh --config=configs/cartpole_pqn.py
"""

import os

from seedlike.config import load_config_file


def get_config():
    c = load_config_file(os.path.join(os.path.dirname(__file__), "gymnax_cartpole_pqn.py"))
    c.unlock()
    c.env.backend = "envpool"
    c.env.num_envs = 16  # per actor; scripts/train.sh starts 2 actors
    c.log.interval_s = 5.0
    c.lock()
    return c
