"""envpool adapters: turn any envpool task (discrete, or continuous and single-agent) into rows of
(env, player) seats.

The adapter speaks envpool's asynchronous API (`async_reset`, `recv`, `send`), which also covers the
synchronous case (`batch_size == num_envs`). Every call of `recv` returns a `Rows` batch; `send`
takes one action per row and forwards those of acting rows to envpool.

envpool auto-resets: the step after a terminated/truncated one is a reset whose action is ignored,
whose reward is 0 and whose `elapsed_step` is 0 (pinned down in
tests/envs/test_envpool_protocol.py).
"""

from __future__ import annotations

import difflib
import functools
import warnings

import numpy as np

from seedlike.envs import text
from seedlike.envs.spaces import spec_from_spaces
from seedlike.runtime.threadnames import name_new_threads, thread_ids
from seedlike.types import LEGAL_ACTION_MASK, MISSION_VOCAB_SIZE, ArraySpec, EnvSpec, Rows

# envpool declares float64 bounds for float32 boxes, and gymnasium warns about it twice in every
# process that makes a task's spaces: nothing a user can act on.
warnings.filterwarnings("ignore", r"(?s).*precision lowered by casting to float32", UserWarning)


@functools.cache
def _all_task_ids() -> tuple[str, ...]:
    import envpool

    return tuple(envpool.list_all_envs())


# envpool's Procgen tasks load the system Qt 5 runtime (scripts/setup_venv.sh installs it as root).
QT_FIX = (
    "the system Qt 5 runtime (envpool's Procgen): "
    "apt-get install -y --no-install-recommends libqt5gui5"
)
# MiniGrid/BabyAI's mission text (NUL-terminated bytes; word tokens with env.mission_tokens).
MISSION = "mission"


class UnknownTask(ValueError):
    """env.name is not an envpool task id (the message suggests close ones)."""


# Name prefixes of envs other packages register with Gymnasium, which envpool does not have.
GYMNASIUM_ONLY = ("minigrid", "babyai", "ale", "gymnasium_robotics", "highway", "pendulum-v1")


