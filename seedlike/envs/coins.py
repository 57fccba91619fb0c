"""Coins: a small two-team game that learns in minutes (PettingZoo parallel API, numpy only).

Two teams of `team_size` players share a `size` x `size` grid with `num_coins` coins. Every step
each player moves (stay, up, down, left, right; walls stop it). A player that ends its move on a
coin scores +1 and the coin reappears on a random free cell. Where players of both teams end on
one cell, the outnumbered side's players there die (ties: nobody). A dead player comes back
`respawn` steps later on a random cell, `lives` times in all. The game ends after `max_steps`
steps (every live agent truncated).

PettingZoo never revives an agent that terminated, so every life is an agent of its own: agents
die and new ones appear in the middle of an episode. Agents are named "red_<i>.<life>" and
"blue_<i>.<life>"; possible_agents lists red's lives first (life 0 of every player, then life 1,
...), then blue's, so with teams.sizes = (team_size * lives,) * 2 player ids below the first size
are red.

Each agent sees a (2 * size - 1)-wide square centred on itself, channels: off the board,
teammates, opponents, coins (float32 [2 * size - 1, 2 * size - 1, 4]).

A random team scores about 1.6 coins per agent per game with the defaults; a team that walks to
the nearest coin about 5.
"""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], np.int64)


