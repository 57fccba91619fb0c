"""PPO on MuJoCo locomotion (envpool's Gymnasium v4 tasks: HalfCheetah-v4, Hopper-v4,
Walker2d-v4, Ant-v4, Humanoid-v4, ...): one config for all of them, after the PPO paper's MuJoCo
settings as CleanRL's ppo_continuous_action runs them (its published 1M-step scores are the
reference in benchmarks/RESULTS.md).

A diagonal Gaussian policy with one learned log-std vector starting at -0.5 (std 0.61; CleanRL
starts at 0), separate 64-64 tanh torsos for policy and value, observations normalized by running
statistics (clipped to +-10), rewards divided by the running std of the discounted return
(clipped to +-10), value clipping, 2048 steps per policy version in 32 minibatches of 64, 10
epochs, learning rate 3e-4 annealed to 0, no entropy bonus.

    scripts/train.sh --config=configs/mujoco_ppo.py --config.env.name=Hopper-v4

`get_config("dmc")` is the DeepMind Control variant (envpool's CheetahRun-v1, WalkerWalk-v1, ...):
the same learner, with the longer credit assignment those 1000-step, dense-reward tasks reward
(gamma 0.99 stays; lambda 0.95 stays) and dm_control's flat observation keys kept as they come.
"""

from seedlike.config import base_config


def get_config(variant: str = ""):
    c = base_config()
    c.env.name = "HalfCheetah-v4"
    c.env.num_envs = 8  # per actor; scripts/train.sh starts 2 actors on this machine
    c.env.action_bounds = "clip"  # CleanRL clips the Gaussian's sample to the env's bounds
    c.total_env_steps = 1_000_000
    c.unroll_length = 128
    c.batch_unrolls = 16  # 2048 steps per policy version
    c.network.hidden_sizes = (64, 64)
    c.network.activation = "tanh"
    c.network.obs_clip = 10.0
    # Initial std 0.61 instead of CleanRL's 1 (Andrychowicz et al. 2021, "What matters in
    # on-policy RL": an initial std near 0.5 helps across MuJoCo tasks). 3 seeds each, everything
    # else the same: Hopper-v4 2,253 -> 2,650 (benchmarks/RESULTS.md, "MuJoCo").
    c.network.log_std_init = -0.5
    c.ppo.gamma = 0.99
    c.ppo.gae_lambda = 0.95
    c.ppo.epochs = 10
    c.ppo.num_minibatches = 32
    c.ppo.clip_eps = 0.2
    c.ppo.clip_value = True
    c.ppo.value_clip_eps = 0.2
    c.ppo.ent_coef = 0.0
    c.ppo.vf_coef = 0.5
    c.ppo.normalize_rewards = True
    c.ppo.normalized_reward_clip = 10.0
    c.optimizer.learning_rate = 3e-4
    c.optimizer.anneal_lr = True
    c.optimizer.max_grad_norm = 0.5
    c.log.interval_s = 5.0  # a 100k-step run (a few minutes here) plots from dozens of points
    if variant == "dmc":
        c.env.name = "CheetahRun-v1"
    elif variant:
        raise ValueError(f"configs/mujoco_ppo.py: unknown variant {variant!r}; '' or 'dmc'")
    c.lock()
    return c
