"""BabyAI-PickupDistDebug-v0, a task where the words decide: "pick up the yellow ball" (or "a
ball", "the yellow object") among distractors in one room, and picking up anything else ends the
episode as a failure (the Debug levels check instructions strictly). Without the mission
(--config.env.blank_mission=True) the agent can only guess; a random policy succeeds in 15% of
episodes. The mission crosses the wire as word ids (env.mission_tokens) and a text encoder
(embedding + GRU, networks/text.py) conditions the small CNN + LSTM policy.

  scripts/train.sh --config=configs/babyai_pickupdist.py --logdir=runs/pickupdist
"""

from seedlike.config import base_config


def get_config():
    c = base_config()
    c.env.name = "BabyAI-PickupDistDebug-v0"
    c.env.num_envs = 16
    c.env.obs_keys = ("image", "mission")
    c.env.mission_tokens = 8  # "pick up the yellow ball": at most 5 words
    c.total_env_steps = 3_000_000
    c.unroll_length = 32
    c.batch_unrolls = 32
    c.network.torso = "small_cnn"
    c.network.image_key = "image"
    c.network.image_scale = 0.1  # object/colour/state ids up to 10
    c.network.text_key = "mission"
    c.network.text_size = 32
    c.network.core = "lstm"
    c.network.core_size = 128
    c.network.normalize_obs = False
    c.ppo.epochs = 4
    c.ppo.num_minibatches = 4
    c.ppo.ent_coef = 0.01
    c.optimizer.learning_rate = 5e-4
    c.log.interval_s = 15.0
    c.log.success_threshold = 0.0  # BabyAI pays > 0 only for reaching the target
    c.lock()
    return c
