"""Central server: inference for all actors, trajectory recording, learning, metrics, checkpoints.

  python learner.py --config=configs/cartpole_ppo.py --logdir=runs/cartpole [--port=50051]

A run restarted with the same --logdir resumes from its latest checkpoint. SIGTERM/SIGINT save a
checkpoint and exit within checkpoint.stop_grace_s (an update in progress is abandoned; a second
signal 2 s or more later exits at once); actors keep retrying and rejoin the restarted learner.
When training completes, every actor stream ends normally and the actors exit. The process is
seedlike.learner.main.
"""

import os
import sys

from absl import app, flags
from ml_collections import config_flags

from seedlike import learner
from seedlike.cli import add_env_kwargs, check_flags, check_override_flags
from seedlike.runtime import console

DEFAULT_CONFIG = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "configs", "cartpole_ppo.py"
)
# ml_collections applies --config.x overrides while defining the flag; check them first.
_ENV_KWARGS = check_override_flags(sys.argv, DEFAULT_CONFIG)
_CONFIG = config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "Experiment config.")
_LOGDIR = flags.DEFINE_string("logdir", "runs/default", "Run directory (metrics, checkpoints).")
_BIND = flags.DEFINE_string(
    "bind",
    "127.0.0.1",
    "Address to serve actors on (0.0.0.0 for remote actors, with --config.transport.credentials).",
)
_PORT = flags.DEFINE_integer("port", 50051, "Port to serve actors on (0 = any free port).")


def main(argv):
    del argv
    console.setup()
    add_env_kwargs(_CONFIG.value, _ENV_KWARGS)
    learner.main(_CONFIG.value, _LOGDIR.value, _BIND.value, _PORT.value)


if __name__ == "__main__":
    check_flags()  # a mistyped flag gets the one to write, before absl refuses it
    app.run(main)
