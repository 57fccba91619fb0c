"""Search at play time for two-player line games: depth-d negamax over the exact rules with the
learned value at the leaves.

Why: a model-free policy trained for an hour on 2 CPU cores still misses short tactics (it takes an
available win only about half the time, benchmarks/RESULTS.md). Looking a few plies ahead with the
true rules makes those exact, and the value network judges what lies beyond the horizon (the
AlphaZero division of labour, with a full-width tree instead of MCTS: Connect Four has 7 moves, so
depth 3 is at most 343 leaves per position, which an MLP evaluates in one batch).

Boards are bool [n, rows, cols] stone planes of the player to move (`mine`) and of the other player
(`theirs`), as in envpool's observations [n, rows, cols, 2] (planes mine, theirs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from seedlike.policy import PolicyRunner
from seedlike.types import LEGAL_ACTION_MASK

# Per ply, so that a quicker win is worth more than a slower one (and a later loss less bad).
DISCOUNT = 0.99
# Leaves are evaluated in chunks of at most this many positions (bounded memory, few compilations).
CHUNK = 4096
MAX_DEPTH = 6  # 7^6 = 117,649 leaves per position already


def has_line(stones: np.ndarray, length: int) -> np.ndarray:
    """Whether each board has `length` stones in a row, column or diagonal.

    Args:
      stones: bool [n, rows, cols], one player's stones.
      length: how many in a line win.

    Returns:
      bool [n].
    """
    _, rows, cols = stones.shape
    found = np.zeros(stones.shape[0], np.bool_)
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        # Windows start at (r, c) with r < nr and c0 <= c < c0 + nc; cell i is (r + i dr, c + i dc).
        nr, nc = rows - (length - 1) * dr, cols - (length - 1) * abs(dc)
        if nr <= 0 or nc <= 0:
            continue
        c0 = (length - 1) if dc < 0 else 0
        line = np.ones((stones.shape[0], nr, nc), np.bool_)
        for i in range(length):
            r, c = i * dr, c0 + i * dc
            line &= stones[:, r : r + nr, c : c + nc]
        found |= line.any((1, 2))
    return found


@dataclasses.dataclass(frozen=True)
class LineGame:
    """Players alternately place a stone; `line` in a row wins; a full board is a draw. With
    gravity (Connect Four) the action is a column and the stone drops to its lowest free cell;
    without (TicTacToe) the action is the cell, row-major."""

    rows: int
    cols: int
    line: int
    gravity: bool

    @property
    def num_actions(self) -> int:
        return self.cols if self.gravity else self.rows * self.cols

    def legal(self, mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
        """bool [n, A]: the moves that are legal (a column with room, or an empty cell)."""
        occupied = mine | theirs
        if self.gravity:
            return ~occupied[:, 0, :]
        return ~occupied.reshape(occupied.shape[0], -1)

    def moves(self, mine: np.ndarray, theirs: np.ndarray):
        """The result of every move of the player to move.

        Returns:
          after: bool [n, A, rows, cols], the mover's stones after each move.
          legal, win, full: bool [n, A]: the move is legal, completes a line, fills the board.
        """
        occupied = mine | theirs
        legal = self.legal(mine, theirs)
        i, a = np.nonzero(legal)
        after = np.repeat(mine[:, None], self.num_actions, axis=1)
        if self.gravity:
            landing = self.rows - 1 - occupied.sum(axis=1)  # [n, cols]: the lowest free row
            after[i, a, landing[i, a], a] = True
        else:
            after[i, a, a // self.cols, a % self.cols] = True
        win = np.zeros_like(legal)
        win[i, a] = has_line(after[i, a], self.line)
        full = (after | occupied[:, None]).all(axis=(2, 3))
        return after, legal, win, full


GAMES = {
    "ConnectFour-v1": LineGame(rows=6, cols=7, line=4, gravity=True),
    "TicTacToe-v1": LineGame(rows=3, cols=3, line=3, gravity=False),
    # pgx's (seedlike.envs.pgx_env): the same planes, the mover's stones first
    "connect_four": LineGame(rows=6, cols=7, line=4, gravity=True),
    "tic_tac_toe": LineGame(rows=3, cols=3, line=3, gravity=False),
}

Evaluate = Callable[[np.ndarray, np.ndarray], np.ndarray]


def action_values(
    game: LineGame, evaluate: Evaluate, mine: np.ndarray, theirs: np.ndarray, depth: int
) -> np.ndarray:
    """Negamax values of every move for the player to move, looking `depth` plies ahead.

    A move that completes a line is worth 1 and one that fills the board 0. Any other move is worth
    minus DISCOUNT times the value of the opponent's position after it: the best of its own moves
    searched one ply shallower, or at depth 1 `evaluate(their_stones, my_stones)`, the value from
    the side of the player to move there (that is the value head's convention).

    Returns:
      float [n, A]; -inf for illegal moves.
    """
    after, legal, win, full = game.moves(mine, theirs)
    q = np.where(legal, 0.0, -np.inf)
    q[win] = 1.0
    i, a = np.nonzero(legal & ~win & ~full)
    if i.size:
        next_mine, next_theirs = theirs[i], after[i, a]
        if depth <= 1:
            value = np.asarray(evaluate(next_mine, next_theirs), np.float64)
        else:
            value = action_values(game, evaluate, next_mine, next_theirs, depth - 1).max(axis=1)
        q[i, a] = -DISCOUNT * value
    return q


def choose(q: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """The best move of each row of q [n, A]; among moves of equal value (several wins, or a lost
    position) the one with the highest prior [n, A] (the policy's logits)."""
    best = q >= q.max(axis=1, keepdims=True) - 1e-9
    return np.where(best, prior, -np.inf).argmax(axis=1).astype(np.int32)


def game_for(spec) -> LineGame:
    """The rules of the env in `spec` (an EnvSpec), with errors that say what is supported."""
    game = GAMES.get(spec.name)
    if game is None:
        raise ValueError(f"search supports {sorted(GAMES)}, not {spec.name}; use --search_depth=0")
    obs = spec.observation.get("obs")
    if obs is None or tuple(obs.shape) != (game.rows, game.cols, 2):
        raise ValueError(
            f"search expects {spec.name} observations 'obs' [{game.rows}, {game.cols}, 2] "
            f"(mine, theirs); the spec has {dict(spec.observation)}"
        )
    return game


class SearchAgent:
    """A feed-forward network policy that picks its move by `depth`-ply negamax with its value head
    at the leaves (an Agent for seedlike.league.games.play_match).

    Args:
      network, policy_params: the policy ({"params", "obs_norm"}).
      depth: plies to look ahead, 1..MAX_DEPTH.
      env: the env section it was trained in, where known (a checkpoint's; games.game_of).
    """

    def __init__(self, network, policy_params, depth: int, name="search", env=None):
        if not 1 <= depth <= MAX_DEPTH:
            raise ValueError(f"search depth must be 1..{MAX_DEPTH}, got {depth}")
        if network.is_recurrent:
            raise ValueError(
                "search needs a feed-forward network (network.core = 'none'): a recurrent state "
                "means nothing at hypothetical positions"
            )
        self.game = game_for(network.spec)
        self.network = network
        self.policy_params = policy_params
        self.depth = depth
        self.name = name
        self.env = env
        self._dtype = network.spec.observation["obs"].dtype
        self._runner = PolicyRunner(network)

    def reset(self, num_envs: int) -> None:
        pass

    def evaluate(self, mine: np.ndarray, theirs: np.ndarray, chunk: int = CHUNK):
        """Policy logits [m, A] and values [m] of m positions (from the side of the mover)."""
        obs = {"obs": np.stack([mine, theirs], axis=-1).astype(self._dtype)}
        extras = {LEGAL_ACTION_MASK: self.game.legal(mine, theirs)}
        return self._runner.evaluate(self.policy_params, obs, extras, chunk)

    def act(self, obs, legal_mask, env_id, first, rng) -> np.ndarray:
        board = np.asarray(obs["obs"]).astype(np.bool_)
        mine, theirs = board[..., 0], board[..., 1]
        prior, _ = self.evaluate(mine, theirs)
        q = action_values(self.game, lambda m, t: self.evaluate(m, t)[1], mine, theirs, self.depth)
        q = np.where(legal_mask, q, -np.inf)
        return choose(q, prior)
