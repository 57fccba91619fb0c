"""A run's own config, as stored with its latest checkpoint: the starting point of new runs that
continue from it, e.g. fine-tuning it on other levels (evaluate.py does this):

  scripts/train.sh --config=configs/of_run.py:runs/coinrun --config.init_from=runs/coinrun \
      --config.env.kwargs.start_level=205 --config.env.kwargs.num_levels=1 --logdir=runs/ft205
"""

from seedlike.checkpoint import CheckpointError, stored_config
from seedlike.config import from_dict


def get_config(run: str):
    if not run:
        raise SystemExit("configs/of_run.py needs a run: --config=configs/of_run.py:RUN_DIR")
    try:
        c = from_dict(stored_config(run))
    except (OSError, CheckpointError) as e:
        raise SystemExit(f"configs/of_run.py:{run}: {e}") from None
    c.lock()
    return c
