"""Tasks given as text (MazeBase, BabyAI): missions as word tokens over the wire
(`env.mission_tokens = L`).

envpool's MiniGrid/BabyAI tasks give each observation its mission as NUL-terminated UTF-8 bytes
(uint8 [512] for BabyAI). The actor turns them into int32 [L] word ids of a fixed vocabulary, so
the wire carries L ids instead of 512 bytes and the network embeds words (networks.text). The
vocabulary (seedlike.types.MISSION_WORDS, shared with the network) is BabyAI's grammar: every
word of every envpool BabyAI task's missions.

Imports only numpy (actors may run without jax).
"""

from __future__ import annotations

import numpy as np

from seedlike.types import MISSION_WORDS

PAD, UNKNOWN = 0, 1
VOCAB = {word: i + 2 for i, word in enumerate(MISSION_WORDS)}


def words(mission: str) -> list[str]:
    return mission.replace(",", " , ").lower().split()


def tokenize(mission: str, length: int) -> np.ndarray:
    """int32 [length]: the mission's word ids, PAD after its end (UNKNOWN for a word outside the
    vocabulary). A mission of more than `length` words is a ValueError naming the fix."""
    ids = [VOCAB.get(w, UNKNOWN) for w in words(mission)]
    if len(ids) > length:
        raise ValueError(
            f"mission {mission!r} has {len(ids)} words; env.mission_tokens={length} is too short"
        )
    out = np.full(length, PAD, np.int32)
    out[: len(ids)] = ids
    return out


def decode_bytes(raw: np.ndarray) -> str:
    """A mission from envpool's NUL-terminated UTF-8 bytes (uint8 [n])."""
    data = np.asarray(raw, np.uint8).tobytes()
    return data.split(b"\0", 1)[0].decode("utf-8", errors="replace")


class MissionTokenizer:
    """Missions (uint8 [n, bytes]) -> tokens int32 [n, length], each distinct mission decoded
    once (missions only change when an episode starts). `blank`: every mission reads as empty,
    for the baseline a mission must beat."""

    def __init__(self, length: int, blank: bool = False):
        self.length, self.blank = int(length), bool(blank)
        self._cache: dict[bytes, np.ndarray] = {}

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        out = np.zeros((raw.shape[0], self.length), np.int32)
        if self.blank:
            return out
        for i, row in enumerate(np.asarray(raw, np.uint8)):
            key = row.tobytes()
            tokens = self._cache.get(key)
            if tokens is None:
                tokens = self._cache[key] = tokenize(decode_bytes(row), self.length)
            out[i] = tokens
        return out
