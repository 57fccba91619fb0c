"""One learner process of tests/learning/test_multihost.py, joined to the others by
jax.distributed (gloo collectives on loopback; the test gives each process one CPU device). Writes
what it computed to OUT (npz).

  python -m tests.learning.multihost_worker COORDINATOR NUM_PROCESSES PROCESS_ID VARIANT OUT
"""

import sys

import jax
import numpy as np

from networks import make_network
from seedlike.learning.update import Learner
from seedlike.runtime import distributed
from tests.helpers import LEARNER_SPEC as SPEC
from tests.helpers import random_unrolls, variant_config

# Above 2**31: counters must survive the broadcast whole.
BASE_ENV_STEPS = 3_000_000_007


def main(coordinator, num_processes, process_id, variant, out):
    num_processes = int(num_processes)
    config = variant_config(variant)
    config.distributed.coordinator = coordinator
    config.distributed.num_processes = num_processes
    config.distributed.process_id = me = int(process_id)
    config.distributed.timeout_s = 60
    distributed.initialize(config)
    network = make_network(config.network, SPEC)
    learner = Learner(config, network, window_s=config.server.fair_window_s)
    initial = learner.init_state(jax.random.key(0))

    # Only process 0's state and counters may count: the others start from something else.
    own = initial if me == 0 else learner.init_state(jax.random.key(me))
    state, counters = distributed.broadcast_start(
        own, {"env_steps": BASE_ENV_STEPS if me == 0 else 5, "episodes": 11 if me == 0 else 0}
    )
    learner.set_state(state)

    n = learner.local_batch_unrolls
    lockstep = distributed.Lockstep(learner.devices, counters["env_steps"])
    metrics, stops = [], []
    for i in range(2):
        stops.append(lockstep.agree(local_steps=100 * (i + 1) * (me + 1), stop=False))
        unrolls = random_unrolls(
            network, initial.params, initial.obs_norm, config.batch_unrolls, config.unroll_length, i
        )
        mine = jax.tree.map(lambda x: x[me * n : (me + 1) * n], unrolls)
        metrics.append(learner.update(mine))
    stops.append(lockstep.agree(local_steps=1000, stop=me == num_processes - 1))

    final = learner.state()
    leaves = {
        f"state/{jax.tree_util.keystr(path)}": np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(final)[0]
    }
    np.savez(
        out,
        **leaves,
        metrics=np.array([[m[k] for k in sorted(m)] for m in metrics]),
        metric_keys=np.array(sorted(metrics[0])),
        counters=np.array([counters["env_steps"], counters["episodes"]], np.int64),
        env_steps=np.int64(lockstep.env_steps(0)),
        stops=np.array(stops),
        local_batch_unrolls=n,
        devices=np.array([learner.num_devices, learner.num_local]),
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
