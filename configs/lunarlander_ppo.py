"""PPO on LunarLander-v3 (Box2D, 8 features, 4 actions): land between the flags. Solved at an
average return of 200. Used by benchmarks/continual_surgery.py, where a first policy flies without
the two leg-contact sensors (features 6 and 7) and gets them, and a wider network, by surgery."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "LunarLander-v3"
    c.env.num_envs = 16  # per actor; scripts/train.sh starts 2 actors
    c.total_env_steps = 3_000_000
    c.unroll_length = 64
    c.batch_unrolls = 32  # 2048 steps per policy version
    c.ppo.gamma = 0.999  # landing pays at the end of an episode of up to 1000 steps
    c.ppo.gae_lambda = 0.98
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 8
    c.ppo.ent_coef = 0.01
    c.optimizer.learning_rate = 3e-4
    c.optimizer.anneal_lr = False
    c.log.interval_s = 10.0
    c.lock()
    return c
