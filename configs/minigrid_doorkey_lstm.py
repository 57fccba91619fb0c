"""PPO with a small CNN and an LSTM on MiniGrid-DoorKey-8x8-v0 (partially observed 7x7 egocentric
image): find the key, open the door, reach the goal. Affordable on a CPU; success means a
positive episode return (MiniGrid pays 1 - 0.9 * steps / max_steps on reaching the goal).

The reward is sparse: a random policy reaches the goal in ~3% of 8x8 episodes, and trained on 8x8
alone PPO drifted away from even that (success 0 from 0.5M to 2M steps). Start on 5x5, where
random play succeeds in ~13% of episodes, then continue the same run on 8x8 (same observation and
action spaces):

  scripts/curriculum.sh --config=configs/minigrid_doorkey_lstm.py \
      --stages=MiniGrid-DoorKey-5x5-v0:500000,MiniGrid-DoorKey-8x8-v0:2000000
"""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "MiniGrid-DoorKey-8x8-v0"
    c.env.num_envs = 16
    c.env.obs_keys = ("image",)  # the view is egocentric; direction and mission add nothing here
    c.total_env_steps = 2_000_000
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
    c.optimizer.anneal_lr = False  # a curriculum resumes the run; keep one rate across stages
    c.log.interval_s = 15.0
    c.log.success_threshold = 0.0
    c.lock()
    return c
