"""PQN on a MinAtar game of gymnax, on the device (seedlike.ondevice), with purejaxql's settings
for MinAtar (purejaxql/config/alg/pqn_minatar.yaml): 128 envs x 32 steps per policy version, 2
epochs of 32 minibatches, MinAtar's conv torso (16 3x3 VALID, dense 128) with LayerNorm after the
conv and the dense layer, inputs / 255 as purejaxql's, lambda 0.65, epsilon from 1 to 0.05 over
the first 10% of its 10M env steps, Adam 5e-4 annealed (purejaxql: RAdam), max grad norm 10:
`--config=configs/gymnax_minatar_pqn.py:SpaceInvaders` (default Breakout). On a CPU the conv is
the slow part (benchmarks/RESULTS.md, "On-device PPO on gymnax")."""

from seedlike.config import base_config

GAMES = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")  # gymnax has no Seaquest


def get_config(game: str = "Breakout"):
    if game not in GAMES:
        raise ValueError(f"gymnax MinAtar game {game!r} is not one of {GAMES}")
    c = base_config()
    c.algo = "pqn"
    c.env.backend = "gymnax"
    c.env.name = f"{game}-MinAtar"
    c.total_env_steps = 10_000_000
    c.batch_unrolls = 128  # on the device: the envs
    c.unroll_length = 32
    c.pqn.epochs = 2
    c.pqn.num_minibatches = 32
    c.pqn.lambda_ = 0.65
    c.pqn.epsilon = 0.05
    c.pqn.anneal_steps = 1_000_000
    c.network.torso = "board_cnn"
    c.network.cnn_channels = (16,)
    c.network.cnn_kernel = 3
    c.network.cnn_padding = "VALID"
    c.network.cnn_hidden = 128
    c.network.layer_norm = True
    c.network.image_scale = 1.0 / 255.0  # purejaxql's, on 0/1 planes (LayerNorm follows)
    c.network.normalize_obs = False
    c.optimizer.learning_rate = 5e-4
    c.optimizer.max_grad_norm = 10.0
    c.log.interval_s = 10.0
    c.lock()
    return c
