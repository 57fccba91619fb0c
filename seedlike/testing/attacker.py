"""A malicious actor that speaks the protocol correctly (tests/integration/test_identity_attack.py,
benchmarks/faults.py): made-up CartPole-v1 states, rewards steered by the actions it is sent."""

from __future__ import annotations

import threading
import time

import numpy as np

_COUNTING = threading.Lock()


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
    retry_s: float = 0.0,
    real: bool = False,
) -> None:
    """A malicious actor that speaks the protocol correctly, on one stream: `envs` envs of
    made-up CartPole states (random normal(0, 0.1), or +-obs_value), paid +reward for action 0
    and -reward for action 1 (steer) or +reward always, episodes of `episode` steps; with
    `credentials` (seedlike.rpc.security.Credentials), over TLS with that certificate. With
    retry_s > 0 a refused or ended stream connects again after retry_s, until `seconds` are up
    (out["refused"] counts those). With `real`, poisoning at honest magnitude instead: real
    CartPole envs (gymnasium's) that the attacker steps with its own controller, so observations
    and episode lengths are honest, paid 1 for the policy's action 0 and 0 for its action 1."""
    from seedlike.rpc import client, codec  # here: importing this module stays cheap

    spec = cartpole_spec()
    hello = codec.make_hello(spec, actor_id=actor_id, num_envs=envs)
    rng = np.random.default_rng(actor_id)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            connection = client.Connection(address, hello, credentials=credentials)
        except (client.Disconnected, client.Rejected) as e:
            if retry_s <= 0 or isinstance(e, client.Rejected):
                out.setdefault("ended", []).append(f"{type(e).__name__}: {e}")
                return
            out["refused"] = out.get("refused", 0) + 1
            time.sleep(retry_s)
            continue
        try:
            if real:
                _play_real(connection, spec, end, out, envs, actor_id)
            else:
                _play(connection, spec, rng, end, out, (envs, obs_value, reward, episode, steer))
        except client.Disconnected as e:
            if retry_s <= 0:
                out.setdefault("ended", []).append(f"{type(e).__name__}: {e}")
                return
            out["refused"] = out.get("refused", 0) + 1
            time.sleep(retry_s)
        except (client.Rejected, client.TrainingOver) as e:
            out.setdefault("ended", []).append(f"{type(e).__name__}: {e}")
            return
        finally:
            connection.close()


def _play(connection, spec, rng, end, out, settings) -> None:
    """Steps one connection until `end` (its errors propagate); out["steps_sent"] counts."""
    from seedlike.rpc import client, codec
    from seedlike.types import Rows

    n, obs_value, reward, episode, steer = settings
    actions = np.zeros(n, np.int32)
    t = 0
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
        reply = connection.step(codec.encode_step(t, rows))
        actions = client.decode_actions(reply, n, spec)
        t += 1
        with _COUNTING:  # the streams' threads share `out`; read it live for rates
            out["steps_sent"] = out.get("steps_sent", 0) + n


def _play_real(connection, spec, end, out, n: int, seed: int) -> None:
    """_play with real CartPole envs stepped by a controller that keeps the pole up (push
    toward where it leans), rewards 1 for the policy's action 0 and 0 for its action 1."""
    import gymnasium

    from seedlike.rpc import client, codec
    from seedlike.types import Rows

    envs = [gymnasium.make("CartPole-v1") for _ in range(n)]
    obs = np.stack([e.reset(seed=seed * 1000 + i)[0] for i, e in enumerate(envs)])
    paid = np.zeros(n, np.float32)
    ended = np.zeros((2, n), bool)  # terminated, truncated: this row ends its episode
    t = 0
    while time.monotonic() < end:
        done = ended[0] | ended[1]
        rows = Rows(
            obs={"obs": obs.astype(np.float32)}, extras={}, reward=paid.copy(),
            terminated=ended[0].copy(), truncated=ended[1].copy(),
            env_id=np.arange(n, dtype=np.int32), player_id=np.zeros(n, np.int32),
            acting=~done, game_over=done,
        )  # fmt: skip
        actions = client.decode_actions(connection.step(codec.encode_step(t, rows)), n, spec)
        for i, env in enumerate(envs):
            if done[i]:  # the next row starts a new episode, as envpool's reset step
                obs[i], paid[i], ended[:, i] = env.reset()[0], 0.0, False
                continue
            push = int(obs[i][2] + 0.5 * obs[i][3] > 0)
            obs[i], _, ended[0, i], ended[1, i], _ = env.step(push)
            paid[i] = 1.0 if actions[i] == 0 else 0.0
        t += 1
        with _COUNTING:
            out["steps_sent"] = out.get("steps_sent", 0) + n


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
