"""Targets: a small entity-and-pointer task that learns in a minute (PettingZoo parallel API).

Every step each agent sees its own fresh scene of 2..E entities in random slots of an entity set
(float32 [E, 5]: a one-hot kind of three, hit points in [0.1, 1], a constant 1; empty slots are all
zero) and chooses a factorized action (MultiDiscrete [3, E]): a style and a target slot. The
target must be the weakest entity (fewest hit points) and the style must counter its kind:

    reward = 0.5 [target is the weakest] + 0.5 [style == kind of the target]

so both halves need the entity the pointer chose, and the style head must read what the encoder
found out about the weakest entity. The `action_mask` observation (a tuple of int8 [3] and [E], one
mask per argument as PettingZoo has them) allows every style and the occupied slots. Episodes last
`steps` steps. A uniformly random legal policy scores about 0.3 a step; the optimum is 1.

Agents do not interact: more agents are more rows per env step.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

KINDS = 3
FEATURES = KINDS + 2


class Targets(ParallelEnv):
    metadata = {"name": "targets_v0", "render_modes": []}

    def __init__(self, num_agents: int = 1, entities: int = 8, steps: int = 8):
        if entities < 2 or num_agents < 1 or steps < 1:
            raise ValueError("Targets needs entities >= 2, num_agents >= 1 and steps >= 1")
        self.entities, self.steps = int(entities), int(steps)
        self.possible_agents = [f"agent_{i}" for i in range(int(num_agents))]
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._t = 0
        self._observation_space = gymnasium.spaces.Dict(
            {
                "entities": gymnasium.spaces.Box(0.0, 1.0, (self.entities, FEATURES), np.float32),
                # One mask per action argument (PettingZoo's form for MultiDiscrete actions).
                "action_mask": gymnasium.spaces.Tuple(
                    (
                        gymnasium.spaces.MultiBinary(KINDS),
                        gymnasium.spaces.MultiBinary(self.entities),
                    )
                ),
            }
        )
        self._action_space = gymnasium.spaces.MultiDiscrete([KINDS, self.entities])

    def observation_space(self, agent):
        return self._observation_space

    def action_space(self, agent):
        return self._action_space

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._scenes = [self._scene() for _ in self.agents]
        return self._observe(), {a: {} for a in self.agents}

    def _scene(self) -> np.ndarray:
        scene = np.zeros((self.entities, FEATURES), np.float32)
        count = self._rng.integers(2, self.entities + 1)
        slots = self._rng.choice(self.entities, count, replace=False)
        scene[slots, self._rng.integers(0, KINDS, count)] = 1.0
        scene[slots, KINDS] = self._rng.uniform(0.1, 1.0, count)
        scene[slots, KINDS + 1] = 1.0
        return scene

    def _observe(self) -> dict:
        obs = {}
        for agent, scene in zip(self.agents, self._scenes):
            mask = (np.ones(KINDS, np.int8), scene[:, KINDS + 1].astype(np.int8))
            obs[agent] = {"entities": scene, "action_mask": mask}
        return obs

    def step(self, actions):
        rewards = {}
        for agent, scene in zip(self.agents, self._scenes):
            style, target = (int(x) for x in actions[agent])
            health = np.where(scene[:, KINDS + 1] > 0, scene[:, KINDS], np.inf)
            weakest = target == int(np.argmin(health))
            rewards[agent] = 0.5 * weakest + 0.5 * bool(scene[target, style] > 0)
        self._t += 1
        done = self._t >= self.steps
        self._scenes = [self._scene() for _ in self.agents]
        obs = self._observe()
        terminations = {a: done for a in self.agents}  # a game of fixed length
        truncations = {a: False for a in self.agents}
        infos = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


def parallel_env(**kwargs) -> Targets:
    return Targets(**kwargs)
