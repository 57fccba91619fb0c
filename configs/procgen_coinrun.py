"""PPO with the IMPALA CNN on Procgen's CoinrunEasy-v0 (envpool), trained on levels
[start_level, start_level + num_levels) for the generalization protocol of evaluate.py (Gotta
Learn Fast; Procgen's train/test split).

  scripts/train.sh --config=configs/procgen_coinrun.py --logdir=runs/coinrun        # the paper's
  scripts/train.sh --config=configs/procgen_coinrun.py:cpu --logdir=runs/coinrun    # a CPU's
  python evaluate.py --checkpoint=runs/coinrun --test_levels=200:300

The default is the Procgen paper's PPO (Cobbe et al. 2020, easy mode: 25M steps, 64 envs x 256
steps per update, 3 epochs of 8 minibatches, gamma .999, lambda .95, lr 5e-4, entropy .01, IMPALA
CNN 16-32-32 with 256 units), sized for an accelerator host. ":cpu" keeps the algorithm, swaps in
a small Nature CNN (16-32-32 channels, 256 units) and shrinks the batch (2,048 steps per update),
which a 2-core machine can train for a few million steps in an hour. Procgen needs the system Qt
5 runtime (scripts/setup_venv.sh installs it).
"""

from seedlike.config import base_config


def get_config(variant: str = ""):
    if variant not in ("", "cpu"):
        raise SystemExit(f"configs/procgen_coinrun.py:{variant}: the variants are '' and 'cpu'")
    c = base_config()
    c.env.name = "CoinrunEasy-v0"
    c.cpu_variant = "" if variant == "cpu" else "configs/procgen_coinrun.py:cpu"
    c.env.kwargs.num_levels = 200  # the training levels: [start_level, start_level + num_levels)
    c.env.kwargs.start_level = 0
    c.env.num_envs = 32  # x 2 actors = the paper's 64
    c.total_env_steps = 25_000_000
    c.unroll_length = 256
    c.batch_unrolls = 64
    c.network.torso = "impala_cnn"
    c.network.image_key = "obs"
    c.network.normalize_obs = False
    c.ppo.gamma = 0.999
    c.ppo.gae_lambda = 0.95
    c.ppo.epochs = 3
    c.ppo.num_minibatches = 8
    c.ppo.ent_coef = 0.01
    c.ppo.clip_eps = 0.2
    c.optimizer.learning_rate = 5e-4
    c.optimizer.anneal_lr = False  # the paper's constant rate
    c.log.success_threshold = 0.0  # Coinrun pays 10 for the coin
    if variant == "cpu":
        # On XLA:CPU a PPO update with the paper's IMPALA CNN costs over an order of magnitude
        # more per env step than this Nature CNN (benchmarks/torso_cost.py, RESULTS.md).
        c.network.torso = "nature_cnn"
        c.network.cnn_channels = (16, 32, 32)
        c.network.cnn_hidden = 256
        c.env.num_envs = 16
        c.unroll_length = 64
        c.batch_unrolls = 32
        c.ppo.num_minibatches = 4
        c.total_env_steps = 5_000_000
    c.lock()
    return c
