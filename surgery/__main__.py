"""Applies surgery to a run checkpoint and writes a new run directory that the learner resumes.

  python -m surgery --checkpoint=runs/old --new_config=configs/big.py --out=runs/big
  python -m surgery --checkpoint=runs/old/checkpoints/292 --plan=plan.json --out=runs/new
  scripts/train.sh --logdir=runs/big --config=runs/big/config.py   # learner and actors

--new_config.a.b=v (and --old_config.a.b=v, for checkpoints written before configs were stored
with them) override configs like --config.a.b=v does for the learner. Without
--plan the plan is derived from the stored (old) config and the new one; without --new_config the
network section is read from the plan's result. The verification report is printed; nothing is
written if it exceeds --tolerance unless --force.
"""

import json
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from seedlike.cli import check_override_flags
from seedlike.config import renamed
from seedlike.runtime import console


def _check_config_overrides(argv, prefix):
    """Readable errors for misspelled --<prefix>.x=v keys (see seedlike.config)."""
    relevant = [a for a in argv[1:] if a.startswith(prefix + ".") or a.startswith(prefix + "=")]
    if any(a.startswith(prefix + ".") for a in relevant):
        if not any(a.startswith(prefix + "=") for a in relevant):
            sys.exit(f"{prefix}.<key>=<value> overrides need {prefix}=<config file>")
        for i, arg in enumerate(argv):  # settings renamed since (seedlike.config.RENAMED_KEYS)
            key = arg[len(prefix) + 1 :].split("=", 1)[0] if arg.startswith(prefix + ".") else ""
            if renamed(key) != key:
                print(f"warning: {prefix}.{key} is now {prefix}.{renamed(key)}", file=sys.stderr)
                argv[i] = arg.replace(key, renamed(key), 1)
        relevant = [a for a in argv[1:] if a.startswith(prefix + ".") or a.startswith(prefix + "=")]
        check_override_flags([argv[0], *(a.replace(prefix, "--config", 1) for a in relevant)], "")


for _prefix in ("--new_config", "--old_config"):
    _check_config_overrides(sys.argv, _prefix)
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "Run directory, its checkpoints/ directory or one step directory."
)
_PLAN = flags.DEFINE_string("plan", None, "Surgery plan JSON file (default: derived).")
_NEW_CONFIG = config_flags.DEFINE_config_file("new_config", None, "The new experiment config.")
_OLD_CONFIG = config_flags.DEFINE_config_file(
    "old_config", None, "Config that wrote the checkpoint, if it has none stored (old runs)."
)
_OUT = flags.DEFINE_string("out", None, "New run directory to write.")
_LR_ZERO_UPDATES = flags.DEFINE_integer(
    "lr_zero_updates", 10, "Learner updates with learning rate 0 after surgery."
)
_RESET_OPTIMIZER = flags.DEFINE_bool(
    "reset_optimizer", False, "Zero Adam's moments instead of transforming them."
)
_TOLERANCE = flags.DEFINE_float(
    "tolerance", 1e-5, "Largest accepted max |Δ logits|, |Δ value| or KL."
)
_FORCE = flags.DEFINE_bool("force", False, "Write even if verification exceeds the tolerance.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Transform and verify only; write nothing.")
_SEED = flags.DEFINE_integer("seed", 0, "Seeds new weights and the verification batch.")
_MODE = flags.DEFINE_enum(
    "mode", "random", ["random", "replicate"], "Derived plans: new units random or Net2Wider."
)
_LSTM_NOISE = flags.DEFINE_float(
    "lstm_noise", 0.0, "Derived plans: noise of LSTM widening (0 = exact, > 0 approximate)."
)
_NEW_ACTION_VALUE = flags.DEFINE_float(
    "new_action_value", 0.0, "Derived plans: a Q head's new actions' value (dueling: V(s))."
)
flags.mark_flags_as_required(["checkpoint", "out"])


def main(argv):
    del argv
    console.setup()
    logging.set_verbosity(logging.WARNING)  # orbax logs every step of every save at INFO
    from seedlike.checkpoint import CheckpointError
    from surgery import Plan, SurgeryError, SurgeryRefused, run_surgery

    plan = None
    if _PLAN.value:
        with open(_PLAN.value) as f:
            plan = Plan.from_json(f.read())
    try:
        outcome = run_surgery(
            _CHECKPOINT.value,
            _OUT.value,
            plan=plan,
            new_config=_NEW_CONFIG.value,
            old_config=_OLD_CONFIG.value,
            lr_zero_updates=_LR_ZERO_UPDATES.value,
            reset_optimizer=_RESET_OPTIMIZER.value,
            tolerance=_TOLERANCE.value,
            force=_FORCE.value,
            dry_run=_DRY_RUN.value,
            seed=_SEED.value,
            mode=_MODE.value,
            lstm_noise=_LSTM_NOISE.value,
            new_action_value=_NEW_ACTION_VALUE.value,
        )
    except SurgeryRefused as e:
        for name, report in e.reports.items():
            print(f"{name}: {report}")
        sys.exit(f"refused: {e}")
    except (SurgeryError, CheckpointError, FileNotFoundError) as e:
        sys.exit(f"surgery failed: {e}")

    for warning in outcome.warnings:
        logging.warning("%s", warning)
    print(f"plan:\n{outcome.plan}")
    print("parameter changes:\n" + json.dumps(outcome.changes, indent=2))
    print(f"learner policy: {outcome.report}")
    for name, report in outcome.snapshot_reports.items():
        print(f"snapshot {name}: {report}")
    if not outcome.written:
        print("dry run: nothing written")
        return
    config_file = os.path.join(outcome.out, "config.py")
    print(
        f"wrote {outcome.out}/checkpoints/{outcome.step} (learning rate 0 until sgd step "
        f"{outcome.lr_zero_until}); resume with:\n"
        f"  scripts/train.sh --logdir={outcome.out} --config={config_file}\n"
        "(env steps count on from the old run: raise --config.total_env_steps to train on)"
    )


if __name__ == "__main__":
    app.run(main)
