"""MiniGrid-DoorKey-16x16-v0 through MazeBase's threshold curriculum inside one job: every actor
plays DoorKey 5x5, 6x6, 8x8 and 16x16 (they share the 7x7 egocentric view), each episode on a level
drawn uniformly up to a bound that the server raises when the success rate passes T_u and lowers
below T_l (seedlike/server/curriculum.py). No process restarts between levels.

PPO on 16x16 alone finds no reward in this budget: a random policy almost never reaches the goal
of a 16x16 room within its 2,560 steps (benchmarks/RESULTS.md, "Curriculum").

  scripts/train.sh --config=configs/doorkey_curriculum.py --logdir=runs/doorkey16
"""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "MiniGrid-DoorKey-16x16-v0"  # the task the run is for; its spec is every level's
    c.env.levels = (
        "MiniGrid-DoorKey-5x5-v0",
        "MiniGrid-DoorKey-6x6-v0",
        "MiniGrid-DoorKey-8x8-v0",
        "MiniGrid-DoorKey-16x16-v0",
    )
    c.env.num_envs = 16
    c.env.obs_keys = ("image",)
    c.total_env_steps = 6_000_000
    c.unroll_length = 32
    c.batch_unrolls = 32
    # As configs/minigrid_doorkey_lstm.py: small CNN over the 7x7 view, LSTM.
    c.network.torso = "small_cnn"
    c.network.image_key = "image"
    c.network.image_scale = 0.1
    c.network.core = "lstm"
    c.network.core_size = 128
    c.network.normalize_obs = False
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.ppo.ent_coef = 0.01
    c.optimizer.learning_rate = 5e-4
    c.optimizer.anneal_lr = False
    c.curriculum.lower = 0.3  # T_l
    c.curriculum.upper = 0.8  # T_u
    c.curriculum.window = 200  # episodes per decision
    c.log.interval_s = 15.0
    c.log.success_threshold = 0.0  # MiniGrid pays > 0 only for reaching the goal
    c.lock()
    return c
