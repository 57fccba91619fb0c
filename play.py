"""Play two agents against each other for N games of a two-player envpool game and report
win/draw/loss from the first agent's side with a 95% confidence interval.

  python play.py --a=runs/connect4 --b=scripted --games=400
  python play.py --a=runs/connect4/checkpoints/300 --b=runs/connect4/checkpoints/100 --greedy
  python play.py --a=runs/connect4 --b=scripted --search_depth=3
  python play.py --a=runs/connect4/league/snapshots/400 --b=scripted
  python play.py --a=runs/connect4 --b=human --games=3 --greedy

An agent is a run directory, a checkpoint, a league snapshot, `random`, `scripted` (Connect
Four) or `human` (you type the moves; one game at a time). envpool picks the first mover at random
each game, so both agents play both colours; results are also split by it. With --search_depth,
network agents look that many plies ahead over the true rules and judge the positions beyond by
their value head (seedlike/league/search.py).
"""

import json

from absl import app, flags

from seedlike.checkpoint import CheckpointError
from seedlike.cli import check_flags
from seedlike.league import games
from seedlike.runtime import console, xla_flags

_A = flags.DEFINE_string(
    "a", None, "First agent: run, checkpoint or snapshot path, random, scripted or human."
)
_B = flags.DEFINE_string(
    "b", "random", "Second agent: run, checkpoint or snapshot path, random, scripted or human."
)
_ENV = flags.DEFINE_string("env", None, "envpool task (default: the checkpoint's env).")
_GAMES = flags.DEFINE_integer("games", 400, "Number of games.")
_GREEDY = flags.DEFINE_bool("greedy", False, "Checkpoints play their most likely legal move.")
_SEARCH = flags.DEFINE_integer(
    "search_depth",
    0,
    "Checkpoints pick moves by negamax this many plies deep over the true rules, with their value "
    "head at the leaves (Connect Four, TicTacToe; 0: play the policy).",
)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the envs and of sampling.")
_JSON = flags.DEFINE_bool("json", False, "Print the result as JSON.")
flags.mark_flag_as_required("a")


def main(argv):
    del argv
    console.setup()
    xla_flags.prepare()
    try:
        a, b = (
            games.make_agent(x, greedy=_GREEDY.value, search_depth=_SEARCH.value)
            for x in (_A.value, _B.value)
        )
    except (FileNotFoundError, CheckpointError) as e:
        raise SystemExit(f"error: {e}") from None
    env = _ENV.value or games.game_of((a, b))
    if env is None:
        raise app.UsageError("--env is needed when neither agent is a checkpoint")
    result = games.play_match(env, a, b, _GAMES.value, seed=_SEED.value)
    summary = games.summarize(result)
    if _JSON.value:
        print(json.dumps(summary))
        return
    if summary["games"] < _GAMES.value:
        print(f"the match ended after {summary['games']} of {_GAMES.value} games")
    if not summary["games"]:
        return
    lo, hi = summary["win_rate_ci95"]
    game = env if isinstance(env, str) else env.name
    print(f"{a.name} vs {b.name} on {game}, {summary['games']} games")
    print(
        f"  win {summary['wins']}  draw {summary['draws']}  loss {summary['losses']}   "
        f"win rate {summary['win_rate']:.3f} (95% CI {lo:.3f}-{hi:.3f})"
    )
    print(
        f"  moving first: win rate {summary['win_rate_first']:.3f}   "
        f"moving second: {summary['win_rate_second']:.3f}"
    )


if __name__ == "__main__":
    check_flags()  # a mistyped flag gets the one to write, before absl refuses it
    app.run(main)
