"""PettingZoo adapter: any parallel-API multi-agent env as rows of (env, agent) seats.

PettingZoo's parallel API (`reset() -> (obs, infos)`, `step(actions) -> (obs, rewards,
terminations, truncations, infos)`, all dicts keyed by agent name) is the common interface of
multi-agent Python envs (MAgent2, MPE, Neural MMO, ...). An actor owns `num_envs` instances and
steps them one after another.

Seats: agent `possible_agents[p]` of env `e` is the row (env_id=e, player_id=p), so
`num_players = len(possible_agents)` and a seat keeps its agent for the whole run. Each step reports
the agents that received an observation: the live ones (acting) and those whose episode ended in
that step (terminated or truncated, not acting). An agent that has died sends no rows until its env
resets; one that appears mid-episode starts sending rows (and an episode) when it does.

Like envpool, an env whose agents are all done is reset on the next `send` (its rows' actions are
ignored) and its next rows are the new episode's first, with reward 0.

Imports only numpy and the env's own package: actors may run without jax (docs/teams.md, "An
actor in its own virtualenv").
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np

from seedlike.envs.spaces import spec_from_spaces
from seedlike.types import LEGAL_ACTION_MASK, ArraySpec, EnvSpec, Rows

# Observation key of the agent's one-hot player id (env.agent_id=True): replicas of one shared
# policy can tell which agent they play (OpenAI Five feeds the hero's identity the same way).
AGENT_ID = "agent_id"
# A dict observation's legal-action mask (PettingZoo's convention) becomes the policy's mask.
ACTION_MASK = "action_mask"


# Packages whose PyPI name differs from the module missing, or that seedlike installs itself.
_INSTALL = {"magent2": "pip install -e .[magent]", "pygame": "pip install pygame-ce"}


def load_factory(name: str):
    """`module` or `module:function` -> the function making a parallel env (`parallel_env`)."""
    module_name, _, attr = name.partition(":")
    attr = attr or "parallel_env"
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = (getattr(e, "name", None) or module_name).partition(".")[0]
        install = _INSTALL.get(missing, f"pip install {missing}")
        raise ValueError(
            f"env.name={name!r} (env.backend=pettingzoo): cannot import {module_name!r} ({e}); "
            f"install it ({install}) where this process runs"
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        hint = "name a module with parallel_env() or module:function"
        if attr == "parallel_env" and callable(getattr(module, "env", None)):
            hint = (
                "it looks like an AEC (turn-by-turn) env: seedlike steps PettingZoo's parallel "
                "API. If its agents act in cycles, convert it in a module of yours, def "
                "parallel_env(**kwargs): return pettingzoo.utils.conversions.aec_to_parallel("
                f"{module_name}.env(**kwargs)), and name that module; turn-based board games "
                "run as envpool tasks instead (ConnectFour-v1, ...)"
            )
        raise ValueError(
            f"env.name={name!r} (env.backend=pettingzoo): {module_name} has no function "
            f"{attr!r}; {hint}"
        )
    return factory


def check_env(env_config) -> None:
    """The backend contract (seedlike/envs/__init__.py): ValueError unless env.name names a
    module with a parallel env factory (nothing is made)."""
    load_factory(env_config.name)


def takes_render_mode(name: str) -> bool:
    """Whether the env's factory accepts render_mode (PettingZoo's way to ask for frames)."""
    try:
        parameters = inspect.signature(load_factory(name)).parameters
    except (TypeError, ValueError):
        return True  # a builtin or C factory: let it say
    return "render_mode" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def make_env_spec(env_config) -> EnvSpec:
    """The EnvSpec of a PettingZoo env, read from one instance's spaces, or from the module's
    `seedlike_spaces(**kwargs) -> (possible_agents, observation_space, action_space)` where it
    has one: then the learner needs only the wrapper module, not the env's package (Neural MMO
    lives in a virtualenv of its own, seedlike/envs/nmmo_env.py)."""
    kwargs = dict(env_config.kwargs)
    agent_id = bool(env_config.agent_id)
    declared = _declared_spaces(env_config.name)
    if declared is not None:
        agents, obs_space, act_space = declared(**kwargs)
        return _spec(env_config.name, list(agents), obs_space, act_space, agent_id)
    env = load_factory(env_config.name)(**kwargs)
    try:
        return spec_of(env_config.name, env, agent_id)
    finally:
        env.close()


def _declared_spaces(name: str):
    if ":" in name:
        return None
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None  # load_factory says why
    return getattr(module, "seedlike_spaces", None)


def spec_of(name: str, env, agent_id: bool) -> EnvSpec:
    agents = list(env.possible_agents)
    if not agents:
        raise ValueError(f"{name}: possible_agents is empty")
    obs_space, act_space = env.observation_space(agents[0]), env.action_space(agents[0])
    for agent in agents[1:]:
        if env.observation_space(agent) != obs_space or env.action_space(agent) != act_space:
            raise ValueError(
                f"{name}: agents {agents[0]!r} and {agent!r} have different observation or action "
                "spaces; one shared policy needs them equal (pad them in a wrapper)"
            )
    return _spec(name, agents, obs_space, act_space, agent_id)


def _spec(name: str, agents: list, obs_space, act_space, agent_id: bool) -> EnvSpec:
    if not agents:
        raise ValueError(f"{name}: possible_agents is empty")
    # Every agent acts each step; a legal-action mask, if any, is one of its observations: one
    # array over every argument's choices, or (PettingZoo's and gymnasium's form for a
    # MultiDiscrete action) a tuple of one mask per argument, which rows carry side by side.
    import gymnasium

    if isinstance(obs_space, gymnasium.spaces.Dict) and isinstance(
        obs_space.spaces.get(ACTION_MASK), gymnasium.spaces.Tuple
    ):
        width = sum(int(np.prod(s.shape)) for s in obs_space[ACTION_MASK].spaces)
        flat = {**obs_space.spaces, ACTION_MASK: gymnasium.spaces.MultiBinary(width)}
        obs_space = gymnasium.spaces.Dict(flat)
    spec = spec_from_spaces(name, obs_space, act_space, len(agents), turn_based=False)
    if spec.continuous:
        raise ValueError(
            f"{name} has action space {act_space}; continuous actions are supported for "
            "single-agent envs (envpool, gymnasium), not yet for PettingZoo envs"
        )
    if ACTION_MASK in spec.observation:
        del spec.observation[ACTION_MASK]
        spec.extras[LEGAL_ACTION_MASK] = ArraySpec(np.bool_, (spec.logits_size,))
    if agent_id:
        spec.observation[AGENT_ID] = ArraySpec(np.float32, (len(agents),))
    return spec


class PettingZooAdapter:
    """Steps `env.num_envs` PettingZoo parallel envs and reports their agents' rows."""

    def __init__(self, env_config, spec: EnvSpec, seed: int):
        self.spec = spec
        self.num_envs = int(env_config.num_envs)
        factory = load_factory(env_config.name)
        kwargs = dict(env_config.kwargs)
        self._envs = [factory(**kwargs) for _ in range(self.num_envs)]
        self._seed = int(seed)
        agents = list(self._envs[0].possible_agents)
        if len(agents) != spec.num_players:
            raise ValueError(
                f"{spec.name} has {len(agents)} agents here and {spec.num_players} in the spec"
            )
        self._index = {agent: p for p, agent in enumerate(agents)}
        self._agent_id = AGENT_ID in spec.observation
        self._mask = LEGAL_ACTION_MASK in spec.extras
        self._keys = [k for k in spec.observation if k != AGENT_ID]
        import gymnasium

        space = self._envs[0].observation_space(agents[0])
        self._dict_obs = isinstance(space, gymnasium.spaces.Dict)
        self._last: list[tuple] = [None] * self.num_envs  # per env: what its last step returned
        self._ended: list[tuple[int, dict]] = []  # (player id, numeric infos) of ended episodes
        self._resets = 0

    def reset(self) -> None:
        for e in range(self.num_envs):
            self._reset(e)

    def _reset(self, e: int) -> None:
        obs, _ = self._envs[e].reset(seed=self._seed + 7919 * self._resets + e)
        self._resets += 1
        self._last[e] = (obs, {}, {}, {}, {})

    def recv(self) -> Rows:
        env_id, player_id, reward, terminated, truncated, obs_list = [], [], [], [], [], []
        for e, (obs, rewards, terms, truncs, infos) in enumerate(self._last):
            names = list(obs)
            for a in names:
                if terms.get(a, False) or truncs.get(a, False):  # only ended agents' infos
                    numbers = _numbers(infos.get(a, {}))
                    if numbers:
                        self._ended.append((self._index[a], numbers))
            env_id.extend([e] * len(names))
            player_id.extend(self._index[a] for a in names)
            reward.extend(rewards.get(a, 0.0) for a in names)
            terminated.extend(terms.get(a, False) for a in names)
            truncated.extend(truncs.get(a, False) for a in names)
            obs_list.extend(obs[a] for a in names)
        env_id, player_id = np.asarray(env_id, np.int32), np.asarray(player_id, np.int32)
        terminated, truncated = np.asarray(terminated, np.bool_), np.asarray(truncated, np.bool_)
        reward = np.asarray(reward, np.float32)
        done = terminated | truncated
        obs, extras = self._stack(obs_list, player_id)
        return Rows(
            obs=obs,
            extras=extras,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            env_id=env_id,
            player_id=player_id,
            acting=~done,
            game_over=done,
        )

    def _stack(self, obs_list: list, player_id: np.ndarray) -> tuple[dict, dict]:
        spec = self.spec.observation
        if self._dict_obs:
            obs = {k: np.asarray([o[k] for o in obs_list], spec[k].dtype) for k in self._keys}
        else:
            obs = {"obs": np.asarray(obs_list, spec["obs"].dtype)}
        if self._agent_id:
            one_hot = np.zeros((player_id.shape[0], self.spec.num_players), np.float32)
            one_hot[np.arange(player_id.shape[0]), player_id] = 1.0
            obs[AGENT_ID] = one_hot
        extras = {}
        if self._mask:
            masks = [o[ACTION_MASK] for o in obs_list]
            if masks and isinstance(masks[0], tuple):
                masks = [np.concatenate(m) for m in masks]
            extras[LEGAL_ACTION_MASK] = np.asarray(masks, np.bool_)
        return obs, extras

    def send(self, action: np.ndarray, rows: Rows) -> None:
        """Steps every env with its acting rows' actions; envs whose agents are all done reset."""
        names = self._envs[0].possible_agents
        per_env: list[dict] = [{} for _ in range(self.num_envs)]
        acting = action[rows.acting]
        if self.spec.action_heads:  # MultiDiscrete: each action's arguments (EnvSpec)
            acting = np.stack(np.unravel_index(acting, self.spec.action_heads), axis=-1)
        for e, p, a in zip(rows.env_id[rows.acting], rows.player_id[rows.acting],
                           acting):  # fmt: skip
            per_env[e][names[p]] = a if self.spec.action_heads else int(a)
        for e, env in enumerate(self._envs):
            if not env.agents:  # every agent was done in the last step
                self._reset(e)
                continue
            self._last[e] = env.step(per_env[e])

    def episode_infos(self) -> list[tuple[int, dict]]:
        """(player id, {key: number}) for each agent episode that ended since the last call: the
        numbers in the env's info of the agent's last step (one level of nesting flattened to
        "key/sub", e.g. Neural MMO's lifetime and achievements/...)."""
        ended, self._ended = self._ended, []
        return ended

    def render(self) -> np.ndarray:
        return np.asarray(self._envs[0].render())

    def close(self) -> None:
        for env in self._envs:
            env.close()


def _numbers(info: dict) -> dict:
    out = {}
    for key, value in info.items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        for sub, v in items:
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                out[f"{key}/{sub}" if sub else key] = float(v)
    return out


Adapter = PettingZooAdapter  # the backend contract's name for it (seedlike/envs/__init__.py)
