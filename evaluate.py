"""Scores a trained policy, in one command:

  python evaluate.py --checkpoint=runs/cartpole [--episodes=10] [--greedy] [--out=FILE.json]
  python evaluate.py --checkpoint=runs/c4 --opponent=scripted --episodes=100   # two-player games

plays --episodes episodes of the checkpoint's own env and reports the return and the length
(mean ± std, 95% interval of the mean, min, max; in two-player games also wins, draws and losses
against --opponent: self, random, scripted or another run). Writes --out (JSON, default
<run>/evaluation.json) and the same as Markdown beside it, and prints the Markdown.

With --test_levels it runs the generalization protocol instead, for a run trained on numbered
levels (Gotta Learn Fast; seedlike/generalization.py; Procgen: env.kwargs num_levels /
start_level):

  python evaluate.py --checkpoint=runs/coinrun --test_levels=200:300 --episodes=10 \
      --finetune_levels=200:205 --finetune_steps=100000 --out=runs/coinrun/generalization.json

1. zero-shot: the policy and a random policy on `--train_levels` (default: up to
   --max_train_levels of the run's own training levels) and on the held-out `--test_levels`,
   `--episodes` episodes per level; per-level means with 95% intervals, the mean over each set, and
   the generalization gap (train - test);
2. with --finetune_levels: for each, a new run from the checkpoint (config init_from) and one from
   scratch train on that level alone for --finetune_steps env steps (scripts/train.sh, the run's
   own config), then both and the zero-shot policy are scored there.

It writes --out (default <run>/generalization.json) and the Markdown beside it.
"""

import os
import sys

from absl import app, flags

from seedlike import generalization as gen
from seedlike.checkpoint import CheckpointError, load_checkpoint
from seedlike.cli import check_flags
from seedlike.runtime import console

ROOT = os.path.dirname(os.path.abspath(__file__))
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Run, checkpoints/ or step directory.")
_OPPONENT = flags.DEFINE_string(
    "opponent", "self", "Two-player games: self, random, scripted (Connect Four) or a run."
)
_TEST = flags.DEFINE_string(
    "test_levels", "", "The generalization protocol's held-out levels: START:STOP[:STEP] or a,b,c."
)
_TRAIN = flags.DEFINE_string(
    "train_levels", "", "Training levels to score (default: the run's own, see max_train_levels)."
)
_MAX_TRAIN = flags.DEFINE_integer(
    "max_train_levels", 100, "Without --train_levels: score this many of the run's levels."
)
_EPISODES = flags.DEFINE_integer("episodes", 10, "Episodes (per level, with --test_levels).")
_GREEDY = flags.DEFINE_bool("greedy", False, "Most likely actions instead of sampled ones.")
_FINETUNE = flags.DEFINE_string("finetune_levels", "", "Held-out levels to fine-tune on.")
_FINETUNE_STEPS = flags.DEFINE_integer("finetune_steps", 100_000, "Env steps per fine-tuning run.")
_NUM_ACTORS = flags.DEFINE_integer("num_actors", 2, "Actors of each fine-tuning run.")
_OUT = flags.DEFINE_string(
    "out", "", "JSON report (default <run>/evaluation.json, or generalization.json)."
)
_SEED = flags.DEFINE_integer("seed", 0, "Seeds envs and sampling.")


def score(network, params, env_config, levels, describe):
    policy = gen.play_levels(
        network, params, env_config, levels, _EPISODES.value, _GREEDY.value, _SEED.value
    )
    rand = gen.play_levels(network, None, env_config, levels, _EPISODES.value, seed=_SEED.value + 1)
    return {"describe": describe, "policy": gen.summarize(policy), "random": gen.summarize(rand)}


