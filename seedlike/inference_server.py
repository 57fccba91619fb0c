"""Serving a frozen checkpoint: the inference service without learning (evaluation, play)."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from seedlike import checkpoint as ckpt_lib
from seedlike.metrics import MetricsWriter
from seedlike.policy import PolicyRegistry
from seedlike.rpc.listen import start_inference
from seedlike.server import inference


def serve_checkpoint(
    checkpoint: str,
    logdir: str,
    bind: str = "127.0.0.1",
    port: int = 0,
    stop: threading.Event | None = None,
    max_env_steps: int = 0,
    interval_s: float = 10.0,
    greedy: bool = False,
    max_episodes: int = 0,
) -> dict:
    """Serves the policy of `checkpoint` to actors until stopped, `max_env_steps` or
    `max_episodes` (0 = no limit); `greedy` plays the most likely legal actions.

    Every interval appends a row of episode statistics to <logdir>/metrics.jsonl. Returns the
    statistics over the whole session; with `max_episodes`, over the first that many episodes to
    end (with many envs these lean towards short episodes: ask for several per env).
    """
    stop = stop or threading.Event()
    config, network, state, meta = ckpt_lib.load_checkpoint(checkpoint)
    version = int(state.policy_version)
    logging.info(
        "serving %s (policy version %d, %s, params %s)",
        checkpoint,
        version,
        config.env.name,
        ckpt_lib.params_fingerprint(state.params),
    )
    registry = PolicyRegistry()
    registry.publish(version, {"params": state.params, "obs_norm": state.obs_norm})
    # No store: a frozen policy keeps episode statistics only, no unrolls.
    service = inference.InferenceService.from_config(
        config, spec=network.spec, network=network, registry=registry, greedy=greedy
    )
    server, _ = start_inference(service, config, logdir, bind, port)
    metrics = MetricsWriter(
        logdir,
        config,
        config.log.wandb_mode,
        config.log.wandb_project,
        config.log.wandb_group,
        total_env_steps=max_env_steps or None,
        tensorboard=bool(config.log.tensorboard),
    )
    returns, lengths = [], []
    start = last = time.monotonic()
    last_rows = 0
    try:
        while not (
            stop.is_set()
            or (max_env_steps and service.env_steps >= max_env_steps)
            or (max_episodes and service.stats.episodes_ended >= max_episodes)
        ):
            service.check_alive()
            stop.wait(0.1)
            now = time.monotonic()
            if now - last >= interval_s:
                last_rows = _write(
                    metrics, service, version, now - last, last_rows, returns, lengths
                )
                last = now
    finally:
        service.stop(finished=True)
        server.stop(grace_s=2.0)
        _write(metrics, service, version, time.monotonic() - last, last_rows, returns, lengths)
        metrics.close()
    if max_episodes:
        returns, lengths = returns[:max_episodes], lengths[:max_episodes]
    return {
        "episodes": len(returns),
        "episode_return_mean": float(np.mean(returns)) if returns else float("nan"),
        "episode_length_mean": float(np.mean(lengths)) if lengths else float("nan"),
        "env_steps": service.env_steps,
        "seconds": time.monotonic() - start,
    }


def _write(metrics, service, version, dt, last_rows, returns, lengths) -> int:
    stats = service.stats.take()
    episodes = stats["episodes"]
    returns.extend(episodes.episode_return.tolist())
    lengths.extend(episodes.length.tolist())
    p50, p99 = inference.latency_summary(stats["latency_ms"])
    rows = service.env_steps
    metrics.write(
        {
            "time": time.time(),
            "env_steps": rows,
            "policy_version": version,
            "sps": (rows - last_rows) / max(dt, 1e-9),
            "episodes": len(episodes.seat),
            "episode_return_mean": np.mean(episodes.episode_return) if len(episodes.seat) else None,
            "episode_length_mean": np.mean(episodes.length) if len(episodes.seat) else None,
            "inference_batch_mean": inference.batch_summary(stats["batch_rows"]),
            "inference_latency_ms_p50": p50,
            "inference_latency_ms_p99": p99,
            "inference_window_ms": service.batcher.window_s * 1e3,
            "actors_connected": service.num_sessions,
        }
    )
    return rows
