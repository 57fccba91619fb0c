"""Central server: inference for all actors, trajectory recording, learning, metrics, checkpoints.

  python learner.py --config=configs/cartpole_ppo.py --logdir=runs/cartpole [--port=50051]

A run restarted with the same --logdir resumes from its latest checkpoint. SIGTERM/SIGINT save a
checkpoint, end every actor stream and exit.
"""

import signal
import threading

from absl import app, flags, logging
from ml_collections import config_flags

from seedlike.training import train

_CONFIG = config_flags.DEFINE_config_file("config", "configs/cartpole_ppo.py", "Experiment config.")
_LOGDIR = flags.DEFINE_string("logdir", "runs/default", "Run directory (metrics, checkpoints).")
_BIND = flags.DEFINE_string(
    "bind", "127.0.0.1", "Address to serve actors on (0.0.0.0 for remote actors)."
)
_PORT = flags.DEFINE_integer("port", 50051, "Port to serve actors on (0 = any free port).")


def main(argv):
    del argv
    stop = threading.Event()

    def on_signal(signum, frame):
        del frame
        logging.info("signal %d: saving a checkpoint and stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    train(_CONFIG.value, _LOGDIR.value, bind=_BIND.value, port=_PORT.value, stop=stop)


if __name__ == "__main__":
    app.run(main)
