"""Renders Kubernetes manifests for a run (seedlike/launch/deploy.py says what they hold).

  scripts/make_credentials.sh creds breakout-learner        # the learner's in-cluster name
  python deploy.py --config=configs/atari_ppo.py --name=breakout --actors=16 \\
      --image=registry.example.com/seedlike:0.1 --credentials=creds --gpus=1 --out=breakout.yaml
  kubectl apply -f breakout.yaml

--config.x=v flags are checked here and passed to the learner and every actor. Actor i's
certificate is DIR/actors/actor-i; those missing are issued here (DIR's ca.key signs them).
"""

import os
import subprocess
import sys

from absl import app, flags
from ml_collections import config_flags

from seedlike.cli import add_env_kwargs, check_flags, check_override_flags
from seedlike.config import ConfigError, actor_sizing, validate
from seedlike.launch.deploy import read_credentials, render, to_yaml
from seedlike.runtime import console

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(ROOT, "configs", "cartpole_ppo.py")
# ml_collections applies --config.x overrides while defining the flag; check them first.
_ENV_KWARGS = check_override_flags(sys.argv, DEFAULT_CONFIG)

_CONFIG = config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "Experiment config.")
_NAME = flags.DEFINE_string("name", None, "Run name: a DNS label (lowercase, digits, '-').")
_IMAGE = flags.DEFINE_string("image", None, "Container image with seedlike (see Dockerfile).")
_ACTORS = flags.DEFINE_integer("actors", 2, "Actor pods.")
_LEARNERS = flags.DEFINE_integer(
    "learners",
    1,
    "Learner pods forming one learner (seedlike/runtime/distributed.py); one GPU host each.",
)
_CREDENTIALS = flags.DEFINE_string(
    "credentials",
    None,
    "Directory from scripts/make_credentials.sh DIR <name>-learner; actor certificates it lacks "
    "are issued into it.",
)
_PORT = flags.DEFINE_integer("port", 50051, "The learner's port.")
_GPUS = flags.DEFINE_integer("gpus", 0, "GPUs for the learner pod.")
_LEARNER_CPU = flags.DEFINE_string("learner_cpu", "4", "CPU request of the learner pod.")
_LEARNER_MEMORY = flags.DEFINE_string("learner_memory", "16Gi", "Memory of the learner pod.")
_ACTOR_CPU = flags.DEFINE_string(
    "actor_cpu",
    "1",
    "CPU request of each actor pod; an actor's one Python thread keeps only a couple of cores "
    "of envs busy, so give bigger budgets to more pods (benchmarks/RESULTS.md, 'Breakout on an "
    "accelerator host').",
)
_ACTOR_MEMORY = flags.DEFINE_string("actor_memory", "2Gi", "Memory of each actor pod.")
_STORAGE = flags.DEFINE_string("storage", "20Gi", "Volume for the learner's run directory.")
_OUT = flags.DEFINE_string("out", None, "Where to write the manifests (YAML).")
flags.mark_flags_as_required(["name", "image", "credentials", "out"])


def cores(cpu: str) -> int:
    """Whole cores of a Kubernetes CPU quantity ("4", "2.5", "500m"), at least one."""
    value = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    return max(1, int(value))


def sizing(config, overrides: list[str], learner_cpu: str, actor_cpu: str) -> list[str]:
    """Settings that follow the pods unless given: one stream front end per four learner cores
    (a pod sees its node's cores, not its own), each actor's envs and envpool threads from its
    cores (seedlike.config.actor_sizing: bigger, asynchronous messages serve faster), and two
    streams per actor pod."""
    given = {a.split("=", 1)[0] for a in overrides}
    out = []
    if "--config.server.front_ends" not in given:
        out.append(f"--config.server.front_ends={cores(learner_cpu) // 4}")
    # An actor pod opens one stream to its learner; two leave room for a reconnect while the old
    # stream is reaped. (Each pod's certificate is one identity however many it opens.)
    if "--config.server.max_streams_per_peer" not in given:
        out.append("--config.server.max_streams_per_peer=2")
    env_given = {k.removeprefix("--config.env.") for k in given}
    sized = actor_sizing(config.env, cores(actor_cpu), env_given)
    return out + [f"--config.env.{k}={v}" for k, v in sized.items()]


def issue_actor_certificates(directory: str, actors: int) -> None:
    """Issues DIR/actors/actor-i for each i < actors that has none (needs DIR/ca.key)."""
    missing = [
        f"actor-{i}"
        for i in range(actors)
        if not os.path.exists(os.path.join(directory, "actors", f"actor-{i}", "client.pem"))
    ]
    if not missing or not os.path.isfile(os.path.join(directory, "ca.pem")):
        return  # read_credentials names what is missing
    script = os.path.join(ROOT, "scripts", "make_credentials.sh")
    done = subprocess.run([script, "--actors", directory, *missing], capture_output=True, text=True)
    if done.returncode:
        raise FileNotFoundError(f"cannot issue actor certificates: {done.stderr.strip()}")


def main(argv):
    del argv
    console.setup()
    name = _NAME.value
    if not (name.replace("-", "").isalnum() and name == name.lower() and len(name) <= 40):
        raise app.UsageError(f"--name={name!r}: use lowercase letters, digits and '-' (<= 40)")
    if _LEARNERS.value < 1 or _CONFIG.value.batch_unrolls % _LEARNERS.value:
        raise SystemExit(
            f"error: --learners={_LEARNERS.value} must be >= 1 and divide batch_unrolls="
            f"{_CONFIG.value.batch_unrolls} (each learner host fills its share of a batch)"
        )
    add_env_kwargs(_CONFIG.value, _ENV_KWARGS)
    try:
        validate(_CONFIG.value)
        issue_actor_certificates(_CREDENTIALS.value, _ACTORS.value)
        credentials = read_credentials(_CREDENTIALS.value, _ACTORS.value)
    except (ConfigError, FileNotFoundError) as e:
        raise SystemExit(f"error: {e}") from None
    config_path = flags.FLAGS["config"].config_filename
    if os.path.abspath(config_path).startswith(ROOT + os.sep):
        config_path = os.path.relpath(os.path.abspath(config_path), ROOT)  # as in the image
    overrides = [a for a in sys.argv[1:] if a.startswith("--config.")] + _ENV_KWARGS
    overrides += sizing(_CONFIG.value, overrides, _LEARNER_CPU.value, _ACTOR_CPU.value)
    objects = render(
        name,
        _IMAGE.value,
        config_path,
        overrides,
        _ACTORS.value,
        credentials,
        _PORT.value,
        _LEARNERS.value,
        _GPUS.value,
        _LEARNER_CPU.value,
        _LEARNER_MEMORY.value,
        _ACTOR_CPU.value,
        _ACTOR_MEMORY.value,
        _STORAGE.value,
    )
    with open(_OUT.value, "w") as f:
        f.write(to_yaml(objects))
    os.chmod(_OUT.value, 0o600)
    print(
        f"wrote {_OUT.value}: {', '.join(o['kind'] + ' ' + o['metadata']['name'] for o in objects)}"
    )


if __name__ == "__main__":
    check_flags()  # a mistyped flag gets the one to write, before absl refuses it
    app.run(main)
