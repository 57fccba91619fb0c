"""configs/connect4_league.py on the device: the main agent, main exploiter and league exploiter
of the SEED path's league of roles, each an on-device run of configs/pgx_connect4.py (pgx's
Connect Four inside its learner's program, no actors), started together by

  python -m seedlike.launch.league --config=configs/pgx_connect4_league.py --logdir=runs/c4devleague

Each role reads the others' snapshots from their directories, as a SEED role does; the main
agent rates itself with TrueSkill beside its program. python -m seedlike.launch.league.report
plots who beat whom; RESULTS has the 60-minute run.
  python play.py --a=runs/c4devleague/main --b=scripted --games=2000 --greedy
"""

import os

from seedlike.config import load_config_file

HERE = os.path.dirname(__file__)


def get_config():
    c = load_config_file(os.path.join(HERE, "pgx_connect4.py"))
    roles = load_config_file(os.path.join(HERE, "connect4_league.py")).league
    with c.unlocked():
        bound = c.league.max_snapshots  # the device's slots
        c.league = roles
        c.league.max_snapshots = bound
    c.lock()
    return c
