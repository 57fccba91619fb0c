"""Serve a frozen checkpoint to actors, without learning: evaluation, demos, fixed opponents.

  python inference_server.py --checkpoint=runs/cartpole/checkpoints --logdir=runs/cartpole_eval
  python inference_server.py --checkpoint=runs/cartpole --greedy --episodes=100 --port=0
  python actor.py --server=127.0.0.1:50052 --config=configs/cartpole_ppo.py --actor_id=0

--checkpoint takes a run directory, its checkpoints/ directory (latest step) or one step
directory. Episode statistics go to <logdir>/metrics.jsonl every --interval_s seconds.
"""

import json
import signal
import threading

from absl import app, flags, logging

from seedlike.checkpoint import CheckpointError
from seedlike.cli import check_flags
from seedlike.inference_server import serve_checkpoint
from seedlike.rpc.security import TransportError
from seedlike.runtime import console, xla_flags

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Run dir, checkpoints dir or step dir.")
_LOGDIR = flags.DEFINE_string("logdir", "runs/serve", "Where metrics.jsonl and the address go.")
_BIND = flags.DEFINE_string(
    "bind",
    "127.0.0.1",
    "Address to serve on (0.0.0.0 for remote actors, with --config.transport.credentials).",
)
_PORT = flags.DEFINE_integer("port", 50052, "Port to serve on (0 = any free port).")
_MAX_ENV_STEPS = flags.DEFINE_integer("max_env_steps", 0, "Stop after this many steps (0 = never).")
_INTERVAL = flags.DEFINE_float("interval_s", 10.0, "Seconds between metrics rows.")
_GREEDY = flags.DEFINE_bool("greedy", False, "Play the most likely legal action, not a sample.")
_EPISODES = flags.DEFINE_integer(
    "episodes",
    0,
    "Stop after this many episodes (0 = never) and report those: an evaluation. With many envs "
    "the first to end lean towards short episodes; ask for several per env.",
)
flags.mark_flag_as_required("checkpoint")


def main(argv):
    del argv
    console.setup()
    xla_flags.prepare()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        summary = serve_checkpoint(
            _CHECKPOINT.value,
            _LOGDIR.value,
            bind=_BIND.value,
            port=_PORT.value,
            stop=stop,
            max_env_steps=_MAX_ENV_STEPS.value,
            interval_s=_INTERVAL.value,
            greedy=_GREEDY.value,
            max_episodes=_EPISODES.value,
        )
    except (FileNotFoundError, CheckpointError, TransportError) as e:
        raise SystemExit(f"error: {e}") from None
    logging.info("served: %s", json.dumps(summary))


if __name__ == "__main__":
    check_flags()  # a mistyped flag gets the one to write, before absl refuses it
    app.run(main)
