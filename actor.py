"""Actor: steps environments (any env backend: envpool, PettingZoo, Gymnasium) and streams them to
the central server (no model here); the actor is seedlike.actor.Actor.

  python actor.py --server=127.0.0.1:50051 --config=configs/cartpole_ppo.py --actor_id=0
  python actor.py --server=HOST:P0,HOST:P1 --config=configs/coins_teams.py   # a population of 2

Exit codes: 0 training over; 1 server never reached within actor.first_connect_s, or lost for
actor.give_up_s; 2 rejected by the server, or a config, credentials or env that cannot work
(restarting cannot fix it); 130 a second stop signal.
"""

import os
import signal
import sys
import threading

from absl import app, flags
from ml_collections import config_flags

from seedlike.actor import EXIT_REJECTED, Actor
from seedlike.cli import add_env_kwargs, check_flags, check_override_flags
from seedlike.config import ConfigError, actor_sizing, validate
from seedlike.rpc.security import TransportError
from seedlike.runtime import console

DEFAULT_CONFIG = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "configs", "cartpole_ppo.py"
)
# ml_collections applies --config.x overrides while defining the flag; check them first.
_ENV_KWARGS = check_override_flags(sys.argv, DEFAULT_CONFIG)
_CONFIG = config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "Experiment config.")
_SERVER = flags.DEFINE_string(
    "server",
    "127.0.0.1:50051",
    "host:port of the learner; a population's learners as a comma-separated list, member 0 first "
    "(each gets its own teams' agents).",
)
_ACTOR_ID = flags.DEFINE_integer("actor_id", 0, "Distinct id per actor (seeds its envs).")
_CORES = flags.DEFINE_integer(
    "cores",
    0,
    "Cores this actor may use: sizes env.num_envs, env.batch_envs and env.num_threads unless "
    "given (seedlike.config.actor_sizing; scripts/train.sh sets it on hosts of 8+ cores). "
    "0: the config's values.",
)


def _is_address(value: str) -> bool:
    def one(address):
        host, _, port = address.rpartition(":")
        return bool(host) and port.isdigit() and 0 < int(port) < 65536

    return all(one(a) for a in value.split(","))


# Checked here: gRPC would take a malformed address as a server that is down and retry for
# actor.give_up_s.
flags.register_validator(
    "server",
    _is_address,
    "--server must be HOST:PORT (or a comma-separated list), e.g. 127.0.0.1:50051 or learner:50051",
)


def main(argv):
    del argv
    console.setup()
    stop = threading.Event()

    def request_stop(*_):
        if stop.is_set():  # the second request: do not wait for the step in flight
            raise SystemExit(130)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    add_env_kwargs(_CONFIG.value, _ENV_KWARGS)
    if _CORES.value > 0:
        given = {a.split("=", 1)[0].removeprefix("--config.env.") for a in sys.argv[1:]}
        with _CONFIG.value.unlocked():
            _CONFIG.value.env.update(actor_sizing(_CONFIG.value.env, _CORES.value, given))
    try:
        validate(_CONFIG.value)
        actor = Actor(_CONFIG.value, _SERVER.value.split(","), _ACTOR_ID.value, stop)
    except (ConfigError, TransportError) as e:  # restarting the actor cannot fix these
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_REJECTED)
    sys.exit(actor.run())


if __name__ == "__main__":
    check_flags()  # a mistyped flag gets the one to write, before absl refuses it
    app.run(main)
