"""MAgent2 battle_v4 (pip install -e .[magent]): 81 against 81 agents on a 45 x 45 grid, obs
(13, 13, 5), 21 actions. One shared policy (a small CNN) plays every red agent; the league (OpenAI
Five sampling over past snapshots, and a random-action team 20% of the time) plays blue. A game is
won by the team with more agents alive when it ends (1000 steps, or one side wiped out); rewards
are blended with the team's (spirit) and made zero-sum. benchmarks/RESULTS.md has a 60-minute run
on a 2-core machine and how it was evaluated."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.backend = "pettingzoo"
    c.env.name = "magent2.environments.battle_v4"
    c.env.kwargs.map_size = 45
    c.env.num_envs = 1  # 162 rows per step
    c.total_env_steps = 100_000_000
    c.unroll_length = 16
    c.batch_unrolls = 256
    c.network.torso = "small_cnn"
    c.network.image_scale = 1.0  # MAgent's planes are already small floats (0..2)
    c.network.normalize_obs = False
    c.ppo.gamma = 0.99
    c.ppo.epochs = 2
    c.ppo.num_minibatches = 4
    c.optimizer.learning_rate = 5e-4
    c.optimizer.anneal_lr = False
    c.teams.sizes = (81, 81)
    c.teams.spirit = 0.5
    c.teams.zero_sum = True
    c.teams.result = "survivors"
    c.league.sampler = "openai_five"
    c.league.snapshot_every = 25
    c.league.bots = ("random",)
    c.league.p_bots = 0.2
    c.server.max_envs_per_actor = 64
    c.checkpoint.interval_s = 300.0
    c.log.interval_s = 30.0
    c.lock()
    return c
