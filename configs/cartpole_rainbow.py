"""Rainbow-style Q-learning on CartPole-v1 from the learner's replay: 3-step double Q with a
dueling head and prioritized replay, epsilon annealed from 1 over the first 100k steps (the
Ape-X spread across actors after that). benchmarks/RESULTS.md has its curves."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.algo = "rainbow"
    c.env.name = "CartPole-v1"
    c.env.num_envs = 8
    c.total_env_steps = 500_000
    c.unroll_length = 16
    c.batch_unrolls = 8  # 128 steps per learner batch: replay_ratio x 128 / 128 sgd steps
    c.network.dueling = True
    c.network.hidden_sizes = (128, 128)
    c.network.activation = "relu"
    c.network.normalize_obs = False
    r = c.rainbow
    r.n_step = 3
    r.batch_transitions = 128
    r.replay_ratio = 8.0
    r.capacity = 50_000
    r.min_fill = 5_000
    r.target_period = 100  # sgd steps (250 left one seed of 3 swinging: RESULTS.md)
    r.epsilon = 0.05
    r.epsilon_alpha = 3.0
    r.epsilon_slots = 4
    r.anneal_steps = 100_000
    c.optimizer.learning_rate = 5e-4
    # Annealed to 0 at total_env_steps, as in every CartPole row of RESULTS.md ("Q-learning from
    # the learner's replay"): the final checkpoint is the one evaluated.
    c.optimizer.anneal_lr = True
    c.optimizer.max_grad_norm = 10.0
    c.log.interval_s = 5.0
    c.lock()
    return c
