"""Watch a trained policy: record its episodes to a GIF.

  python watch.py --checkpoint=runs/cartpole --out=cartpole.gif
  python watch.py --checkpoint=runs/connect4 --opponent=scripted --episodes=3 --out=c4.gif

--checkpoint takes a run directory, its checkpoints/ directory (latest step) or one step
directory. The policy plays its most likely action (--nogreedy samples, as in training). In
two-player games it is player 0; --opponent is `self` (the same policy), `random`, `scripted`
(Connect Four) or another run, checkpoint or league snapshot.
"""

from absl import app, flags

from seedlike.cli import check_flags
from seedlike.runtime import console, xla_flags

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Run dir, checkpoints dir or step dir.")
_OUT = flags.DEFINE_string("out", "episode.gif", "GIF to write.")
_EPISODES = flags.DEFINE_integer("episodes", 1, "Episodes to record.")
_MAX_FRAMES = flags.DEFINE_integer("max_frames", 3000, "Stop after this many frames.")
_FPS = flags.DEFINE_float("fps", 30.0, "Frames per second of the GIF.")
_GREEDY = flags.DEFINE_bool("greedy", True, "Play the most likely legal action.")
_OPPONENT = flags.DEFINE_string("opponent", "self", "Two-player games: self, a bot or a path.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the env and of sampling.")
flags.mark_flag_as_required("checkpoint")


def main(argv):
    del argv
    console.setup()
    xla_flags.prepare()
    from seedlike import watch
    from seedlike.checkpoint import CheckpointError
    from seedlike.league import games

    try:
        opponent = None
        if _OPPONENT.value != "self":
            opponent = games.make_agent(_OPPONENT.value, greedy=_GREEDY.value)
        recording = watch.record_episodes(
            _CHECKPOINT.value,
            episodes=_EPISODES.value,
            greedy=_GREEDY.value,
            opponent=opponent,
            seed=_SEED.value,
            max_frames=_MAX_FRAMES.value,
        )
    except (FileNotFoundError, CheckpointError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    watch.save_gif(recording.frames, _OUT.value, _FPS.value)
    returns = ", ".join(f"{r:g}" for r in recording.returns) or "none finished"
    print(
        f"wrote {_OUT.value}: {len(recording.frames)} frames of {recording.env_name}, "
        f"episode returns: {returns}"
    )


if __name__ == "__main__":
    check_flags()  # a mistyped flag gets the one to write, before absl refuses it
    app.run(main)
