"""Metrics sinks: <logdir>/metrics.jsonl (one JSON object per interval), wandb, and the console."""

from __future__ import annotations

import json
import logging
import math
import os
import time

# Shown on the one-line console summary, in this order: (key, label, format).
CONSOLE_FIELDS = (
    ("env_steps", "steps", "{:,.0f}"),
    ("sps", "sps", "{:,.0f}"),
    ("episode_return_mean", "return", "{:.2f}"),
    ("episode_length_mean", "len", "{:.1f}"),
    ("episodes", "eps", "{:.0f}"),
    ("policy_version", "version", "{:.0f}"),
    ("staleness_mean", "stale", "{:.2f}"),
    ("loss/total", "loss", "{:.4f}"),
    ("actors_connected", "actors", "{:.0f}"),
)


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value


class MetricsWriter:
    """Appends rows to metrics.jsonl and mirrors them to wandb and the console.

    Args:
      logdir: run directory.
      config: the experiment config, stored with the wandb run.
      wandb_mode: "offline" (default), "online" or "disabled"; the WANDB_MODE environment
        variable overrides it.
      wandb_project: wandb project name.
    """

    def __init__(
        self, logdir: str, config, wandb_mode: str = "offline", wandb_project: str = "seedlike"
    ):
        os.makedirs(logdir, exist_ok=True)
        self.path = os.path.join(logdir, "metrics.jsonl")
        self._file = open(self.path, "a", buffering=1)
        self._start = time.time()
        self._wandb = None
        mode = os.environ.get("WANDB_MODE") or wandb_mode
        if mode != "disabled":
            self._wandb = self._init_wandb(logdir, config, wandb_project, mode)

    @staticmethod
    def _init_wandb(logdir, config, project, mode):
        try:
            import wandb

            return wandb.init(
                project=project,
                name=os.path.basename(os.path.abspath(logdir)),
                dir=logdir,
                mode=mode,
                config=config.to_dict() if hasattr(config, "to_dict") else dict(config),
                reinit="finish_previous",
            )
        except Exception as e:  # noqa: BLE001 - metrics must never take training down
            logging.warning("wandb disabled: %s: %s", type(e).__name__, e)
            return None

    def write(self, row: dict) -> None:
        row = {k: _jsonable(v) for k, v in row.items()}
        self._file.write(json.dumps(row, sort_keys=True) + "\n")
        if self._wandb is not None:
            self._wandb.log(
                {k: v for k, v in row.items() if v is not None}, step=int(row["env_steps"])
            )
        logging.info("%s", console_line(row, time.time() - self._start))

    def close(self) -> None:
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def console_line(row: dict, elapsed: float) -> str:
    h, rem = divmod(int(elapsed), 3600)
    parts = [f"[{h:02d}:{rem // 60:02d}:{rem % 60:02d}]"]
    for key, label, fmt in CONSOLE_FIELDS:
        value = row.get(key)
        parts.append(f"{label} {fmt.format(value) if value is not None else '-'}")
    return "  ".join(parts)


def read_metrics(logdir: str) -> list[dict]:
    """All rows of <logdir>/metrics.jsonl (None for missing values)."""
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
