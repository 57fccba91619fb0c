"""Kubernetes manifests for a run: L learner hosts, N actors, the run's credentials as secrets
(the command is deploy.py).

Rendered objects (TLeague's layout, SEED RL's roles):
  Secret <name>-learner-credentials   ca.pem, server.pem, server.key, token, revoked (never ca.key)
  Service <name>-learner              headless: actors reach learner pod k at
                                      <name>-learner-k.<name>-learner:port (<name>-learner:port
                                      with one learner)
  StatefulSet <name>-learner          L pods of learner.py on 0.0.0.0 with TLS and the run token;
                                      each logdir on a persistent volume, so a restarted pod
                                      resumes. With L > 1 they form one learner
                                      (seedlike/runtime/distributed.py): pod k is process k, pod 0
                                      the coordinator on port + 1; all start at once (Parallel)
  per actor i < N:
  Secret <name>-actor-i-credentials   ca.pem, client.pem, client.key, token: actor i's own
                                      certificate (scripts/make_credentials.sh --actors DIR
                                      actor-i), so the learner counts each pod as one identity
  StatefulSet <name>-actor-i          one pod of actor.py --actor_id=i, serving learner i mod L
  NetworkPolicy <name>-learner        L > 1 only: the coordinator and the gloo collectives are
                                      neither encrypted nor authenticated, so learner pods accept
                                      other connections only from each other (the actors' port
                                      stays open: TLS and the token guard it)

Why a StatefulSet per actor and not one of N replicas: the pods of one StatefulSet share one
template, so they could only mount the same Secrets, and a pod that holds every actor's key can be
every identity. Issuing certificates inside the cluster instead (an init step asking a signer)
would need the signer to tell pods apart (Kubernetes' TokenReview of a pod-bound service account
token) and to hold the CA key in the cluster; here the CA key stays where deploy.py runs. Scale by
rendering again with another --actors (kubectl apply adds and keeps; delete the surplus). Revoke
an actor with `scripts/make_credentials.sh --revoke DIR actor-i`, a re-render and `kubectl apply`
(the learner's Secret carries `revoked`, reread once the kubelet has updated the mount), then
`kubectl delete statefulset <name>-actor-i` (a revoked pod would restart and be refused forever;
a name stays revoked, so that slot needs a new name to serve again).

The image is this repository installed (the Dockerfile); the config file and every
--config.x=v flag given here are passed to the learner and the actors as train.sh does.
"""

from __future__ import annotations

import base64
import os

import yaml

LEARNER_FILES = ("ca.pem", "server.pem", "server.key", "token", "revoked")
ACTOR_FILES = ("ca.pem", "client.pem", "client.key", "token")
CREDENTIALS_MOUNT = "/credentials"
RUNS_MOUNT = "/runs"


def render(
    name: str,
    image: str,
    config_path: str,
    config_flags_: list[str],
    actors: int,
    credentials: dict[str, dict[str, bytes]],
    port: int = 50051,
    learners: int = 1,
    gpus: int = 0,
    learner_cpu: str = "4",
    learner_memory: str = "16Gi",
    actor_cpu: str = "1",
    actor_memory: str = "2Gi",
    storage: str = "20Gi",
) -> list[dict]:
    """The Kubernetes objects of a run (see the module docstring).

    Args:
      name: the run's name; objects are <name>-learner, <name>-actors, ... (a DNS label).
      config_path: the config file's path inside the image, relative to the repository.
      config_flags_: --config.x=v flags for the learner and every actor.
      credentials: {"learner": {file: bytes}, "actors": [{file: bytes}] one per actor}
        (read_credentials).
      learners: learner hosts (pods) forming one learner; the server certificate must name each
        pod (scripts/make_credentials.sh DIR <name>-learner-0.<name>-learner ...).
      gpus: GPUs for the learner (nvidia.com/gpu); 0 runs JAX on its CPUs.
    """
    if len(credentials["actors"]) < actors:
        raise ValueError(
            f"{actors} actors need {actors} certificates, not {len(credentials['actors'])}"
        )
    transport = f"--config.transport.credentials={CREDENTIALS_MOUNT}"
    common = [f"--config={config_path}", *config_flags_, transport]
    labels = {
        "learner": {"seedlike/run": name, "seedlike/role": "learner"},
        "actor": {"seedlike/run": name, "seedlike/role": "actor"},
    }
    learner_args = [*common, f"--logdir={RUNS_MOUNT}/{name}", "--bind=0.0.0.0", f"--port={port}"]
    objects = _learner_objects(
        name, image, learner_args, labels["learner"], credentials["learner"], port, learners,
        _resources(learner_cpu, learner_memory, gpus), storage,
    )  # fmt: skip
    learner = f"{name}-learner"
    for i in range(actors):
        server = (
            f"{learner}:{port}" if learners == 1 else f"{learner}-{i % learners}.{learner}:{port}"
        )
        objects += _actor_objects(
            name, i, image, [*common, f"--server={server}", f"--actor_id={i}"],
            {**labels["actor"], "seedlike/actor": str(i)}, credentials["actors"][i],
            _resources(actor_cpu, actor_memory),
        )  # fmt: skip
    if learners > 1:
        objects.append(_learner_network_policy(learner, labels["learner"], port))
    return objects