def check_task_id(name: str) -> None:
    tasks = _all_task_ids()
    if name not in tasks:
        close = difflib.get_close_matches(name, tasks, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        if ":" in name or name.split("/")[0].lower() in GYMNASIUM_ONLY:
            # package:Id (minigrid:MiniGrid-...) and ids envpool lacks are Gymnasium's.
            hint = (
                f" {name} reads as a Gymnasium id: set --config.env.backend=gymnasium "
                "(docs/environments.md)."
            )
        raise UnknownTask(
            f"env.name={name!r} is not an envpool task id.{hint} "
            "See envpool.list_all_envs() for the full list."
        )


def check_env(env_config) -> None:
    """The backend contract (seedlike/envs/__init__.py): UnknownTask unless env.name is a task."""
    check_task_id(env_config.name)


def takes_render_mode(name: str) -> bool:
    """Every envpool task renders (envpool.make's render_mode)."""
    del name
    return True


def envpool_kwargs(env_config) -> dict:
    """The keyword arguments for envpool.make/make_spec from a config's `env` section."""
    kwargs = dict(env_config.kwargs)
    kwargs["num_envs"], kwargs["num_threads"] = (
        int(env_config.num_envs),
        int(env_config.num_threads),
    )
    if env_config.batch_envs:  # 0 leaves it to envpool: batch_size = num_envs, synchronous
        kwargs["batch_size"] = int(env_config.batch_envs)
    return kwargs


def make_env_spec(env_config) -> EnvSpec:
    """Reads observation/action specs of the configured task without creating environments."""
    import envpool

    check_task_id(env_config.name)
    kwargs = {k: v for k, v in envpool_kwargs(env_config).items() if k not in ("num_threads",)}
    try:
        pool_spec = envpool.make_spec(env_config.name, **kwargs)
    except ImportError as e:
        if "Qt" not in str(e):
            raise
        raise ValueError(f"{env_config.name} needs {QT_FIX}") from None
    spec = spec_from_spaces(
        env_config.name,
        pool_spec.observation_space,
        pool_spec.action_space,
        num_players=int(pool_spec.config.max_num_players),
        turn_based=_turn_based(pool_spec),
    )
    keys = tuple(env_config.obs_keys)
    if keys:
        missing = sorted(set(keys) - set(spec.observation))
        if missing:
            raise ValueError(
                f"env.obs_keys={keys}: {env_config.name} has no observation {missing}; it has "
                f"{sorted(spec.observation)}"
            )
        for key in list(spec.observation):
            if key not in keys:
                del spec.observation[key]
    length = int(env_config.mission_tokens)
    if length:
        if MISSION not in spec.observation:
            raise ValueError(
                f"env.mission_tokens={length}: {env_config.name} has no observation {MISSION!r} "
                f"(it has {sorted(spec.observation)}); set env.mission_tokens=0"
            )
        spec.observation[MISSION] = ArraySpec(np.int32, (length,), high=MISSION_VOCAB_SIZE)
    indices = tuple(env_config.obs_indices)
    if indices:
        obs = spec.observation.get("obs")
        if obs is None or len(obs.shape) != 1 or not all(0 <= i < obs.shape[0] for i in indices):
            raise ValueError(
                f"env.obs_indices={indices} must select features of a vector observation; "
                f"{env_config.name} has { ({k: str(v) for k, v in spec.observation.items()}) }"
            )
        spec.observation["obs"] = ArraySpec(obs.dtype, (len(indices),))
    return spec


def _turn_based(pool_spec) -> bool:
    """Board games name the player of each row (info "players.id") and the player to move;
    simultaneous multi-agent tasks (e.g. intersection-multi-agent-v0) list their players' rows in
    env order, every one acting each step."""
    return "info:players.id" in pool_spec.state_array_spec


class EnvpoolAdapter:
    """Steps an envpool batch and reports rows; one actor owns one adapter."""

    def __init__(self, env_config, spec: EnvSpec, seed: int):
        import envpool

        self.spec = spec
        self._action_dtype = spec.action_spec.dtype
        kwargs = envpool_kwargs(env_config)
        self.num_envs = kwargs["num_envs"]
        # Hiding features (e.g. CartPole's velocities) turns a task into a partially observed one.
        indices = tuple(env_config.obs_indices)
        self._obs_indices = np.asarray(indices, np.int64) if indices else None
        length = int(env_config.mission_tokens)
        blank = bool(env_config.blank_mission)
        self._tokenizer = text.MissionTokenizer(length, blank) if length else None
        before = thread_ids()
        self._env = envpool.make(env_config.name, env_type="gymnasium", seed=int(seed), **kwargs)
        # Its worker threads by name, for `top -H` and benchmarks/actor_overhead.py.
        name_new_threads("envpool", before)
        self._turn_based = spec.num_players == 1 or _turn_based(self._env.spec)
        if not self._turn_based and self.num_envs != int(kwargs.get("batch_size", self.num_envs)):
            raise ValueError(
                f"{env_config.name} is a simultaneous multi-agent task: set env.batch_envs=0 "
                "(its players' rows come in whole envs only in synchronous mode)"
            )

    def reset(self) -> None:
        self._env.async_reset()

    def recv(self) -> Rows:
        obs, reward, terminated, truncated, info = self._env.recv()
        env_id = np.asarray(info["env_id"], np.int32)
        done = np.logical_or(terminated, truncated)
        if self.spec.num_players == 1:
            game_over = done
            if "lives" in info and "terminated" in info:
                # With episodic_life, `terminated` marks every lost life; info says the game ended.
                game_over = np.asarray(info["terminated"], np.bool_) | np.asarray(
                    truncated, np.bool_
                )
            return Rows(
                obs=self._obs_dict(obs),
                extras={},
                reward=np.asarray(reward, np.float32),
                terminated=np.asarray(terminated, np.bool_),
                truncated=np.asarray(truncated, np.bool_),
                env_id=env_id,
                player_id=np.zeros_like(env_id),
                acting=~done,
                game_over=game_over,
            )
        if not self._turn_based:
            return self._simultaneous_rows(obs, reward, terminated, truncated, info, env_id)
        return self._player_rows(obs, reward, terminated, truncated, info, env_id)

    def _simultaneous_rows(self, obs, reward, terminated, truncated, info, env_id) -> Rows:
        # Every player of every env reports and acts; rows come grouped by env, and a row's player
        # id is its rank within its env's group.
        row_env = np.asarray(info["players"]["env_id"], np.int32)
        starts = np.flatnonzero(np.r_[True, row_env[1:] != row_env[:-1]])
        counts = np.diff(np.r_[starts, row_env.shape[0]])
        row_player = (np.arange(row_env.shape[0]) - np.repeat(starts, counts)).astype(np.int32)
        pos = self._positions(env_id, row_env)
        row_term = np.asarray(terminated, np.bool_)[pos]
        row_trunc = np.asarray(truncated, np.bool_)[pos]
        return Rows(
            obs=self._obs_dict(obs),
            extras={},
            reward=np.asarray(reward, np.float32),
            terminated=row_term,
            truncated=row_trunc,
            env_id=row_env,
            player_id=row_player,
            acting=~(row_term | row_trunc),
            game_over=row_term | row_trunc,
        )

    def _player_rows(self, obs, reward, terminated, truncated, info, env_id) -> Rows:
        # Board games report one row per (env, player); per-env fields are indexed by the position
        # of the env in this batch, which we recover from the row's env id.
        row_env = np.asarray(info["players"]["env_id"], np.int32)
        row_player = np.asarray(info["players"]["id"], np.int32)
        pos = self._positions(env_id, row_env)
        row_term = np.asarray(terminated, np.bool_)[pos]
        row_trunc = np.asarray(truncated, np.bool_)[pos]
        mover = np.asarray(info["current_player"], np.int32)[pos] == row_player
        acting = mover & ~(row_term | row_trunc)
        mask = np.asarray(info[LEGAL_ACTION_MASK], np.bool_)[pos]
        mask = np.where(acting[:, None], mask, True)
        return Rows(
            obs=self._obs_dict(obs),
            extras={LEGAL_ACTION_MASK: mask},
            reward=np.asarray(reward, np.float32),
            terminated=row_term,
            truncated=row_trunc,
            env_id=row_env,
            player_id=row_player,
            acting=acting,
            game_over=row_term | row_trunc,
        )

    def _positions(self, env_id: np.ndarray, row_env: np.ndarray) -> np.ndarray:
        """Per row, the position of its env in this batch (where per-env fields are)."""
        position = np.empty(self.num_envs, np.int64)
        position[env_id] = np.arange(env_id.shape[0])
        return position[row_env]

    def _obs_dict(self, obs) -> dict[str, np.ndarray]:
        if isinstance(obs, dict):
            out = {}
            for k, s in self.spec.observation.items():
                if k == MISSION and self._tokenizer is not None:
                    out[k] = self._tokenizer(obs[k])
                else:
                    out[k] = np.asarray(obs[k], s.dtype)
            return out
        if self._obs_indices is not None:
            obs = obs[:, self._obs_indices]
        return {"obs": np.asarray(obs, self.spec.observation["obs"].dtype)}

    def send(self, action: np.ndarray, rows: Rows) -> None:
        """Steps the envs of `rows` with the actions of their acting rows."""
        if self.spec.num_players == 1:  # int32 [n], or float32 [n, D] for a Box (MuJoCo)
            self._env.send(np.asarray(action, self._action_dtype), rows.env_id)
            return
        if not self._turn_based:  # one action per row, rows grouped by env as they came
            env = rows.env_id
            order = env[np.r_[True, env[1:] != env[:-1]]]
            self._env.send(np.asarray(action, np.int32), order.astype(np.int32))
            return
        # One action per env: the mover's. Envs that just ended still need an (ignored) action.
        env_ids = np.unique(rows.env_id)
        per_env = np.zeros(self.num_envs, np.int32)
        per_env[rows.env_id[rows.acting]] = action[rows.acting]
        self._env.send(per_env[env_ids], env_ids.astype(np.int32))

    def render(self) -> np.ndarray:
        """The first env as an RGB image uint8 [H, W, 3] (the env needs render_mode="rgb_array"
        in env.kwargs)."""
        return np.asarray(self._env.render())[0]

    def close(self) -> None:
        close = getattr(self._env, "close", None)
        if close is not None:
            close()


Adapter = EnvpoolAdapter  # the backend contract's name for it (seedlike/envs/__init__.py)
