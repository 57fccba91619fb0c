"""Neural MMO 2.1.1 (seedlike/envs/nmmo_env.py) with entity observations and a pointer head for
the attack target, as a population of two policies in one world.

64 agents on a 64 x 64 map (nmmo's resources scaled to the area), episodes of at most 512 ticks.
Each agent sees the entities within 7 tiles ([100, 31], read by the entity encoder), its own row
and the 15 x 15 tiles around it (material one-hot, a small CNN), and chooses a move direction,
an attack style and a target (a pointer into the entity set, or none), with nmmo's legal masks;
an LSTM core carries memory. nmmo rewards 1 / horizon per tick alive and -1 at death, so the
return says how long an agent lived.

Needs nmmo where the actors run (scripts/nmmo_venv.sh makes its virtualenv; the learner reads the
spaces without it):

    scripts/nmmo_venv.sh
    scripts/train.sh --config=configs/nmmo_entities.py --population=2 \\
        --actor_python=.nmmo-venv/bin/python --logdir=runs/nmmo

teams.sizes splits the agents into two halves: population member k learns from the agents of
team k (docs/teams.md, "Populations"). benchmarks/RESULTS.md has a 60-minute run on a 2-core
machine against random play in the same world (benchmarks/nmmo_random.py).
"""

from seedlike.config import base_config

AGENTS = 64


def get_config():
    c = base_config()
    c.env.backend = "pettingzoo"
    c.env.name = "seedlike.envs.nmmo_env"
    c.env.kwargs.num_agents = AGENTS
    c.env.kwargs.map_size = 64
    c.env.kwargs.horizon = 512
    c.env.num_envs = 1  # 64 rows per step
    c.teams.sizes = (AGENTS // 2, AGENTS // 2)
    c.total_env_steps = 100_000_000
    c.unroll_length = 16
    c.batch_unrolls = 64
    c.network.torso = "small_cnn"
    c.network.image_key = "tiles"
    c.network.image_scale = 1.0  # one-hot materials
    c.network.entities = "entities"
    c.network.entity_size = 32
    c.network.entity_heads = 2
    c.network.pointer_heads = (2,)  # (move direction, attack style, attack target)
    c.network.core = "lstm"
    c.network.core_size = 128
    c.ppo.gamma = 0.99
    c.ppo.epochs = 2
    c.ppo.num_minibatches = 4
    c.optimizer.learning_rate = 3e-4
    c.optimizer.anneal_lr = False
    c.server.max_envs_per_actor = 64
    c.checkpoint.interval_s = 300.0
    c.log.interval_s = 30.0
    c.lock()
    return c
