"""A dial with several knobs: which knob to turn (discrete) and where to set it (continuous).

Each step shows which of `knobs` knobs is live (one-hot) and a target setting t in [-1, 1]; the
action is {"knob": which, "setting": [s]}. Turning the live knob pays 1 - |s - t| (clipped at 0),
any other knob 0. Neither head alone solves it: the right knob set at random pays about 0.5, the
wrong one nothing, so a policy must learn both the choice and the value (a mixed
discrete + continuous action). Episodes last `steps` steps; the best return is `steps`.
"""

import gymnasium as gym
import numpy as np


class Dial(gym.Env):
    def __init__(self, knobs: int = 3, steps: int = 4):
        self.knobs, self.steps = knobs, steps
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (knobs + 1,), np.float32)
        self.action_space = gym.spaces.Dict(
            {
                "knob": gym.spaces.Discrete(knobs),
                "setting": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
            }
        )

    def _observe(self):
        self.live = int(self.np_random.integers(self.knobs))
        self.target = float(self.np_random.uniform(-1.0, 1.0))
        obs = np.zeros(self.knobs + 1, np.float32)
        obs[self.live], obs[-1] = 1.0, self.target
        return obs

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        setting = float(np.asarray(action["setting"]).reshape(-1)[0])
        hit = int(action["knob"]) == self.live
        reward = max(0.0, 1.0 - abs(setting - self.target)) if hit else 0.0
        self.t += 1
        return self._observe(), reward, False, self.t >= self.steps, {}
