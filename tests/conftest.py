"""Test setup: two forced CPU devices (before JAX is imported) and offline wandb."""

import os

from seedlike import xla_flags

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
xla_flags.tune_cpu()
