"""Self-play PPO on TicTacToe-v1 with a league (OpenAI Five sampling) and TrueSkill evaluation.
Small enough to learn in a minute on a CPU."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "TicTacToe-v1"
    c.env.num_envs = 32
    c.total_env_steps = 400_000
    c.unroll_length = 8
    c.batch_unrolls = 64
    c.network.hidden_sizes = (128, 128)
    c.network.activation = "relu"
    c.network.normalize_obs = False
    c.ppo.gamma = 1.0
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.optimizer.learning_rate = 1e-3
    c.league.sampler = "openai_five"
    c.league.snapshot_every = 10
    c.league.eval_interval_s = 15.0
    c.league.eval_games = 100
    c.league.reference_every = 100
    c.league.reference_games = 100
    c.log.interval_s = 5.0
    c.lock()
    return c
