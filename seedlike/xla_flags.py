"""XLA settings applied by the entrypoints before JAX starts its backends (no JAX import here).

jaxlib 0.10's XLA:CPU hands convolutions to YNNPACK by default, which is 3-5x slower than XLA's own
(Eigen) convolutions for the CNN torsos here: the Nature CNN update step takes ~320 ms instead of
~70 ms for 256 frames (benchmarks/RESULTS.md). Only the convolution part is switched off; dots and
reductions stay with YNNPACK. The flag only affects the CPU backend.
"""

import logging
import os

YNN_FLAG = "xla_cpu_experimental_ynn_fusion_type"
CONVOLUTIONS_OFF = f"--{YNN_FLAG}=-individual_convolution"


def tune_cpu() -> None:
    """Adds the flag to XLA_FLAGS unless the user set that flag already; keeps JAX's note that a
    machine has no TPU (logged at INFO by every process) off the console."""
    flags = os.environ.get("XLA_FLAGS", "")
    if YNN_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {CONVOLUTIONS_OFF}".strip()
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
