"""Connect Four with league roles (AlphaStar): a main agent, a main exploiter and a league
exploiter, one learner each, started together by

  python -m seedlike.launch.league --config=configs/connect4_league.py --logdir=runs/c4league

The main agent is configs/connect4_selfplay.py's (OpenAI Five sampling over every role's
snapshots, the scripted bot in half of its games) with half of the actors and the first
call on the cores; each exploiter gets a quarter of the actors. The main exploiter plays only the
main agent's newest snapshot and joins the league when it wins 70% of 100 (decayed) games against
it, or after 500k env steps without, and then starts again as a copy of the main agent's newest
snapshot; the league exploiter plays the whole league by PFSP.
python -m seedlike.launch.league.report plots who beat whom over time; RESULTS has 60-minute runs.
  python play.py --a=runs/c4league/main --b=scripted --games=400 --greedy
"""

import os

from seedlike.config import load_config_file


def get_config():
    c = load_config_file(os.path.join(os.path.dirname(__file__), "connect4_selfplay.py"))
    with c.unlocked():
        c.league.roles = ("main", "main_exploiter", "league_exploiter")
        c.league.role_actors = (2, 1, 1)
        # On one machine the main agent comes first: exploiters run at niceness 5 (a third of
        # the main agent's CPU weight each when all are busy). At 10 they got 3% of the core,
        # found no exploit, and the main agent lost to the single-role league (RESULTS.md).
        c.league.role_nice = (0, 5, 5)
        # Exploiters judge their target on recent games (a pair's decayed games add up to at most
        # 200): the main agent keeps changing.
        c.league.payoff_decay = 0.995
        c.league.payoff_prior_games = 1.0
        c.league.exploit_win_rate = 0.7
        c.league.exploit_min_games = 100.0
        c.league.reset_env_steps = 500_000
        c.league.league_exploiter_reset_p = 0.25
        # With line features the main agent is sound in tactics within minutes, and exploiters
        # that start from scratch seldom caught up with it (one exploit in an hour, RESULTS.md);
        # a copy of the newest main agent that learns only against it starts at even and
        # hunts the weaknesses left.
        c.league.exploiter_reset = "main"
    c.lock()
    return c
