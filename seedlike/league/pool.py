"""The pool of frozen snapshots of the learning policy that past-opponent samplers draw from.

An entry is bookkeeping only: the snapshot's id is the learner policy version it was taken at, and
the server keeps the parameters keyed by that id. Each entry carries the quality score of OpenAI
Five's opponent sampler (seed 000, App. N), so that the scores are saved and restored with the pool.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np


@dataclasses.dataclass
class Snapshot:
    """One frozen past version of the learning policy.

    Attributes:
      id: the learner policy version the snapshot was taken at.
      quality: OpenAI Five quality score q (App. N); sampling weight exp(q).
      created: Unix time the snapshot joined the pool.
    """

    id: int
    quality: float
    created: float


class OpponentPool:
    """Snapshots in the order they were added (oldest first).

    Args:
      max_size: keep at most this many snapshots, dropping the oldest; None keeps all.
    """

    def __init__(self, max_size: int | None = None):
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be >= 1 or None, got {max_size}")
        self.max_size = max_size
        self._entries: dict[int, Snapshot] = {}  # insertion-ordered: oldest first

    def add(self, version: int, created: float | None = None) -> Snapshot:
        """Adds a snapshot of policy `version` at the maximum quality of the pool (0 if empty).

        Entering at the maximum makes a new snapshot as likely as the most likely old one, until
        the learner has shown it can beat it (App. N).
        """
        version = int(version)
        if version in self._entries:
            raise ValueError(f"snapshot {version} is already in the pool")
        quality = max((e.quality for e in self._entries.values()), default=0.0)
        entry = Snapshot(version, quality, time.time() if created is None else float(created))
        self._entries[version] = entry
        self._trim()
        return entry

    def resize(self, max_size: int | None) -> list[int]:
        """Keeps at most `max_size` snapshots from now on; returns the ids dropped (oldest)."""
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be >= 1 or None, got {max_size}")
        self.max_size = max_size
        return self._trim()

    def _trim(self) -> list[int]:
        dropped = []
        while self.max_size is not None and len(self._entries) > self.max_size:
            dropped.append(next(iter(self._entries)))
            del self._entries[dropped[-1]]
        return dropped

    def remove(self, version: int) -> None:
        del self._entries[int(version)]

    @property
    def ids(self) -> list[int]:
        """Snapshot ids, oldest first."""
        return list(self._entries)

    @property
    def entries(self) -> list[Snapshot]:
        """Snapshots, oldest first (the objects themselves, not copies)."""
        return list(self._entries.values())

    def qualities(self) -> np.ndarray:
        """Quality scores, float64 [N], in the order of `ids`."""
        return np.array([e.quality for e in self._entries.values()], np.float64)

    def set_quality(self, version: int, quality: float) -> None:
        self._entries[int(version)].quality = float(quality)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, version: object) -> bool:
        return version in self._entries

    def __getitem__(self, version: int) -> Snapshot:
        return self._entries[int(version)]

    def state_dict(self) -> dict[str, Any]:
        """JSON-serializable state; `from_state_dict` restores an equal pool."""
        return {
            "max_size": self.max_size,
            "entries": [dataclasses.asdict(e) for e in self._entries.values()],
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> OpponentPool:
        pool = cls(state["max_size"])
        for e in state["entries"]:
            pool._entries[int(e["id"])] = Snapshot(
                int(e["id"]), float(e["quality"]), float(e["created"])
            )
        return pool
