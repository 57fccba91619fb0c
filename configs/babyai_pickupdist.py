"""BabyAI-PickupDistDebug-v0, a task where the words decide: "pick up the yellow ball" (or "a
ball", "the yellow object") among distractors in one room, and picking up anything else ends the
episode as a failure (the Debug levels check instructions strictly). Without the mission
(--config.env.blank_mission=True) the agent can only guess; a random policy succeeds in 15% of
episodes. The mission crosses the wire as word ids (env.mission_tokens) and a text encoder
(embedding + GRU, networks/text.py) conditions the small CNN + LSTM policy.

  scripts/train.sh --config=configs/babyai_pickupdist.py --logdir=runs/pickupdist
"""

import os

from seedlike.config import load_config_file


def get_config():
    # configs/babyai_gotolocal.py's network and PPO settings; only the level differs.
    here = os.path.dirname(os.path.abspath(__file__))
    c = load_config_file(os.path.join(here, "babyai_gotolocal.py"))
    c.unlock()
    c.env.name = "BabyAI-PickupDistDebug-v0"  # missions of at most 5 words fit its 8 tokens
    c.lock()
    return c
