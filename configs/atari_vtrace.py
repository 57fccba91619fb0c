"""V-trace (IMPALA) with the IMPALA ResNet torso on envpool Atari (Pong-v5 by default).

Meant for accelerator hosts with many actors, e.g.
  scripts/train.sh --config=configs/atari_vtrace.py --num_actors=32 --config.env.num_envs=32
IMPALA's deep network reaches a Pong score near the maximum (21) within 20-50M env steps.
"""

from ml_collections import ConfigDict

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.algo = "vtrace"
    c.env.name = "Pong-v5"
    c.env.num_envs = 16  # per actor
    c.env.kwargs = ConfigDict({"episodic_life": True, "reward_clip": False})
    c.total_env_steps = 50_000_000
    c.unroll_length = 20
    c.batch_unrolls = 32
    c.network.torso = "impala_cnn"
    c.network.normalize_obs = False
    c.vtrace.reward_clip = 1.0
    c.vtrace.ent_coef = 0.01
    c.optimizer.learning_rate = 6e-4
    c.optimizer.max_grad_norm = 40.0
    c.server.queue_unrolls = 64
    c.log.interval_s = 30.0
    c.lock()
    return c
