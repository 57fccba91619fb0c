"""XLA and JAX settings applied by the entrypoints before their first JAX computation.

The compilation cache: compiled programs are kept on disk between runs (`cache_compilations`).

jaxlib 0.10's XLA:CPU hands convolutions to YNNPACK by default, which is several times slower than
XLA's own (Eigen) convolutions for the CNN torsos here (benchmarks/RESULTS.md, "Atari
throughput"). Only the convolution part is switched off; dots and
reductions stay with YNNPACK. The flag only affects the CPU backend.
"""

import hashlib
import os
import platform

YNN_FLAG = "xla_cpu_experimental_ynn_fusion_type"
CONVOLUTIONS_OFF = f"--{YNN_FLAG}=-individual_convolution"


def prepare() -> None:
    """What an entrypoint that computes with JAX applies before its first computation (which
    initializes the CPU backend and reads the flags): `tune_cpu`, then `cache_compilations`."""
    tune_cpu()
    cache_compilations()


def tune_cpu() -> None:
    """Adds the flag to XLA_FLAGS unless the user set that flag already."""
    flags = os.environ.get("XLA_FLAGS", "")
    if YNN_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {CONVOLUTIONS_OFF}".strip()


def cache_compilations() -> None:
    """Keeps compiled programs on disk (JAX's persistent compilation cache), so that a restarted,
    resumed or repeated run loads its update, policy and init programs instead of compiling them
    again (benchmarks/RESULTS.md, "Faster starts"). The folder is $XDG_CACHE_HOME/seedlike/jax/<this
    CPU's key> (~/.cache/...): JAX keys entries by the program, its compile options, the backend and
    the JAX version, not by the CPU features XLA:CPU compiles for, so machines of other CPUs that
    share a home folder each get their own. Results do not depend on the cache. It grows slowly (one
    entry per program, config and JAX version); deleting it is always safe. Left to the user where
    JAX_COMPILATION_CACHE_DIR is set (empty: no cache)."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    import jax

    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    folder = os.path.join(base, "seedlike", "jax", _cpu_key())
    jax.config.update("jax_compilation_cache_dir", folder)
    # JAX's default (1 s) would leave out most policy and init programs, which compile faster.
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


def _cpu_key() -> str:
    """The machine's CPU model and feature flags, hashed."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags"))][:2]
    except OSError:  # not Linux
        lines = [platform.processor()]
    return hashlib.sha256("".join([platform.machine(), *lines]).encode()).hexdigest()[:12]
