"""Two teams of two on the built-in Coins grid (seedlike/envs/coins.py), through the PettingZoo
backend: one shared policy plays every agent of team 0, a league (OpenAI Five sampling, a random
bot now and then) plays team 1, with team spirit and zero-sum rewards. Learns in a few minutes on a
CPU: a team that walks to coins scores several times what a random team does."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.backend = "pettingzoo"
    c.env.name = "seedlike.envs.coins"
    c.env.num_envs = 16  # x 4 players = 64 rows per step
    c.total_env_steps = 400_000
    c.unroll_length = 16
    c.batch_unrolls = 64
    c.network.hidden_sizes = (128, 128)
    c.network.activation = "relu"
    c.network.normalize_obs = False
    c.ppo.gamma = 0.95
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.optimizer.learning_rate = 1e-3
    c.teams.sizes = (4, 4)  # 2 players x 2 lives a team (seedlike/envs/coins.py)
    c.teams.spirit = 0.3  # OpenAI Five starts selfish and anneals towards the team
    c.teams.spirit_final = 0.8
    c.teams.spirit_updates = 200
    c.teams.zero_sum = True
    c.league.sampler = "openai_five"
    c.league.snapshot_every = 10
    c.league.bots = ("random",)
    c.league.p_bots = 0.2
    c.log.interval_s = 5.0
    c.lock()
    return c
