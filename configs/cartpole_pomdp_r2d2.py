"""R2D2 on CartPole-v1 with the velocities hidden (env.obs_indices = x and theta): recurrent
Q-learning from sequences stored with the LSTM state they started from, a burn-in that refreshes
that state, 5-step double-Q targets under the value rescaling h, a dueling head and prioritized
sequence replay. The same config with network.core='none' is the memoryless control."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.algo = "r2d2"
    c.env.name = "CartPole-v1"
    c.env.num_envs = 8
    c.env.obs_indices = (0, 2)  # x and theta; the velocities must be inferred over time
    c.total_env_steps = 1_000_000
    c.unroll_length = 40  # a sequence: 20 steps of burn-in, 20 learned
    c.batch_unrolls = 4
    c.network.dueling = True
    c.network.hidden_sizes = (64,)
    c.network.activation = "relu"
    c.network.core = "lstm"
    c.network.core_size = 64
    c.network.normalize_obs = False
    r = c.r2d2
    r.burn_in = 20
    r.n_step = 5
    r.batch_sequences = 32
    r.replay_ratio = 8.0  # 160 steps in -> 1280 sampled: one sgd step of 32 x 40
    r.capacity = 100_000
    r.min_fill = 5_000
    # Measured on 1M-step runs here (benchmarks/RESULTS.md, "R2D2"): R2D2's own priority and
    # importance exponents (0.9, 0.6) and a target copied every 200 sgd steps learned to 500
    # and then collapsed; Rainbow's exponents and 100 steps held better.
    r.priority_exponent = 0.6
    r.importance_exponent = 0.4
    r.target_period = 100
    r.epsilon = 0.05
    r.epsilon_alpha = 3.0
    r.epsilon_slots = 4
    r.anneal_steps = 100_000
    c.optimizer.learning_rate = 1e-3
    c.optimizer.anneal_lr = True
    c.optimizer.max_grad_norm = 10.0
    c.log.interval_s = 5.0
    c.lock()
    return c
