"""Scripted reference agents for envpool's ConnectFour-v1 (envpool 1.2.5).

The observation of a row (one per (env, player)) is bool [6, 7, 2] from that player's side:
plane `MINE` (0) holds the row's own stones, plane `THEIRS` (1) the opponent's. Row 0 is the top
of the board: stones fall to the highest free row index (row 5 first). The action is the column,
0..6; `legal_action_mask` bool [7] marks the columns that are not full (playing a full one loses).
`tests/league/test_league.py` pins this down against envpool.

All functions take a batch of rows [n, ...] and are vectorized over it.
"""

from __future__ import annotations

import numpy as np

from seedlike.league import search

MINE, THEIRS = 0, 1


def has_four(stones: np.ndarray) -> np.ndarray:
    """Whether each board (bool [n, 6, 7], one player's stones) has four in a line: bool [n]."""
    return search.has_line(stones, 4)


def winning_moves(stones: np.ndarray, occupied: np.ndarray, legal_mask: np.ndarray) -> np.ndarray:
    """The columns where dropping a stone gives `stones` four in a line.

    Args:
      stones: bool [n, 6, 7], the stones of the player who would move.
      occupied: bool [n, 6, 7], every stone on the board.
      legal_mask: bool [n, 7], the columns that are not full.

    Returns:
      bool [n, 7].
    """
    win = search.GAMES["ConnectFour-v1"].moves(stones, occupied & ~stones)[2]
    return win & legal_mask


def _random_choice(candidates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random True column of each row of bool [n, 7] (column 0 if none)."""
    scores = np.where(candidates, rng.random(candidates.shape), -1.0)
    return scores.argmax(axis=1).astype(np.int32)


def random_actions(
    obs: np.ndarray | None, legal_mask: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Uniformly random legal actions, for any game with a legal-action mask.

    Args:
      obs: ignored (same signature as `scripted_actions`).
      legal_mask: bool [n, A].
      rng: numpy Generator.

    Returns:
      int32 [n].
    """
    del obs
    return _random_choice(np.asarray(legal_mask, np.bool_), rng)


def scripted_actions(
    obs: np.ndarray, legal_mask: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Win if you can, block if you must, else a random legal column.

    Args:
      obs: bool [n, 6, 7, 2], the boards from the side of the player to move.
      legal_mask: bool [n, 7].
      rng: numpy Generator (ties among winning, blocking or legal columns are broken at random).

    Returns:
      int32 [n] columns.
    """
    obs = np.asarray(obs, np.bool_)
    legal = np.asarray(legal_mask, np.bool_)
    mine, theirs = obs[..., MINE], obs[..., THEIRS]
    occupied = mine | theirs
    win = winning_moves(mine, occupied, legal)
    # Where the opponent would complete four on its next move: occupy that cell first.
    block = winning_moves(theirs, occupied, legal)
    candidates = np.where(
        win.any(1, keepdims=True), win, np.where(block.any(1, keepdims=True), block, legal)
    )
    return _random_choice(candidates, rng)