def _secret(name: str, run: str, files: dict[str, bytes]) -> dict:
    data = {k: base64.b64encode(v).decode() for k, v in sorted(files.items())}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {"seedlike/run": run}},
        "type": "Opaque",
        "data": data,
    }


def _resources(cpu: str, memory: str, gpu: int = 0) -> dict:
    limits = {"memory": memory, **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}


def _credentials_volume(secret_name: str) -> dict:
    # 0400: the token and keys readable by the process only.
    return {"name": "credentials", "secret": {"secretName": secret_name, "defaultMode": 0o400}}


CREDENTIALS_VOLUME_MOUNT = {"name": "credentials", "mountPath": CREDENTIALS_MOUNT, "readOnly": True}


def _learner_objects(
    name, image, args, labels, files, port, learners, resources, storage
) -> list[dict]:
    """The learner's credentials Secret, headless Service and StatefulSet (`learners` pods)."""
    learner = f"{name}-learner"
    ports = [{"name": "grpc", "port": port, "targetPort": port}]
    env = [{"name": "WANDB_MODE", "value": "offline"}]
    if learners > 1:
        ports.append({"name": "coordinator", "port": port + 1, "targetPort": port + 1})
        args = [
            *args,
            f"--config.distributed.num_processes={learners}",
            f"--config.distributed.coordinator={learner}-0.{learner}:{port + 1}",
            "--config.distributed.process_id=$(POD_INDEX)",
        ]
        env.append(_pod_index("POD_INDEX"))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": learner, "labels": labels},
        "spec": {"clusterIP": "None", "selector": labels, "ports": ports},
    }
    container = {
        "name": "learner",
        "image": image,
        "workingDir": "/seedlike",
        "command": ["python", "learner.py"],
        "args": args,
        "env": env,
        "ports": [{"name": p["name"], "containerPort": p["port"]} for p in ports],
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 5},
        "resources": resources,
        "volumeMounts": [CREDENTIALS_VOLUME_MOUNT, {"name": "runs", "mountPath": RUNS_MOUNT}],
    }
    learner_set = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": learner, "labels": labels},
        "spec": {
            "serviceName": learner,
            "replicas": learners,
            # Every learner process must join before any can start: none waits for another.
            **({"podManagementPolicy": "Parallel"} if learners > 1 else {}),
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # Ctrl-C's path: SIGTERM makes the learner save a checkpoint before it exits.
                    "terminationGracePeriodSeconds": 120,
                    "containers": [container],
                    "volumes": [_credentials_volume(f"{learner}-credentials")],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "runs"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": storage}},
                    },
                }
            ],
        },
    }
    return [_secret(f"{learner}-credentials", name, files), service, learner_set]


def _actor_objects(name, i, image, args, labels, files, resources) -> list[dict]:
    """Actor i's credentials Secret and its one-pod StatefulSet."""
    actor = f"{name}-actor-{i}"
    container = {
        "name": "actor",
        "image": image,
        "workingDir": "/seedlike",
        "command": ["python", "actor.py"],
        "args": args,
        "resources": resources,
        "volumeMounts": [CREDENTIALS_VOLUME_MOUNT],
    }
    actor_set = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": actor, "labels": labels},
        "spec": {
            "serviceName": f"{name}-learner",
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [_credentials_volume(f"{actor}-credentials")],
                },
            },
        },
    }
    return [_secret(f"{actor}-credentials", name, files), actor_set]


def _learner_network_policy(learner: str, labels: dict, port: int) -> dict:
    """Learner pods take actors on the gRPC port and each other on every port."""
    peers = {"podSelector": {"matchLabels": labels}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": learner, "labels": labels},
        "spec": {
            "podSelector": {"matchLabels": labels},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": port}]}, {"from": [peers]}],
        },
    }


def _pod_index(variable: str) -> dict:
    """An env variable holding the pod's StatefulSet index (label of Kubernetes 1.28+)."""
    label = "metadata.labels['apps.kubernetes.io/pod-index']"
    return {"name": variable, "valueFrom": {"fieldRef": {"fieldPath": label}}}


def read_credentials(directory: str, actors: int) -> dict:
    """The files of a scripts/make_credentials.sh directory, split by who needs them: the
    learner's, and actor i's from DIR/actors/actor-i for i < `actors`."""

    def files(where: str, names, fix: str) -> dict[str, bytes]:
        out = {}
        for file in names:
            path = os.path.join(where, file)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path} is missing: {fix}")
            with open(path, "rb") as f:
                out[file] = f.read()
        return out

    make = "make the run's credentials with scripts/make_credentials.sh DIR NAME-learner"
    learner = files(directory, LEARNER_FILES, make)
    issue = f"issue them with scripts/make_credentials.sh --actors {directory} actor-0 ..."
    mine = [
        files(os.path.join(directory, "actors", f"actor-{i}"), ACTOR_FILES, issue)
        for i in range(actors)
    ]
    return {"learner": learner, "actors": mine}


def to_yaml(objects: list[dict]) -> str:
    header = (
        "# Rendered by deploy.py. It holds the run's keys and token: keep it\n"
        "# private (no version control); kubectl apply -f this file.\n"
    )
    return header + yaml.safe_dump_all(objects, sort_keys=False)
