"""PPO on a MinAtar game, beside configs/minatar_rainbow.py at the same torso (one 3x3 conv of 16
channels, a dense layer of 128): `--config=configs/minatar_ppo.py:SpaceInvaders` (default
Breakout)."""

from seedlike.config import base_config

GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")


def get_config(game: str = "Breakout"):
    if game not in GAMES:
        raise ValueError(f"MinAtar game {game!r} is not one of {GAMES}")
    c = base_config()
    c.env.backend = "gymnasium"
    c.env.name = f"MinAtar/{game}-v1"
    c.env.num_envs = 16
    c.total_env_steps = 2_000_000
    c.unroll_length = 32
    c.batch_unrolls = 16
    c.network.torso = "board_cnn"
    c.network.cnn_channels = (16,)
    c.network.cnn_kernel = 3
    c.network.cnn_padding = "VALID"
    c.network.cnn_hidden = 128
    c.network.image_scale = 1.0  # boolean planes
    c.network.normalize_obs = False
    c.ppo.ent_coef = 0.01
    c.optimizer.learning_rate = 2.5e-4
    c.log.interval_s = 30.0
    c.lock()
    return c
