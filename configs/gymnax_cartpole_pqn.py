"""PQN on gymnax's CartPole-v1, stepped on the device inside the learner's compiled program (no
actors: seedlike.ondevice), with purejaxql's settings for it (purejaxql/config/alg/
pqn_cartpole.yaml): 32 envs x 64 steps per policy version, 4 epochs of 16 minibatches, a
256x256 relu MLP with LayerNorm, lambda 0.95, rewards x 0.1, epsilon annealed from 1 to 0.2 over
the first 100k env steps, Adam 1e-4 annealed (purejaxql: RAdam), 500k env steps.

    scripts/train.sh --config=configs/gymnax_cartpole_pqn.py
"""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.algo = "pqn"
    c.env.backend = "gymnax"
    c.env.name = "CartPole-v1"
    c.total_env_steps = 500_000
    c.batch_unrolls = 32  # on the device: the envs, each one unroll per policy version
    c.unroll_length = 64
    c.pqn.epochs = 4
    c.pqn.num_minibatches = 16
    c.pqn.lambda_ = 0.95
    c.pqn.reward_scale = 0.1
    c.pqn.epsilon = 0.2
    c.pqn.anneal_steps = 100_000
    c.network.hidden_sizes = (256, 256)
    c.network.activation = "relu"
    c.network.layer_norm = True
    c.network.normalize_obs = False
    c.optimizer.learning_rate = 1e-4
    c.optimizer.max_grad_norm = 10.0
    c.log.interval_s = 2.0
    c.lock()
    return c
