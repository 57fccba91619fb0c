"""Connect Four tactics of trained policies in their games against the scripted agent.

  python -m benchmarks.connect4_tactics --agents=runs/c4,runs/c4/league/snapshots/20 [--games=400]

Each agent (a run, checkpoint or league snapshot; its most likely legal move) plays --games games
against the scripted agent (win if you can, block if you must, else random), both colours. At each
of its moves we check, by the rules:
  take_win:    it could complete four. Did it?
  block:       it could not, but the opponent could on its next move. Did it take that cell?
  safe:        some move would not hand the opponent a win next move (and it did not win). Did it
               play one?
The random agent is the baseline of the same run. Writes JSON to --out and prints it.
"""

from __future__ import annotations

import numpy as np
from absl import app, flags

from benchmarks import results_io
from seedlike.league import games, players, search

_AGENTS = flags.DEFINE_list("agents", None, "Runs, checkpoints or league snapshots.")
_GAMES = flags.DEFINE_integer("games", 400, "Games against the scripted agent per agent.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the matches.")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")

C4 = search.GAMES["ConnectFour-v1"]


def tactics(mine: np.ndarray, theirs: np.ndarray, actions: np.ndarray) -> dict:
    """Per question, (asked, answered right) bool [n] for moves `actions` in the positions."""
    rows = np.arange(actions.shape[0])
    after, legal, win, _ = C4.moves(mine, theirs)
    _, _, threat, _ = C4.moves(theirs, mine)
    # A move is unsafe when the opponent can win right after it (on top of it or elsewhere).
    unsafe = np.zeros_like(legal)
    for a in range(C4.num_actions):
        unsafe[:, a] = legal[:, a] & C4.moves(theirs, after[:, a])[2].any(1)
    can_win = win.any(1)
    return {
        "take_win": (can_win, win[rows, actions]),
        "block": (~can_win & (threat & legal).any(1), (threat & legal)[rows, actions]),
        "safe": (~can_win & (legal & ~unsafe).any(1), ~unsafe[rows, actions]),
    }


class Probe:
    """Wraps an agent and scores every move it makes with `tactics`."""

    def __init__(self, agent):
        self.agent = agent
        self.name = agent.name
        self.asked: dict[str, list[np.ndarray]] = {}
        self.right: dict[str, list[np.ndarray]] = {}

    def reset(self, num_envs: int) -> None:
        self.agent.reset(num_envs)

    def act(self, obs, legal_mask, env_id, first, rng) -> np.ndarray:
        actions = self.agent.act(obs, legal_mask, env_id, first, rng)
        board = np.asarray(obs["obs"], np.bool_)
        for name, (asked, right) in tactics(board[..., 0], board[..., 1], actions).items():
            self.asked.setdefault(name, []).append(asked)
            self.right.setdefault(name, []).append(right)
        return actions

    def summary(self) -> dict:
        out = {}
        for name in self.asked:
            asked, right = np.concatenate(self.asked[name]), np.concatenate(self.right[name])
            out[name] = {"moves": int(asked.sum()), "right": round(float(right[asked].mean()), 4)}
        return out


def measure(agent, num_games: int, seed: int) -> dict:
    probe = Probe(agent)
    result = games.play_match(
        "ConnectFour-v1", probe, players.ScriptedConnectFour(), num_games, seed=seed
    )
    return {"win_rate_vs_scripted": round(result.wins / num_games, 4), **probe.summary()}


def main(argv):
    del argv
    if not _AGENTS.value:
        raise app.UsageError("--agents: at least one run, checkpoint or league snapshot")
    result = {
        "games": _GAMES.value,
        "random": measure(players.RandomAgent(), _GAMES.value, _SEED.value),
    }
    for path in _AGENTS.value:
        agent = games.checkpoint_agent(path, greedy=True)
        result[agent.name] = measure(agent, _GAMES.value, _SEED.value)
    results_io.write("connect4_tactics", result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
