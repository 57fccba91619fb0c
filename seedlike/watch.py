"""Watching a policy: play episodes of a checkpoint in one env, locally (no server), and
keep envpool's rendered frames (`render_mode="rgb_array"`) for a GIF (`watch.py`).

The env is the checkpoint's own (same task, frame stacking, episodic life, ...), one copy, stepped
synchronously. In two-player games the checkpoint is player 0 and `opponent` (an Agent: a bot,
another checkpoint, by default the same policy) player 1; envpool picks who moves first.

MuJoCo without a GPU: envpool renders its MuJoCo tasks through an EGL device of its own, which a
machine without one (no /dev/dri, no NVIDIA driver: most CPU nodes) lacks, and then it exits the
process ("gladLoadGL error"). Where a probe in a child process finds that, the policy plays
Gymnasium's copy of the task instead (the same model and observations, the `mujoco` package),
rendered in software by OSMesa (the system's libOSMesa, which scripts/setup_venv.sh installs).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile

import numpy as np

from seedlike.checkpoint import load_checkpoint
from seedlike.envs import make_env, takes_render_mode
from seedlike.envs.spaces import EnvActions
from seedlike.league.games import NetworkAgent
from seedlike.policy import PolicyRunner
from seedlike.teams import Teams
from seedlike.types import LEGAL_ACTION_MASK


@dataclasses.dataclass
class Recording:
    env_name: str
    frames: list  # uint8 [H, W, 3] each, the first one after the reset
    returns: list  # undiscounted return of each finished episode (player 0's in games)
    lengths: list  # env steps of each finished episode
    policy_version: int | None = None  # of the checkpoint played
    env_steps: int | None = None  # the checkpoint's run had trained on
    num_players: int = 1  # of the env (2: a game against an opponent)


def record_episodes(
    checkpoint: str,
    episodes: int = 1,
    greedy: bool = True,
    opponent=None,
    seed: int = 0,
    max_frames: int = 3000,
    render: bool = True,
) -> Recording:
    """Plays `episodes` episodes of `checkpoint` (a run, checkpoints or step directory), or until
    `max_frames` observations, and returns the frames (none without `render`) and results."""
    config, network, state, meta = load_checkpoint(checkpoint)
    env_config = config.env.copy_and_resolve_references()
    env_config.num_envs, env_config.batch_envs, env_config.num_threads = 1, 0, 1
    if render:
        if not takes_render_mode(env_config):
            raise ValueError(
                f"{env_config.name}: its env factory takes no render_mode, so it cannot give "
                "frames; score it without a GIF (python evaluate.py --checkpoint=...)"
            )
        env_config.kwargs = {**env_config.kwargs, "render_mode": "rgb_array"}
        _software_mujoco(env_config)
    spec = network.spec
    params = {"params": state.params, "obs_norm": state.obs_norm}
    if spec.num_players > 2:  # a multi-agent env: the policy plays every agent of every team
        team_of = Teams.from_config(config.teams, spec).team_of
        out = _record_team_game(env_config, spec, network, params, team_of, episodes,
                                greedy, seed, max_frames, render)  # fmt: skip
        out.policy_version, out.env_steps = int(state.policy_version), meta.get("env_steps")
        out.num_players = spec.num_players
        return out
    agents = [NetworkAgent(PolicyRunner(network, greedy=greedy, seed=seed), params)]
    if spec.num_players == 2:
        agents.append(opponent or NetworkAgent(PolicyRunner(network, greedy, seed + 1), params))
    for agent in agents:
        agent.reset(1)
    env = make_env(env_config, spec, seed)
    to_env = EnvActions(spec, env_config.action_bounds, network.action_squash)
    rng = np.random.default_rng(seed)
    out = Recording(
        config.env.name,
        [],
        [],
        [],
        int(state.policy_version),
        meta.get("env_steps"),
        spec.num_players,
    )
    first = np.ones(len(agents), bool)  # per player: the next move starts an episode
    act_spec = spec.action_spec

    def score(rows):
        mine = rows.player_id == 0
        return float(rows.reward[mine].sum()), bool(rows.game_over[mine].any())

    def act(rows, ended):
        if ended:
            first[:] = True
        actions = np.zeros((rows.reward.shape[0], *act_spec.shape), act_spec.dtype)
        for p, agent in enumerate(agents):
            acting = rows.acting & (rows.player_id == p)
            if not acting.any():
                continue
            first_move = np.array([first[p]])
            actions[acting] = _act(
                agent, rows, acting, rows.env_id[acting], first_move, spec.logits_size, rng
            )
            first[p] = False
        return to_env(actions), bool(rows.acting[rows.player_id == 0].any())

    return _play(env, out, episodes, max_frames, render, score, act)


def _play(env, out: Recording, episodes: int, max_frames: int, render: bool, score, act):
    """Steps `env` until `episodes` episodes end (or `max_frames` observations), recording
    frames and results into `out`: score(rows) -> (the recorded side's reward, whether its
    episode ended), act(rows, ended) -> (the env's actions, whether the recorded side moved)."""
    episode_return, length, observed = 0.0, 0, 0
    env.reset()
    try:
        while len(out.returns) < episodes and observed < max_frames:
            rows = env.recv()
            observed += 1
            if render:
                out.frames.append(env.render())
            reward, ended = score(rows)
            episode_return += reward
            if ended:
                out.returns.append(episode_return)
                out.lengths.append(length)
                episode_return, length = 0.0, 0
            actions, moved = act(rows, ended)
            length += int(moved)
            env.send(actions, rows)
    finally:
        env.close()
    return out


def _software_mujoco(env_config) -> None:
    """Switches an envpool MuJoCo task that cannot render here to Gymnasium's copy rendered by
    OSMesa (the module docstring says why); ValueError naming what to install where that cannot
    work either."""
    if env_config.backend != "envpool" or _envpool_module(env_config.name) != "envpool.mujoco.gym":
        if _envpool_module(env_config.name) == "envpool.mujoco.dmc" and not _envpool_renders():
            raise ValueError(
                f"{env_config.name}: envpool renders MuJoCo through an EGL device, which this "
                "machine lacks (no GPU driver); record it where one is, or score it without a "
                "GIF (python evaluate.py --checkpoint=...)"
            )
        return
    if _envpool_renders():
        return
    import gymnasium

    missing = [m for m in ("mujoco", "OpenGL", "imageio") if importlib.util.find_spec(m) is None]
    if missing or env_config.name not in gymnasium.registry or not _has_osmesa():
        raise ValueError(
            f"{env_config.name}: envpool renders MuJoCo through an EGL device, which this machine "
            "lacks (no GPU driver), and the software renderer needs `apt-get install libosmesa6` "
            "and `pip install mujoco PyOpenGL imageio` (scripts/setup_venv.sh does both)"
        )
    logging.info(
        "%s: envpool cannot render MuJoCo here (no EGL device); recording Gymnasium's copy of "
        "the task, rendered by OSMesa",
        env_config.name,
    )
    # Before the mujoco package first loads (it picks its GL backend once).
    os.environ["MUJOCO_GL"] = os.environ["PYOPENGL_PLATFORM"] = "osmesa"
    env_config.backend = "gymnasium"
    env_config.kwargs = {"render_mode": "rgb_array"}


def _envpool_module(name: str) -> str | None:
    try:
        from envpool.registration import registry
    except ImportError:
        return None
    entry = registry.specs.get(name)
    return entry[0] if entry else None


@functools.cache
def _envpool_renders() -> bool:
    """Whether envpool's MuJoCo renderer works on this machine: tried in a child process, since
    where it does not, it ends the process it runs in."""
    probe = (
        "import envpool; e = envpool.make('Hopper-v4', env_type='gymnasium', num_envs=1, "
        "render_mode='rgb_array'); e.reset(); assert e.render().size; print('rendered')"
    )
    try:
        # In a folder of its own: a failing MuJoCo writes MUJOCO_LOG.TXT where it runs.
        with tempfile.TemporaryDirectory() as folder:
            done = subprocess.run(
                [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                cwd=folder,
            )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and "rendered" in done.stdout


def _has_osmesa() -> bool:
    import ctypes.util

    return ctypes.util.find_library("OSMesa") is not None


def _record_team_game(
    env_config, spec, network, params, team_of, episodes, greedy, seed, max_frames, render
) -> Recording:
    """record_episodes for envs of many agents: one policy plays every seat (a recurrent state
    each); an episode is a whole game, its return the summed reward of team 0's agents."""
    agent = NetworkAgent(PolicyRunner(network, greedy=greedy, seed=seed), params)
    agent.reset(spec.num_players)
    env = make_env(env_config, spec, seed)
    rng = np.random.default_rng(seed)
    out = Recording(env_config.name, [], [], [])
    first = np.ones(spec.num_players, bool)

    def score(rows):
        ours = float(rows.reward[team_of[rows.player_id] == 0].sum())
        return ours, bool((rows.terminated | rows.truncated).all())  # the env resets next

    def act(rows, ended):
        if ended:
            first[:] = True
        actions = np.zeros(rows.reward.shape[0], np.int32)
        acting = rows.acting
        if acting.any():
            seat = rows.player_id[acting]
            actions[acting] = _act(agent, rows, acting, seat, first[seat], spec.logits_size, rng)
            first[seat] = False
        first[rows.player_id[~acting]] = True
        return actions, bool(acting.any())

    return _play(env, out, episodes, max_frames, render, score, act)


def _act(agent, rows, acting, slot, first, logits_size, rng) -> np.ndarray:
    """`agent`'s actions for the `acting` rows; `slot` [k] indexes its recurrent state per row.
    Without a legal-action mask every action is legal."""
    obs = {k: v[acting] for k, v in rows.obs.items()}
    mask = rows.extras.get(LEGAL_ACTION_MASK)
    mask = mask[acting] if mask is not None else np.ones((slot.size, logits_size), bool)
    return agent.act(obs, mask, slot, first, rng)


def save_gif(frames: list, path: str, fps: float = 30.0) -> None:
    """Writes frames (uint8 [H, W, 3]) as a looping GIF."""
    from PIL import Image

    if not frames:
        raise ValueError("no frames to save")
    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    images[0].save(
        path,
        save_all=True,
        append_images=images[1:],
        duration=max(int(round(1000.0 / fps)), 20),  # GIF delays are in 10 ms units, 20 minimum
        loop=0,
    )
