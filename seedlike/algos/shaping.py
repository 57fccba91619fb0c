"""Team reward shaping (OpenAI Five, arXiv:1912.06680, App. G): pure functions of one step's rows.

For agent i of team k(i) in env e(i), with raw reward r_i and the agents present this step:

  team spirit:  s_i = (1 - tau) r_i + tau * mean{ r_j : e(j) = e(i), k(j) = k(i) }
  zero-sum:     z_i = s_i - mean{ s_j : e(j) = e(i), k(j) != k(i) }    (0 without opponents)
  time decay:   d_i = z_i * decay ** (t_i / horizon)

tau = 0 trains each agent on its own reward, tau = 1 on its team's mean. Blending keeps a team's
mean reward, so zero-sum subtracts the opponents' raw mean as well; with two teams of equal size
that all report, the shaped rewards of an env sum to zero. t_i is the agent's step in its episode:
OpenAI Five decays by 0.6 every 10 minutes of game time, because late-game rewards (bigger fights)
would otherwise dominate learning.
"""

from __future__ import annotations

import numpy as np


def _group_sum(values: np.ndarray, group: np.ndarray, groups: int):
    """(sum, count) of `values` per group id in [0, groups)."""
    total = np.bincount(group, weights=values, minlength=groups)
    count = np.bincount(group, minlength=groups).astype(np.float64)
    return total, count


def team_rewards(
    reward: np.ndarray,
    env: np.ndarray,
    team: np.ndarray,
    num_teams: int,
    spirit: float,
    zero_sum: bool,
) -> np.ndarray:
    """Team spirit and zero-sum shaping of one step's rows, float32 [n].

    Args:
      reward: float [n], raw rewards.
      env: int [n], any id that is equal for rows of the same env.
      team: int [n] in [0, num_teams).
      spirit: tau in [0, 1].
      zero_sum: subtract the opposing teams' mean.
    """
    reward = np.asarray(reward, np.float64)
    if reward.size == 0:
        return reward.astype(np.float32)
    _, env_index = np.unique(env, return_inverse=True)
    envs = int(env_index.max()) + 1
    group = env_index * num_teams + np.asarray(team, np.int64)
    total, count = _group_sum(reward, group, envs * num_teams)
    team_mean = total[group] / count[group]
    shaped = (1.0 - spirit) * reward + spirit * team_mean
    if zero_sum:
        # Per env, the sum and count over all teams, less the agent's own team's.
        s_total, _ = _group_sum(shaped, group, envs * num_teams)
        env_total = s_total.reshape(envs, num_teams).sum(axis=1)[env_index]
        env_count = count.reshape(envs, num_teams).sum(axis=1)[env_index]
        others = env_count - count[group]
        opponents = np.where(others > 0, (env_total - s_total[group]) / np.maximum(others, 1), 0.0)
        shaped = shaped - opponents
    return shaped.astype(np.float32)


def time_decay(reward: np.ndarray, t: np.ndarray, decay: float, horizon: float) -> np.ndarray:
    """reward * decay ** (t / horizon), float32 [n]; horizon <= 0 leaves rewards as they are."""
    if horizon <= 0:
        return np.asarray(reward, np.float32)
    scale = np.power(float(decay), np.asarray(t, np.float64) / float(horizon))
    return (np.asarray(reward, np.float64) * scale).astype(np.float32)
