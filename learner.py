"""Central server: inference for all actors, trajectory recording, learning, metrics, checkpoints.

  python learner.py --config=configs/cartpole_ppo.py --logdir=runs/cartpole [--port=50051]

A run restarted with the same --logdir resumes from its latest checkpoint. SIGTERM/SIGINT save a
checkpoint and exit within checkpoint.stop_grace_s (60 s; an update in progress is abandoned; a
second signal 2 s or more later exits at once); actors keep retrying and rejoin the restarted
learner. When training completes, every actor stream ends normally and the actors exit.
"""

import faulthandler
import os
import signal
import sys
import threading
import time

from absl import app, flags, logging
from ml_collections import config_flags

from seedlike import xla_flags
from seedlike.checkpoint import CheckpointError
from seedlike.config import ConfigError, add_env_kwargs, check_override_flags
from seedlike.distributed import PeerLost
from seedlike.rpc.security import TransportError
from seedlike.storage import StorageError
from seedlike.training import train

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


REPEAT_S = 2.0  # a stop signal this long after the first exits at once


def main(argv):
    del argv
    xla_flags.tune_cpu()  # before the first JAX computation initializes the CPU backend
    xla_flags.cache_compilations()
    stop = threading.Event()
    grace_s = float(_CONFIG.value.checkpoint.stop_grace_s)

    first_signal: list[float] = []

    def on_signal(signum, frame):
        del frame
        if first_signal:
            # Ctrl-C reaches the whole process group and train.sh passes it on too: only a
            # signal well after the first is a second request.
            if time.monotonic() - first_signal[0] > REPEAT_S:
                _exit_now(f"signal {signum} again: exiting without a final checkpoint")
            return
        first_signal.append(time.monotonic())
        logging.info("signal %d: saving a checkpoint and stopping", signum)
        stop.set()
        deadline = threading.Timer(grace_s, _stop_overdue, (grace_s, _LOGDIR.value))
        deadline.daemon = True
        deadline.start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    add_env_kwargs(_CONFIG.value, _ENV_KWARGS)
    try:
        train(
            _CONFIG.value,
            _LOGDIR.value,
            bind=_BIND.value,
            port=_PORT.value,
            stop=stop,
            freeze_gc=True,
        )
    except (ConfigError, CheckpointError, TransportError) as e:
        raise SystemExit(f"error: {e}") from None
    except StorageError as e:
        # orbax leaves threads behind that wait forever for the failed save: exit without them.
        _exit_now(str(e))
    except PeerLost as e:
        # Its checkpoint is saved (process 0); JAX's exit handler would wait for the lost process.
        _exit_now(str(e))


def _stop_overdue(grace_s: float, logdir: str) -> None:
    """The stop grace ran out: what every thread was doing goes to a file, since the one line
    cannot say which update, compile or save held the learner."""
    stacks = os.path.join(logdir, "stop_stacks.txt")
    try:
        with open(stacks, "w") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
        where = f"; thread stacks in {stacks}"
    except OSError as e:  # the stacks still say why: on the console, above this line
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        where = f"; thread stacks above ({stacks}: {e.strerror})"
    _exit_now(
        f"the learner did not stop within {grace_s:g} s of the stop request (an update, compile "
        "or save still running); exiting without a final checkpoint, the previous one stands "
        f"(checkpoint.stop_grace_s){where}"
    )


def _exit_now(message: str) -> None:
    """Prints the one-line error and exits at once: no exit handlers (threads that would never
    finish may be left behind), the log flushed first."""
    logging.flush()
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(1)


if __name__ == "__main__":
    app.run(main)
