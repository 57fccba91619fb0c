"""deploy.py's Kubernetes manifests (seedlike.launch.deploy), validated offline against the
Kubernetes API schemas."""

import base64
import os
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from tests.helpers import make_credentials
from tests.procs import ROOT

K8S_VERSION = "1.33.0"
pytestmark = pytest.mark.slow  # runs deploy.py in processes of their own


def deploy(*args):
    return subprocess.run(
        [sys.executable, "deploy.py", *args], cwd=ROOT, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deploy")
    creds = make_credentials(tmp / "creds", "pong-learner")
    out = tmp / "pong.yaml"
    done = deploy(
        "--config=configs/atari_ppo.py", "--config.env.name=Pong-v5", "--name=pong",
        "--actors=12", "--image=registry.example.com/seedlike:0.1", f"--credentials={creds}",
        "--gpus=1", f"--out={out}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert oct(os.stat(out).st_mode & 0o777) == "0o600"  # it holds keys
    with open(out) as f:
        return creds, list(yaml.safe_load_all(f))


def test_every_object_is_valid_kubernetes(manifests):
    _, objects = manifests
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    actors = [
        (kind, f"pong-actor-{i}{suffix}")
        for i in range(12)
        for kind, suffix in (("Secret", "-credentials"), ("StatefulSet", ""))
    ]
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Secret", "pong-learner-credentials"),
        ("Service", "pong-learner"),
        ("StatefulSet", "pong-learner"),
        *actors,
    ]


def test_each_actor_pod_has_its_own_certificate_and_the_ca_key_ships_nowhere(manifests):
    creds, objects = manifests
    learner_secret, service, learner, *per_actor = objects
    secrets, sets = per_actor[0::2], per_actor[1::2]
    assert sorted(learner_secret["data"]) == [
        "ca.pem", "revoked", "server.key", "server.pem", "token"
    ]  # fmt: skip
    token = open(os.path.join(creds, "token"), "rb").read()
    certificates = set()
    for i, (secret, actor_set) in enumerate(zip(secrets, sets)):
        assert sorted(secret["data"]) == ["ca.pem", "client.key", "client.pem", "token"]
        assert base64.b64decode(secret["data"]["token"]) == token
        pem = base64.b64decode(secret["data"]["client.pem"])
        assert pem == open(os.path.join(creds, "actors", f"actor-{i}", "client.pem"), "rb").read()
        certificates.add(pem)
        pod = actor_set["spec"]["template"]["spec"]
        assert pod["volumes"][0]["secret"]["secretName"] == secret["metadata"]["name"]
        assert actor_set["spec"]["replicas"] == 1
        assert f"--actor_id={i}" in pod["containers"][0]["args"]
    assert len(certificates) == 12  # deploy.py issued one per pod, none shared
    subject = subprocess.run(
        ["openssl", "x509", "-noout", "-subject"],
        input=base64.b64decode(secrets[3]["data"]["client.pem"]),
        capture_output=True,
    )
    assert b"CN=seedlike actor actor-3" in subject.stdout.replace(b" = ", b"=")
    text = yaml.safe_dump_all(objects)
    ca_key = base64.b64encode(open(os.path.join(creds, "ca.key"), "rb").read()).decode()
    assert "ca.key" not in text and ca_key not in text


def test_learner_and_actors_share_config_and_credentials(manifests):
    creds, objects = manifests
    learner_secret, service, learner, actor_secret, actors = objects[:5]
    learner_c = learner["spec"]["template"]["spec"]["containers"][0]
    actor_c = actors["spec"]["template"]["spec"]["containers"][0]
    shared = [
        "--config=configs/atari_ppo.py",
        "--config.env.name=Pong-v5",
        "--config.transport.credentials=/credentials",
    ]
    assert all(flag in learner_c["args"] and flag in actor_c["args"] for flag in shared)
    # Sized from the pods' cores: learner_cpu 4 -> one front end; actor_cpu 1 -> one envpool
    # thread stepping 8x the config's envs in two halves.
    assert "--config.server.front_ends=1" in learner_c["args"]
    # One stream per actor pod, and one reconnecting.
    assert "--config.server.max_streams_per_peer=2" in learner_c["args"]
    assert "--config.env.num_threads=1" in actor_c["args"]
    assert "--config.env.num_envs=32" in actor_c["args"]
    assert "--config.env.batch_envs=16" in actor_c["args"]
    assert "--bind=0.0.0.0" in learner_c["args"] and "--logdir=/runs/pong" in learner_c["args"]
    assert "--server=pong-learner:50051" in actor_c["args"]
    assert "--actor_id=0" in actor_c["args"]
    assert learner["spec"]["replicas"] == 1
    assert learner_c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert service["spec"]["selector"] == learner["spec"]["template"]["metadata"]["labels"]


def test_bad_input_is_one_line(tmp_path):
    done = deploy(
        "--name=pong", "--image=x", f"--credentials={tmp_path}", f"--out={tmp_path}/o.yaml"
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{tmp_path}/ca.pem is missing: make the run's credentials" in done.stderr
    done = deploy("--name=Pong_1", "--image=x", f"--credentials={tmp_path}", "--out=o.yaml")
    assert done.returncode == 1 and "use lowercase letters, digits and '-'" in done.stderr
    done = deploy("--config.env.nmae=x", "--name=p", "--image=x", "--credentials=c", "--out=o")
    assert done.returncode == 1 and "unknown config key 'env.nmae'" in done.stderr


def kubernetes_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args: $$ is a literal $, unknown names stay."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            name = text[i + 2 : text.index(")", i)]
            out.append(env.get(name, f"$({name})"))
            i += len(name) + 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def test_several_learner_hosts_form_one_learner(tmp_path):
    hosts = [f"ant-learner-{k}.ant-learner" for k in range(2)]
    creds = make_credentials(tmp_path / "creds", *hosts)
    out = tmp_path / "ant.yaml"
    done = deploy(
        "--config=configs/cartpole_ppo.py", "--name=ant", "--actors=5", "--learners=2",
        "--image=x", f"--credentials={creds}", f"--out={out}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(open(out)))
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds[-1] == ("NetworkPolicy", "ant-learner")
    _, service, learner, *per_actor, policy = objects
    assert learner["spec"]["replicas"] == 2
    assert learner["spec"]["podManagementPolicy"] == "Parallel"
    assert [p["port"] for p in service["spec"]["ports"]] == [50051, 50052]
    container = learner["spec"]["template"]["spec"]["containers"][0]
    env = {"POD_INDEX": "1"}
    assert [e["name"] for e in container["env"]] == ["WANDB_MODE", "POD_INDEX"]
    args = [kubernetes_expand(a, env) for a in container["args"]]
    assert "--config.distributed.process_id=1" in args
    assert "--config.distributed.num_processes=2" in args
    assert "--config.distributed.coordinator=ant-learner-0.ant-learner:50052" in args
    # Actor pod i runs actor i against learner pod i mod 2.
    for index, learner_pod in ((3, 1), (4, 0)):
        actor = per_actor[2 * index + 1]["spec"]["template"]["spec"]["containers"][0]
        assert actor["command"] == ["python", "actor.py"]
        assert f"--server=ant-learner-{learner_pod}.ant-learner:50051" in actor["args"]
        assert f"--actor_id={index}" in actor["args"]
    # The unauthenticated coordinator and collectives: learner pods only; the actors' port: all.
    rules = policy["spec"]["ingress"]
    assert rules[0] == {"ports": [{"protocol": "TCP", "port": 50051}]}
    assert rules[1]["from"][0]["podSelector"]["matchLabels"]["seedlike/role"] == "learner"

    done = deploy(
        "--name=ant", "--learners=3", "--image=x", f"--credentials={creds}", f"--out={out}"
    )  # fmt: skip
    assert done.returncode == 1 and "--learners=3 must be >= 1 and divide batch_unrolls" in (
        done.stderr
    )