class Coins(ParallelEnv):
    metadata = {"name": "coins_v0", "render_modes": ["rgb_array"]}

    def __init__(
        self,
        size: int = 5,
        team_size: int = 2,
        num_coins: int = 3,
        max_steps: int = 32,
        respawn: int = 4,
        lives: int = 2,
        render_mode: str | None = None,
    ):
        self.size, self.team_size, self.num_coins = int(size), int(team_size), int(num_coins)
        self.max_steps, self.respawn, self.lives = int(max_steps), int(respawn), int(lives)
        self.render_mode = render_mode
        n = 2 * self.team_size  # players (bodies on the board); agents are their lives
        self.possible_agents = [
            f"{color}_{i}.{life}"
            for color in ("red", "blue")
            for life in range(self.lives)
            for i in range(self.team_size)
        ]
        self._index = {a: k for k, a in enumerate(self.possible_agents)}
        self.team = np.repeat([0, 1], self.team_size)
        self.life = np.zeros(n, np.int64)
        self._view = 2 * self.size - 1
        self._rng = np.random.default_rng()
        self.pos = np.zeros((n, 2), np.int64)
        self.alive = np.zeros(n, np.bool_)
        self.wait = np.zeros(n, np.int64)  # steps until a dead agent reappears
        self.coins = np.zeros((self.num_coins, 2), np.int64)
        self.t = 0
        self.agents: list[str] = []

    @functools.cache  # noqa: B019  (PettingZoo asks for the same space object every time)
    def observation_space(self, agent):
        return gymnasium.spaces.Box(0.0, 1.0, (self._view, self._view, 4), np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent):
        return gymnasium.spaces.Discrete(len(MOVES))

    def agent(self, player: int) -> str:
        """The agent playing `player`'s current life."""
        team, i = divmod(int(player), self.team_size)
        life = int(self.life[player])
        return self.possible_agents[(team * self.lives + life) * self.team_size + i]

    def player(self, agent: str) -> int:
        k = self._index[agent]
        team, rest = divmod(k, self.lives * self.team_size)
        return team * self.team_size + rest % self.team_size

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t = 0
        self.pos = self._rng.integers(0, self.size, self.pos.shape)
        self.alive[:] = True
        self.wait[:] = 0
        self.life[:] = 0
        for c in range(self.num_coins):
            self.coins[c] = self._free_cell()
        self.agents = [self.agent(b) for b in range(self.pos.shape[0])]
        return self._observations(self.agents), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        acting = [a for a in self.agents if a in actions]
        idx = np.array([self.player(a) for a in acting], np.int64)
        if idx.size:
            moves = MOVES[np.array([int(actions[a]) for a in acting])]
            self.pos[idx] = np.clip(self.pos[idx] + moves, 0, self.size - 1)
        reward = np.zeros(self.pos.shape[0], np.float32)
        died = self._fights()
        for i in np.flatnonzero(self.alive):
            hit = np.flatnonzero((self.coins == self.pos[i]).all(axis=1))
            for c in hit:
                reward[i] += 1.0
                self.coins[c] = self._free_cell()
        # Reported this step: every agent that was live before it (the dead with terminated=True),
        # and the new lives of players that come back (their first row: reward 0).
        before = list(self.agents)
        waiting = ~self.alive & ~died
        back = np.flatnonzero(waiting & (self.wait == 1))
        self.wait[waiting] -= 1
        over = self.t >= self.max_steps
        if over:
            back = back[:0]
        for b in back:
            self.alive[b] = True
            self.life[b] += 1
            self.pos[b] = self._free_cell()
        new = [self.agent(b) for b in back]
        reported = before + new
        player = {a: self.player(a) for a in reported}
        terms = {a: a not in new and bool(died[player[a]]) for a in reported}
        truncs = {a: over and not terms[a] for a in reported}
        rewards = {a: 0.0 if a in new else float(reward[player[a]]) for a in reported}
        obs = self._observations(reported)
        self.agents = [] if over else [a for a in reported if not terms[a]]
        return obs, rewards, terms, truncs, {a: {} for a in reported}

    def _fights(self) -> np.ndarray:
        """Kills the outnumbered agents on every cell shared by both teams; returns who died."""
        died = np.zeros(self.pos.shape[0], np.bool_)
        live = np.flatnonzero(self.alive)
        cell = self.pos[live, 0] * self.size + self.pos[live, 1]
        for c in np.unique(cell):
            here = live[cell == c]
            red = here[self.team[here] == 0]
            blue = here[self.team[here] == 1]
            if red.size and blue.size and red.size != blue.size:
                died[blue if red.size > blue.size else red] = True
        self.alive[died] = False
        # The last life stays dead (wait 0 never counts down to a comeback).
        self.wait[died] = np.where(self.life[died] + 1 < self.lives, self.respawn, 0)
        return died

    def _free_cell(self) -> np.ndarray:
        taken = {tuple(p) for p in self.coins} | {tuple(p) for p in self.pos[self.alive]}
        free = [(r, c) for r in range(self.size) for c in range(self.size) if (r, c) not in taken]
        return np.asarray(free[self._rng.integers(len(free))] if free else (0, 0), np.int64)

    def _observations(self, agents) -> dict:
        s, v = self.size, self._view
        board = np.zeros((3, s, s), np.float32)  # team 0, team 1, coins
        for i in np.flatnonzero(self.alive):
            board[self.team[i], self.pos[i, 0], self.pos[i, 1]] += 1.0
        board[2, self.coins[:, 0], self.coins[:, 1]] = 1.0
        board[:2] = np.minimum(board[:2], 1.0)
        out = {}
        for agent in agents:
            i = self.player(agent)
            view = np.zeros((v, v, 4), np.float32)
            view[..., 0] = 1.0  # off the board, until the board is pasted in
            r0, c0 = s - 1 - self.pos[i, 0], s - 1 - self.pos[i, 1]
            mine, theirs = board[self.team[i]], board[1 - self.team[i]]
            view[r0 : r0 + s, c0 : c0 + s, 0] = 0.0
            view[r0 : r0 + s, c0 : c0 + s, 1] = mine
            view[r0 : r0 + s, c0 : c0 + s, 2] = theirs
            view[r0 : r0 + s, c0 : c0 + s, 3] = board[2]
            out[agent] = view
        return out

    def render(self):
        image = np.full((self.size, self.size, 3), 255, np.uint8)
        image[self.coins[:, 0], self.coins[:, 1]] = (230, 190, 0)
        for i in np.flatnonzero(self.alive):
            image[self.pos[i, 0], self.pos[i, 1]] = (200, 40, 40) if self.team[i] == 0 else (
                40, 60, 200)  # fmt: skip
        return np.kron(image, np.ones((16, 16, 1), np.uint8))

    def close(self):
        pass


def parallel_env(**kwargs) -> Coins:
    return Coins(**kwargs)