def finetune(run, config, network, params, level, out_dir):
    """Zero-shot, fine-tuned and from-scratch scores on one held-out level; the runs go to
    <out_dir>/finetune_<level>_{finetuned,scratch}."""
    import seedlike

    out = {"level": level}
    base = os.path.join(out_dir, f"finetune_{level}")
    env_config = config.env
    out["zero_shot"] = gen.summarize(
        gen.play_levels(network, params, env_config, [level], _EPISODES.value, _GREEDY.value)
    )
    for name, init in (("finetuned", run), ("scratch", "")):
        logdir = f"{base}_{name}"
        overrides = {
            "env.kwargs.num_levels": 1,
            "env.kwargs.start_level": level,
            "total_env_steps": _FINETUNE_STEPS.value,
            "init_from": init,
            "log.wandb_mode": "disabled",
        }
        job = seedlike.train(
            f"configs/of_run.py:{os.path.abspath(run)}", logdir, _NUM_ACTORS.value, overrides
        )
        if job.wait() != 0:
            raise SystemExit(f"error: the {name} run on level {level} failed; see {logdir}")
        _, net, state, _ = load_checkpoint(logdir)
        trained = {"params": state.params, "obs_norm": state.obs_norm}
        scores = gen.play_levels(
            net, trained, env_config, [level], _EPISODES.value, _GREEDY.value, _SEED.value
        )
        out[name] = gen.summarize(scores)
    return out


def main(argv):
    del argv
    console.setup()
    if not _CHECKPOINT.value:
        raise SystemExit("error: --checkpoint=RUN is required (a run, checkpoints/ or step dir)")
    if not _TEST.value:
        return evaluate_policy()
    try:
        config, network, state, meta = load_checkpoint(_CHECKPOINT.value)
        test = gen.parse_levels(_TEST.value)
        kwargs = config.env.kwargs
        if "num_levels" not in kwargs:
            raise ValueError(f"{config.env.name}: the run has no numbered levels (env.kwargs)")
        # start_level: envpool Procgen's own default (0) where the run did not set it.
        first, count = int(kwargs.get("start_level", 0)), int(kwargs.num_levels)
        train = gen.parse_levels(_TRAIN.value) if _TRAIN.value else None
        if train is None:
            if count <= 0:
                raise ValueError("the run trained on unrestricted levels: pass --train_levels")
            train = list(range(first, first + min(count, _MAX_TRAIN.value)))
        finetune_levels = gen.parse_levels(_FINETUNE.value) if _FINETUNE.value else []
    except (CheckpointError, OSError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    overlap = sorted(set(test) & set(range(first, first + count))) if count > 0 else test
    if overlap:
        print(f"warning: test levels {overlap[:5]}... are training levels", file=sys.stderr)
    run = _CHECKPOINT.value
    out = _OUT.value or os.path.join(run, "generalization.json")
    params = {"params": state.params, "obs_norm": state.obs_norm}
    report = {
        "checkpoint": f"{run}@{meta.get('policy_version')}",
        "env": config.env.name,
        "env_steps": meta.get("env_steps"),
        "episodes": _EPISODES.value,
        "greedy": _GREEDY.value,
        "train": score(network, params, config.env, train, _describe(train)),
        "test": score(network, params, config.env, test, _describe(test)),
    }
    report["gap"] = (
        report["train"]["policy"]["score"]["mean"] - report["test"]["policy"]["score"]["mean"]
    )
    if finetune_levels:
        report["finetune"] = {
            "steps": _FINETUNE_STEPS.value,
            "levels": [
                finetune(run, config, network, params, level, os.path.dirname(os.path.abspath(out)))
                for level in finetune_levels
            ],
        }
    json_path, md_path = gen.write(report, out)
    print(gen.markdown(report))
    print(f"wrote {json_path} and {md_path}")


def evaluate_policy() -> None:
    from seedlike import scores

    run = _CHECKPOINT.value
    try:
        report = scores.evaluate(
            run, _EPISODES.value, _GREEDY.value, _OPPONENT.value, seed=_SEED.value
        )
    except (CheckpointError, OSError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    folder = run if os.path.isdir(os.path.join(run, "checkpoints")) else os.path.dirname(run)
    out = _OUT.value or os.path.join(folder, "evaluation.json")
    json_path, md_path = scores.write(report, out)
    print(scores.markdown(report))
    print(f"wrote {json_path} and {md_path}")


def _describe(levels) -> str:
    return f"{len(levels)} levels, {min(levels)}..{max(levels)}"


if __name__ == "__main__":
    check_flags()  # a mistyped flag gets the one to write, before absl refuses it
    app.run(main)
