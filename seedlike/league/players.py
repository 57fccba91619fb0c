"""Who plays a seat: the one spelling of policy ids, the agent interface and the built-in bots.

Policy ids (int), used in the server's seat arrays, league results and the payoff matrix alike:
  LEARNER (-1)   the learning policy (in the pool's terms, "the latest");
  v >= 0         the frozen snapshot taken at learner policy version v; in a league of roles
                 (seedlike.league.roles), k * STRIDE + v is role ROLES[k]'s, so the main agent's
                 ids are its versions;
  <= -2          a built-in bot, `BOTS[name].id`;
  UNSEEN         a learning policy of another process that this server does not see: the other
                 side of a shared game (league.shared_games, seedlike.league.roles).
`describe` names them for people and metrics ("learner", "random", "v200",
"main_exploiter/v40"); `policy_id` reads ids back from those names or from numpy integers and
JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

import numpy as np

from seedlike.config import ROLES
from seedlike.league import connect_four

LEARNER = -1
UNSEEN = -(2**62)
STRIDE = 1_000_000_000  # policy ids of role k's snapshots: k * STRIDE + version
MINE_PLANE, THEIRS_PLANE = connect_four.MINE, connect_four.THEIRS


class Agent(Protocol):
    name: str

    def reset(self, num_envs: int) -> None:
        """Called before a match: forget any per-env state."""

    def act(
        self, obs: dict, legal_mask: np.ndarray, env_id: np.ndarray, first: np.ndarray, rng
    ) -> np.ndarray:
        """Actions int32 [n] for n acting rows (obs [n, ...], legal_mask bool [n, A])."""


class RandomAgent:
    """Uniformly random legal actions; with `sizes` (a factorized action, EnvSpec.action_heads)
    each argument is drawn from its own part of the mask."""

    name = "random"

    def __init__(self, sizes: tuple[int, ...] = ()):
        self.sizes = tuple(sizes)

    def reset(self, num_envs: int) -> None:
        pass

    def act(self, obs, legal_mask, env_id, first, rng) -> np.ndarray:
        if not self.sizes:
            return connect_four.random_actions(None, legal_mask, rng)
        parts = np.split(legal_mask, np.cumsum(self.sizes)[:-1], axis=-1)
        args = [connect_four.random_actions(None, m, rng) for m in parts]
        return np.ravel_multi_index(args, self.sizes).astype(np.int32)


class ScriptedConnectFour:
    """Win if you can, block if you must, else a random legal column."""

    name = "scripted"

    def reset(self, num_envs: int) -> None:
        pass

    def act(self, obs, legal_mask, env_id, first, rng) -> np.ndarray:
        return connect_four.scripted_actions(obs["obs"], legal_mask, rng)


class MatchEnded(Exception):
    """Raised by an agent that ends the match (a person typing end-of-input): play_match returns
    the games finished so far."""


class HumanAgent:
    """A person at the keyboard (play.py --b=human): shows the board from their side and reads
    a legal move. Games with a drop rule (Connect Four) take a column, the others a cell; both
    are numbered from 1 on screen. Each game starts with who is who, and ends with its last
    position. play_match plays one game at a time with an interactive agent.

    Args:
      read: returns the next line typed (`input` by default; end-of-input ends the match).
      write: prints a line.
    """

    name = "human"
    interactive = True

    def __init__(self, read: Callable[[str], str] = input, write: Callable[[str], None] = print):
        self._read = read
        self._write = write
        self._by_column = False  # the game's moves are columns (Connect Four), not cells

    def reset(self, num_envs: int) -> None:
        pass

    def act(self, obs, legal_mask, env_id, first, rng) -> np.ndarray:
        moves = []
        for board, mask, new_game in zip(obs["obs"], legal_mask, first):
            if new_game:
                order = "first" if not board.any() else "second"
                self._write(f"New game: X yours, O theirs; you move {order}.")
            moves.append(self._move(board, mask))
        return np.array(moves, np.int32)

    def game_over(self, outcome: int, board: np.ndarray | None = None) -> None:
        """Called with +1 / 0 / -1 from this agent's side when one of its games ends, and the
        final board from its side where the env shows it (the move that decided the game)."""
        if board is not None:
            self._write(render_board(board, numbered_cells=not self._by_column))
        self._write({1: "You win.", 0: "Draw.", -1: "You lose."}[int(np.sign(outcome))])

    def _move(self, board: np.ndarray, legal: np.ndarray) -> int:
        rows, cols = board.shape[:2]
        by_column = self._by_column = legal.shape[0] == cols and rows * cols != cols
        self._write(render_board(board, numbered_cells=not by_column))
        what = "column" if by_column else "cell"
        choices = [str(a + 1) for a in np.flatnonzero(legal)]
        while True:
            try:
                typed = self._read(f"your move, {what} {'/'.join(choices)}: ").strip()
            except EOFError:
                self._write("no move typed; the match ends")
                raise MatchEnded() from None
            if typed in choices:
                return int(typed) - 1
            self._write(f"{typed!r} is not a legal {what}; type one of {', '.join(choices)}")


def render_board(board: np.ndarray, numbered_cells: bool = False) -> str:
    """A board bool [rows, cols, 2] (own stones, then the opponent's) as text: X yours, O theirs.
    Empty cells show their number (from 1) with `numbered_cells`, else '.', under a header of
    column numbers."""
    rows, cols = board.shape[:2]
    lines = [] if numbered_cells else [" ".join(str(c + 1) for c in range(cols))]
    for r in range(rows):
        cells = []
        for c in range(cols):
            if board[r, c, MINE_PLANE]:
                cells.append("X")
            elif board[r, c, THEIRS_PLANE]:
                cells.append("O")
            else:
                cells.append(str(r * cols + c + 1) if numbered_cells else ".")
        lines.append(" ".join(cells))
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Bot:
    """A built-in opponent: a policy id, an agent without per-env state, and the envs it plays
    (() = any env; without a legal-action mask every action is legal)."""

    id: int
    make: Callable[[], Agent]
    envs: tuple[str, ...] = ()

    def plays(self, env_name: str) -> bool:
        return not self.envs or env_name in self.envs


BOTS = {
    "random": Bot(-2, RandomAgent),
    # pgx's connect_four gives the same planes (seedlike.envs.pgx_env)
    "scripted": Bot(-3, ScriptedConnectFour, ("ConnectFour-v1", "connect_four")),
}
_BOT_NAMES = {bot.id: name for name, bot in BOTS.items()}


def is_bot(policy: int) -> bool:
    return int(policy) in _BOT_NAMES


def bot_name(policy: int) -> str:
    return _BOT_NAMES[int(policy)]


def bot_id(name: str) -> int:
    """The policy id of bot `name`, with an error that lists the bots."""
    if name not in BOTS:
        raise ValueError(f"unknown bot {name!r}; choose from {sorted(BOTS)}")
    return BOTS[name].id


def make_bot(name: str, spec) -> Agent:
    """Bot `name`, checked against the env in `spec` (an EnvSpec)."""
    bot_id(name)  # unknown names fail here, with the list
    bot = BOTS[name]
    if not bot.plays(spec.name):
        raise ValueError(f"the {name} bot plays {', '.join(bot.envs)}, not {spec.name}")
    if spec.action_heads:
        return RandomAgent(spec.action_heads)  # the only bot with factorized actions
    return bot.make()


def bots_for(env_name: str) -> list[str]:
    """Names of the bots that play `env_name`."""
    return [name for name, bot in BOTS.items() if bot.plays(env_name)]


def policy_id(value: object) -> int:
    """`value` as a plain int policy id: an int (numpy's too) or a name `describe` gives, so ids
    compare equal and serialize to JSON whatever their source (older league states named TrueSkill
    references "random", "v200")."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        if value == "learner":
            return LEARNER
        if value in BOTS:
            return BOTS[value].id
        role, _, version = value.rpartition("/")
        if version[:1] == "v" and version[1:].isdigit() and (not role or role in ROLES[1:]):
            return (ROLES.index(role) if role else 0) * STRIDE + int(version[1:])
    raise ValueError(
        f"{value!r} is not a policy id: an int, 'learner', 'v<version>', '<role>/v<version>' or "
        f"a bot ({sorted(BOTS)})"
    )


def describe(policy: int) -> str:
    """'learner', a bot's name, or 'v<version>' for a snapshot ('<role>/v<version>' for an
    exploiter's)."""
    policy = int(policy)
    if policy == LEARNER:
        return "learner"
    if policy == UNSEEN:
        return "shared"
    if is_bot(policy):
        return bot_name(policy)
    role, version = divmod(policy, STRIDE)
    return f"{ROLES[role]}/v{version}" if role else f"v{version}"
