"""PPO on a Gymnasium env (env.backend=gymnasium): a registered id or your own env's entry point,
e.g. --config.env.name=examples.corridor:Corridor, or package:Id for an id a package registers
(minigrid:MiniGrid-Empty-5x5-v0; docs/environments.md, "Your own environment"). Defaults for small
discrete-action tasks (continuous ones: configs/mujoco_ppo.py with --config.env.backend=gymnasium);
env.kwargs go to the env's constructor or gymnasium.make."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.backend = "gymnasium"
    c.env.name = "CartPole-v1"  # Gymnasium's own CartPole
    c.env.num_envs = 8  # per actor; scripts/train.sh starts 2 actors
    c.total_env_steps = 200_000
    c.unroll_length = 32
    c.batch_unrolls = 16  # 512 steps per policy version
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.ppo.ent_coef = 0.01
    c.optimizer.learning_rate = 1e-3
    c.network.normalize_obs = False
    c.log.interval_s = 5.0
    c.lock()
    return c
