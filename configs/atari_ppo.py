"""PPO with the Nature CNN on envpool Atari (Breakout-v5 by default; pick any with
--config.env.name=Pong-v5).

The batch and update schedule match the usual single-GPU PPO Atari setup: 8 envs x 128 steps per
batch (here 2 actors x 4 envs), 4 epochs x 4 minibatches of 256. Frame stack 4 and 84x84 grayscale
come from envpool; a lost life ends the learning episode (episodic_life) while episode statistics
count whole games; rewards are clipped to +-1 for learning only, so episode_return_mean is the game
score. On an accelerator host train.sh sizes the actors from the cores (16 cores: 8 actors x 64
envs); give the learner batches to match the envs in flight:
  scripts/train.sh --config=configs/atari_ppo.py --config.env.name=Pong-v5 \\
      --config.batch_unrolls=64 --config.total_env_steps=10000000
(PPO typically reaches a Pong score of 18+ within 10M env steps.)
"""

from ml_collections import ConfigDict

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "Breakout-v5"
    c.env.num_envs = 4  # per actor
    c.env.kwargs = ConfigDict({"episodic_life": True, "reward_clip": False})
    c.total_env_steps = 10_000_000
    c.unroll_length = 128
    c.batch_unrolls = 8  # 1024 steps per policy version
    c.network.torso = "nature_cnn"
    c.network.normalize_obs = False  # images are scaled by 1/255 instead
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.ppo.clip_eps = 0.1
    c.ppo.ent_coef = 0.01
    c.ppo.reward_clip = 1.0
    c.optimizer.learning_rate = 2.5e-4
    c.server.batch_timeout_ms = 2.0
    c.log.interval_s = 30.0
    c.lock()
    return c
