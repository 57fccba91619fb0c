"""A malicious actor that speaks the protocol correctly (tests/integration/test_identity_attack.py,
benchmarks/faults.py): made-up CartPole-v1 states, rewards steered by the actions it is sent."""

from __future__ import annotations

import threading
import time

import numpy as np


def attacker(
    address: str,
    seconds: float,
    out: dict,
    envs: int = 64,
    actor_id: int = 99,
    obs_value: float | None = None,
    reward: float = 10.0,
    episode: int = 100,
    steer: bool = True,
    credentials=None,
) -> None:
    """A malicious actor that speaks the protocol correctly, on one stream: `envs` envs of
    made-up CartPole states (random normal(0, 0.1), or +-obs_value), paid +reward for action 0
    and -reward for action 1 (steer) or +reward always, episodes of `episode` steps; with
    `credentials` (seedlike.rpc.security.Credentials), over TLS with that certificate."""
    from seedlike.rpc import client, codec  # here: importing this module stays cheap
    from seedlike.types import Rows

    spec = cartpole_spec()
    n = envs
    rng = np.random.default_rng(actor_id)
    hello = codec.make_hello(spec, actor_id=actor_id, num_envs=n)
    try:
        connection = client.Connection(address, hello, credentials=credentials)
    except (client.Disconnected, client.Rejected) as e:
        out.setdefault("ended", []).append(f"{type(e).__name__}: {e}")
        return
    actions = np.zeros(n, np.int32)
    sent, end, t = 0, time.monotonic() + seconds, 0
    try:
        while time.monotonic() < end:
            done = np.full(n, t % episode == episode - 1)
            paid = np.where(actions == 0, reward, -reward) if steer else np.full(n, reward)
            if obs_value is None:
                obs = rng.normal(0, 0.1, (n, 4))
            else:
                obs = rng.choice([-obs_value, obs_value], (n, 4))
            rows = Rows(
                obs={"obs": obs.astype(np.float32)},
                extras={},
                reward=paid.astype(np.float32) * (t % episode != 0),
                terminated=done,
                truncated=np.zeros(n, bool),
                env_id=np.arange(n, dtype=np.int32),
                player_id=np.zeros(n, np.int32),
                acting=~done,
                game_over=done,
            )
            reply = connection.step(codec.encode_step(sent, rows))
            actions = client.decode_actions(reply, n, spec)
            sent, t = sent + 1, t + 1
    except (client.Disconnected, client.Rejected, client.TrainingOver) as e:
        out.setdefault("ended", []).append(f"{type(e).__name__}: {e}")
    finally:
        connection.close()
    out["steps_sent"] = out.get("steps_sent", 0) + sent * n


def cartpole_spec():
    """The EnvSpec that a CartPole-v1 learner (configs/cartpole_ppo.py) expects in a hello: the
    default env settings with that task, as no other setting of that config changes the spec."""
    from seedlike.config import base_config
    from seedlike.envs.envpool_env import make_env_spec

    env = base_config().env
    env.name = "CartPole-v1"
    return make_env_spec(env)


def attack_streams(
    address: str, seconds: float, streams: int, distinct_ids: bool = False, **kwargs
) -> tuple[list, dict]:
    """`streams` attacker streams in threads, started (one actor_id, or a different one each
    with distinct_ids); their shared outcome dict."""
    out: dict = {}
    first = kwargs.pop("actor_id", 99)
    threads = [
        threading.Thread(
            target=attacker,
            args=(address, seconds, out),
            kwargs={**kwargs, "actor_id": first + k if distinct_ids else first},
            daemon=True,
        )
        for k in range(streams)
    ]
    for thread in threads:
        thread.start()
    return threads, out
