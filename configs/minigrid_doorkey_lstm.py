"""PPO with a small CNN and an LSTM on MiniGrid-DoorKey-8x8-v0 (partially observed 7x7 egocentric
image): find the key, open the door, reach the goal. Affordable on a CPU; success means a
positive episode return (MiniGrid pays 1 - 0.9 * steps / max_steps on reaching the goal)."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "MiniGrid-DoorKey-8x8-v0"
    c.env.num_envs = 16
    c.env.obs_keys = ("image",)  # the view is egocentric; direction and mission add nothing here
    c.total_env_steps = 3_000_000
    c.unroll_length = 32
    c.batch_unrolls = 32
    c.network.torso = "small_cnn"
    c.network.image_key = "image"
    c.network.image_scale = 0.1  # MiniGrid "pixels" are object/colour/state ids up to 10
    c.network.core = "lstm"
    c.network.core_size = 128
    c.network.normalize_obs = False
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.ppo.ent_coef = 0.01
    c.optimizer.learning_rate = 5e-4
    c.log.interval_s = 15.0
    c.log.success_threshold = 0.0
    c.lock()
    return c
