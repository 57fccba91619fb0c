"""CartPole-v1 with the velocities hidden (cart position and pole angle only): a partially
observed task that needs memory. PPO with an LSTM core, whose carry lives on the server."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "CartPole-v1"
    c.env.num_envs = 16
    c.env.obs_indices = (0, 2)  # x and theta; x_dot and theta_dot must be inferred over time
    c.total_env_steps = 500_000
    c.unroll_length = 16  # truncated BPTT over 16 steps, as OpenAI Five
    c.batch_unrolls = 64
    c.network.hidden_sizes = (64,)
    c.network.core = "lstm"
    c.network.core_size = 64
    c.network.normalize_obs = False
    c.ppo.epochs = 8
    c.ppo.num_minibatches = 4
    c.optimizer.learning_rate = 3e-3
    c.log.interval_s = 5.0
    c.lock()
    return c
