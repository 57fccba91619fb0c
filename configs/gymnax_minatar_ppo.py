"""PPO on a MinAtar game of gymnax, on the device (seedlike.ondevice):
`--config=configs/gymnax_minatar_ppo.py:SpaceInvaders` (default Breakout), with the settings
PureJaxRL tuned for MinAtar (its examples/brax_minatar.ipynb): 64 envs x 128 steps per policy
version, 4 epochs of 8 minibatches, Adam 5e-3 annealed over 10M env steps, its 64 x 64 relu MLPs
(one for the policy, one for the value) on the flattened 10x10 planes. On a CPU, XLA's
convolutions (configs/minatar_ppo.py's torso) made the whole program 16x slower here
(benchmarks/RESULTS.md, "On-device PPO on gymnax")."""

from seedlike.config import base_config

GAMES = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")  # gymnax has no Seaquest


def get_config(game: str = "Breakout"):
    if game not in GAMES:
        raise ValueError(f"gymnax MinAtar game {game!r} is not one of {GAMES}")
    c = base_config()
    c.env.backend = "gymnax"
    c.env.name = f"{game}-MinAtar"
    c.total_env_steps = 10_000_000
    c.batch_unrolls = 64  # on the device: the envs
    c.unroll_length = 128
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 8
    c.ppo.clip_value = True  # as PureJaxRL clips the value loss
    c.network.activation = "relu"
    c.network.normalize_obs = False  # 0/1 planes
    c.optimizer.learning_rate = 5e-3
    c.log.interval_s = 5.0
    c.lock()
    return c
