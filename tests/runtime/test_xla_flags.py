"""The entrypoints' JAX settings (seedlike/runtime/xla_flags.py): the persistent compilation
cache."""

import json
import os
import subprocess
import sys

import pytest

from tests.procs import ROOT

# One jitted program in a fresh process; prints the cache folder JAX uses and how many programs
# were read from it.
SCRIPT = """
import json, jax, jax.numpy as jnp
from seedlike.runtime import xla_flags
xla_flags.cache_compilations()
hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None
)
jax.jit(lambda x: jnp.tanh(x @ x).sum())(jnp.ones((64, 64))).block_until_ready()
print(json.dumps({"dir": jax.config.jax_compilation_cache_dir, "hits": len(hits)}))
"""


def run(env):
    env = {**{k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}, **env}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_a_second_process_reads_the_program_the_first_compiled(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    first, second = run(env), run(env)
    parent, key = os.path.split(first["dir"])
    assert parent == str(tmp_path / "seedlike" / "jax") and len(key) == 12, first
    assert second["dir"] == first["dir"] and os.listdir(first["dir"])
    assert first["hits"] == 0 and second["hits"] >= 1, (first, second)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_a_cache_folder_the_user_set_is_left_alone(tmp_path):
    folder = str(tmp_path / "mine")
    assert run({"JAX_COMPILATION_CACHE_DIR": folder})["dir"] == folder
    # An empty value turns the cache off.
    assert not run({"JAX_COMPILATION_CACHE_DIR": "", "XDG_CACHE_HOME": str(tmp_path)})["dir"]
    assert not os.path.exists(tmp_path / "seedlike")
