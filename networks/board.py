"""Line features of a board game's position: where a stone would complete a line, for each side.

Why: an MLP trained by self-play for an hour on 2 CPU cores takes an available win only 57-72% of
the time and blocks 55-86% of forced threats (benchmarks/RESULTS.md, Connect Four); supervised, it
plateaus at 83% of winning moves on random positions. Whether a cell completes four is a fixed
function of the board (a sum over each line window), so the network gets it as an input instead
of spending its training on rediscovering it. This is a static reading of one position, like the
hand-made features of OpenAI Five's observation: no move is tried and nothing is searched.

Layout: board float [N, H, W, 2], planes (mine, theirs) from the side of the player to move, as in
envpool's ConnectFour-v1 and TicTacToe-v1 (seedlike/league/connect_four.py). The features are
float [N, H, W, 3]:
  0  empty cells where a stone of mine would complete `line` in a row, column or diagonal
  1  the same for theirs
  2  the cells a stone can go to now: with gravity the lowest empty cell of each column, else
     every empty cell
So "mine & playable" is a winning move, "theirs & playable" a threat to block, and "theirs" right
above a playable cell a move that hands the opponent a win.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

FEATURES = 3
DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def completions(stones: jax.Array, empty: jax.Array, line: int) -> jax.Array:
    """bool [N, H, W]: the empty cells where one more stone gives `stones` `line` in a row.

    A window of `line` cells along a direction marks its one empty cell when the other line - 1
    hold `stones`; a cell is marked if any window through it is.
    """
    _, rows, cols = stones.shape
    out = jnp.zeros(stones.shape, jnp.bool_)
    for dr, dc in DIRECTIONS:
        # Windows start at (r, c0 + c), r < nr, c < nc; their cell i is (r + i dr, c0 + c + i dc).
        nr, nc = rows - (line - 1) * dr, cols - (line - 1) * abs(dc)
        if nr <= 0 or nc <= 0:
            continue
        c0 = (line - 1) if dc < 0 else 0
        cells = [(i * dr, c0 + i * dc) for i in range(line)]  # where cell i's [nr, nc] view starts
        own = sum(stones[:, r : r + nr, c : c + nc].astype(jnp.int32) for r, c in cells)
        free = sum(empty[:, r : r + nr, c : c + nc].astype(jnp.int32) for r, c in cells)
        window = (own == line - 1) & (free == 1)
        for r, c in cells:
            hit = window & empty[:, r : r + nr, c : c + nc]
            out = out | jnp.pad(hit, ((0, 0), (r, rows - nr - r), (c, cols - nc - c)))
    return out


def playable(empty: jax.Array, gravity: bool) -> jax.Array:
    """bool [N, H, W]: where a stone can be placed now (row 0 is the top of the board)."""
    if not gravity:
        return empty
    # The lowest empty cell: empty, and the cell below is filled or the floor.
    below = jnp.concatenate([~empty[:, 1:], jnp.ones_like(empty[:, :1])], axis=1)
    return empty & below


def line_features(board: jax.Array, line: int, gravity: bool) -> jax.Array:
    """float32 [N, H, W, 3] features (module docstring) of boards [N, H, W, 2] (mine, theirs)."""
    mine, theirs = board[..., 0] > 0, board[..., 1] > 0
    empty = ~(mine | theirs)
    planes = (
        completions(mine, empty, line),
        completions(theirs, empty, line),
        playable(empty, gravity),
    )
    return jnp.stack(planes, axis=-1).astype(jnp.float32)
