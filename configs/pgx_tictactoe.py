"""configs/tictactoe_selfplay.py on the device: pgx's Tic-tac-toe inside the learner's compiled
program (no actors: seedlike.ondevice), the same network, PPO settings and league (OpenAI Five
sampling), with a random player in one game of five, all on the device.

    scripts/train.sh --config=configs/pgx_tictactoe.py --logdir=runs/ttt
    python play.py --a=runs/ttt --b=random --games=400   # the games from the host
"""

import os

from seedlike.config import load_config_file


def get_config():
    c = load_config_file(os.path.join(os.path.dirname(__file__), "tictactoe_selfplay.py"))
    c.unlock()
    c.env.backend = "pgx"
    c.env.name = "tic_tac_toe"
    c.total_env_steps = 300_000
    c.batch_unrolls = 64  # on the device: the envs, each one unroll per policy version
    c.league.max_snapshots = 16  # stacked on the device
    c.league.bots = ("random",)
    c.league.p_bots = 0.2
    c.log.interval_s = 2.0
    c.lock()
    return c
