"""A corridor: walk right to reach the goal. README "Your own environment" trains it."""

import gymnasium as gym


class Corridor(gym.Env):
    def __init__(self, length: int = 8):
        self.length = length
        self.observation_space = gym.spaces.Discrete(length)  # where the agent stands
        self.action_space = gym.spaces.Discrete(2)  # 0: left, 1: right

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = 0, 0
        return self.position, {}

    def step(self, action):
        self.position = min(max(self.position + (1 if action == 1 else -1), 0), self.length - 1)
        self.steps += 1
        arrived = self.position == self.length - 1
        return self.position, 1.0 if arrived else -0.01, arrived, self.steps >= 4 * self.length, {}
