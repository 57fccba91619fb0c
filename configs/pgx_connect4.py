"""configs/connect4_selfplay.py on the device: pgx's Connect Four inside the learner's compiled
program (no actors: seedlike.ondevice), the same network (line features), PPO settings and league
(OpenAI Five sampling, the scripted bot in half of the games, now in JAX), 4096 learner moves
per update from 256 envs. pgx's boards are envpool's, so the SEED path's tools score it:

    scripts/train.sh --config=configs/pgx_connect4.py --logdir=runs/c4dev
    python play.py --a=runs/c4dev --b=scripted --games=2000 --greedy
"""

import os

from seedlike.config import load_config_file


def get_config():
    c = load_config_file(os.path.join(os.path.dirname(__file__), "connect4_selfplay.py"))
    c.unlock()
    c.env.backend = "pgx"
    c.env.name = "connect_four"
    c.batch_unrolls = 256  # on the device: the envs, each one unroll of unroll_length per update
    c.league.max_snapshots = 32  # stacked on the device
    c.log.interval_s = 10.0
    c.lock()
    return c
