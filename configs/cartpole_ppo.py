"""PPO on CartPole-v1, the default job of scripts/train.sh: return 475+ well within 300k steps."""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "CartPole-v1"
    c.env.num_envs = 16  # per actor; scripts/train.sh starts 2 actors
    c.total_env_steps = 300_000
    c.unroll_length = 32
    c.batch_unrolls = 32  # 1024 steps per policy version
    # Heavy sample reuse pays on CartPole: 10 x 8 minibatch steps per 1024-step batch reach a
    # return of 475+ in ~100-140k env steps and stay at 500 (benchmarks/RESULTS.md has the sweep).
    c.ppo.epochs = 10
    c.ppo.num_minibatches = 8
    c.optimizer.learning_rate = 3e-4
    # CartPole's observations are O(1) already. With running mean/std normalization the policy
    # reached 500 and then collapsed in 2 of 3 seeds: as play improves the state distribution
    # narrows, the statistics keep moving and the inputs of a converged policy drift with them.
    c.network.normalize_obs = False
    c.log.interval_s = 5.0
    c.lock()
    return c
