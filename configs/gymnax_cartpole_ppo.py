"""PPO on gymnax's CartPole-v1, stepped on the device inside the learner's compiled program (no
actors: seedlike.ondevice), with PureJaxRL's settings for it (purejaxrl/ppo.py): 4 envs x 128
steps per policy version, 4 epochs of 4 minibatches, Adam 2.5e-4 annealed, 500k env steps.

    scripts/train.sh --config=configs/gymnax_cartpole_ppo.py
"""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.backend = "gymnax"
    c.env.name = "CartPole-v1"
    c.total_env_steps = 500_000
    c.batch_unrolls = 4  # on the device: the envs, each one unroll per policy version
    c.unroll_length = 128
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.ppo.clip_value = True  # as PureJaxRL clips the value loss
    c.optimizer.learning_rate = 2.5e-4
    c.optimizer.anneal_lr = True
    c.network.normalize_obs = False  # as configs/cartpole_ppo.py says why
    c.log.interval_s = 2.0
    c.lock()
    return c
