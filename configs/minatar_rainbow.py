"""Rainbow-style Q-learning on a MinAtar game (Young & Tian 2019; PyPI minatar through the
gymnasium backend, sticky actions 0.1): `--config=configs/minatar_rainbow.py:SpaceInvaders`
(default Breakout). The network is MinAtar's own DQN torso, one 3x3 conv of 16 channels and a
dense layer of 128, under a dueling C51 head; 3-step double Q from a 100k-step prioritized replay,
8 sampled transitions per env step in sgd batches of 64. benchmarks/rainbow.py runs it (and PPO
beside it) to 2M env steps; curves in benchmarks/RESULTS.md."""

from seedlike.config import base_config

GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")


def get_config(game: str = "Breakout"):
    if game not in GAMES:
        raise ValueError(f"MinAtar game {game!r} is not one of {GAMES}")
    c = base_config()
    c.algo = "rainbow"
    c.env.backend = "gymnasium"
    c.env.name = f"MinAtar/{game}-v1"
    c.env.num_envs = 8
    c.total_env_steps = 2_000_000
    c.unroll_length = 16
    c.batch_unrolls = 8  # 128 steps per learner batch
    c.network.torso = "board_cnn"
    c.network.cnn_channels = (16,)
    c.network.cnn_kernel = 3
    c.network.cnn_padding = "VALID"
    c.network.cnn_hidden = 128
    c.network.image_scale = 1.0  # boolean planes
    c.network.normalize_obs = False
    c.network.dueling = True
    c.network.atoms = 51
    c.network.value_range = (-10.0, 10.0)
    r = c.rainbow
    r.n_step = 3
    # Four times the sgd steps of ratio 4 in batches of 128 at about twice their time: Breakout
    # ended at 8.1 there (3 seeds at 2M; RESULTS, "MinAtar Breakout-v1").
    r.batch_transitions = 64
    r.replay_ratio = 8.0
    r.capacity = 100_000
    r.min_fill = 5_000
    r.target_period = 1000
    r.epsilon = 0.01
    r.epsilon_alpha = 3.0
    r.epsilon_slots = 4
    r.anneal_steps = 100_000
    c.optimizer.learning_rate = 2.5e-4
    c.optimizer.adam_eps = 3.125e-4  # Dopamine's Rainbow: 0.01 / 32
    c.optimizer.anneal_lr = False
    c.optimizer.max_grad_norm = 10.0
    c.log.interval_s = 30.0
    c.lock()
    return c
