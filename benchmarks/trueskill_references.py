"""Seconds to rate each new TrueSkill reference as the references pile up (seedlike.league.
evaluation.Evaluation.add_reference), for a config's network: fresh networks as the references,
`--count` of them added one after another.

  python -m benchmarks.trueskill_references --count=8                   # as configured
  python -m benchmarks.trueskill_references --count=8 --opponents=0 --max_references=0  # all
"""

import tempfile
import time

import jax
from absl import app, flags

from benchmarks import results_io
from networks import make_network
from seedlike.config import load_config_file
from seedlike.envs.envpool_env import make_env_spec
from seedlike.league.evaluation import Evaluation

_CONFIG = flags.DEFINE_string("config", "configs/connect4_selfplay.py", "A two-player config.")
_COUNT = flags.DEFINE_integer("count", 8, "References added.")
_OPPONENTS = flags.DEFINE_integer(
    "opponents", None, "league.reference_opponents (default: the config's; 0: all)."
)
_MAX = flags.DEFINE_integer(
    "max_references", None, "league.max_references (default: the config's; 0: no limit)."
)
_OUT = flags.DEFINE_string("out", None, "JSON path.")


def main(_):
    config = load_config_file(_CONFIG.value)
    with config.unlocked():
        if _OPPONENTS.value is not None:
            config.league.reference_opponents = _OPPONENTS.value
        if _MAX.value is not None:
            config.league.max_references = _MAX.value
    network = make_network(config.network, make_env_spec(config.env))
    with tempfile.TemporaryDirectory() as snapshots:
        evaluation = Evaluation(config.league, config.env.name, network, snapshots, config.seed)
        evaluation.setup()
        seconds, before = [], []
        for version in range(1, _COUNT.value + 1):
            params = {"params": network.init(jax.random.key(version)), "obs_norm": {}}
            before.append(len(evaluation.evaluator.references))
            start = time.perf_counter()
            evaluation.add_reference(version, params)
            seconds.append(time.perf_counter() - start)
    results_io.write(
        "trueskill_references",
        {
            "config": _CONFIG.value,
            "reference_games": int(config.league.reference_games),
            "reference_opponents": int(config.league.reference_opponents),
            "max_references": int(config.league.max_references),
            "references_before": before,
            "seconds_per_reference": seconds,
        },
        _OUT.value,
    )


if __name__ == "__main__":
    app.run(main)
