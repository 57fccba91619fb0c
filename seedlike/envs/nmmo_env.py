"""Neural MMO 2.1.1 (`nmmo`) as a PettingZoo parallel env with flat spaces: an entity set, the
agent's own row, a tile grid and a factorized move-and-attack action with legal masks.

    env.backend = "pettingzoo", env.name = "seedlike.envs.nmmo_env", env.kwargs: see parallel_env

nmmo needs its own virtualenv (scripts/nmmo_venv.sh). This module imports only numpy, gymnasium
and pettingzoo; nmmo is imported when an env is built, and `seedlike_spaces(**kwargs)` gives the
agents and spaces without it (for a learner that has no nmmo).

Agents: "agent_1" ... "agent_N" (N = num_agents; the number is nmmo's agent id). All spawn at
tick 0 on the edge of the map; an agent that dies is terminated in that step (reward -1) and leaves
the observation dict afterwards; at the horizon the survivors are truncated. Random agents starve
within about 30 ticks unless they walk onto food and water.

Observation (gymnasium Dict), E = 100 entity slots, F = 31 attributes:
    "entities"     float32 [E, F]  nmmo's Entity rows, raw values, columns ENTITY_ATTRIBUTES
                                   (0 "id": > 0 a player, < 0 an NPC; 1 "npc_type": 0 player,
                                   1 passive, 2 neutral, 3 aggressive; 2-3 "row", "col" the
                                   position relative to the agent (so the agent's own row has
                                   0, 0); then health, food, water, skills ...). These are
                                   the entities within 7 tiles (the agent itself included), in
                                   nmmo's storage order, not by distance. Unused rows are all zero
                                   and a real row never is (its id is nonzero), so
                                   present = any(row != 0); present rows come first.
    "self"         float32 [F]     the agent's own Entity row, absolute map position (zeros in its
                                   terminal observation).
    "tiles"        float32 [15, 15, 16]  the visible 15 x 15 window around the agent, [i, j] =
                                   map tile (row - 7 + i, col - 7 + j), the tile's material one-hot
                                   over nmmo's 16 materials (MATERIALS; 0 void ... 15 fish). nmmo's
                                   row and col columns are dropped: the grid position is the tile's
                                   offset from the agent, whose map position is in "self".
    "action_mask"  bool [5 + 3 + E + 1]  the legal values of each action head, in head order:
                                   nmmo's ActionTargets masks Move.Direction, Attack.Style,
                                   Attack.Target, concatenated; the no-target value is always legal
                                   (nmmo forbids it whenever some target is in reach, which would
                                   force attacks).

Action: MultiDiscrete([5, 3, E + 1]) = (Move.Direction, Attack.Style, Attack.Target).
    Direction: MOVE_DIRECTIONS (north, south, east, west, stay); north is row - 1.
    Style: ATTACK_STYLES (melee, range, mage), all legal (reach 3 each by default).
    Target: j < E attacks the entity in row j of this agent's last `entities` (nmmo resolves
    target j to its j-th visible entity of the same observation); j = E (NO_TARGET) does not
    attack. Illegal values are no-ops in nmmo (the move or attack is dropped).
Dropped: nmmo's Use, Give, Destroy, Sell, Buy, GiveGold and Comm actions (items, market,
communication: one shared policy would need pointer heads into inventory and market lists) and the
Inventory, Market, Communication, Task and CurrentTick observations. The systems still run
(agents harvest items, NPCs drop loot); the agents just cannot act on them.

Reward (nmmo's default game): each agent has one task, TickGE (survive until the horizon); its
reward is the progress made, 1 / horizon per tick alive, so a survivor's return is 1; the step in
which an agent dies gives -1 instead. There are no achievements in nmmo 2.1.1; its event log
(eating, drinking, hits, kills, harvests, level-ups, ...) is what it records of an agent's life.

Infos: every agent's info holds nmmo's "task" info ({task name: {reward, progress, completed}}).
In the step that ends an agent's episode (terminated or truncated) it also holds
    "lifetime"      ticks from the episode's start to the end of its episode, and
    "achievements"  {event name: count} from nmmo's event log for that agent (EVENTS; kills split
                    into "player_kill" and "npc_kill").
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import weakref

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

# nmmo 2.1.1's constants (tests/envs/test_nmmo_env.py checks them against nmmo itself).
ENTITY_ATTRIBUTES = (
    "id", "npc_type", "row", "col", "damage", "time_alive", "freeze", "item_level",
    "attacker_id", "latest_combat_tick", "message", "gold", "health", "food", "water",
    "melee_level", "melee_exp", "range_level", "range_exp", "mage_level", "mage_exp",
    "fishing_level", "fishing_exp", "herbalism_level", "herbalism_exp", "prospecting_level",
    "prospecting_exp", "carving_level", "carving_exp", "alchemy_level", "alchemy_exp",
)  # fmt: skip
# Index = nmmo's material_id (nmmo.lib.material).
MATERIALS = (
    "void", "water", "grass", "scrub", "foilage", "stone", "slag", "ore", "stump", "tree",
    "fragment", "crystal", "weeds", "herb", "ocean", "fish",
)  # fmt: skip
MOVE_DIRECTIONS = ("north", "south", "east", "west", "stay")
ATTACK_STYLES = ("melee", "range", "mage")
# nmmo.lib.event_code.EventCode
EVENTS = {
    "eat_food": 1, "drink_water": 2, "go_farthest": 3, "seize_tile": 4, "score_hit": 11,
    "player_kill": 12, "fire_ammo": 13, "consume_item": 21, "give_item": 22, "destroy_item": 23,
    "harvest_item": 24, "equip_item": 25, "loot_item": 26, "give_gold": 31, "list_item": 32,
    "earn_gold": 33, "buy_item": 34, "loot_gold": 35, "level_up": 41, "agent_culled": 91,
}  # fmt: skip
NUM_ENTITIES = 100  # PLAYER_N_OBS
NUM_ATTRIBUTES = len(ENTITY_ATTRIBUTES)
VISION = 15  # PLAYER_VISION_DIAMETER
NO_TARGET = NUM_ENTITIES  # the last Attack.Target value: no attack
ACTION_HEADS = (len(MOVE_DIRECTIONS), len(ATTACK_STYLES), NUM_ENTITIES + 1)
MAP_BORDER = 16  # void tiles around the playable square (as nmmo's presets have)
INT16 = (-(2**15), 2**15 - 1)  # nmmo stores every attribute as int16


def _check(
    num_agents: int, map_size: int, horizon: int, num_npcs: int | None, num_maps: int
) -> dict:
    num_npcs = num_agents if num_npcs is None else num_npcs
    if not 16 <= map_size <= 1024:  # nmmo's terrain generator fails below 16
        raise ValueError(f"nmmo_env: map_size={map_size}; give 16 to 1024")
    if not 1 <= num_agents <= 4 * map_size - 4:
        raise ValueError(
            f"nmmo_env: num_agents={num_agents}; agents spawn on the map's edge, so give 1 to "
            f"{4 * map_size - 4} for map_size={map_size}"
        )
    if not 1 <= horizon < INT16[1]:
        raise ValueError(f"nmmo_env: horizon={horizon}; give 1 to {INT16[1] - 1}")
    if num_npcs < 0:
        raise ValueError(f"nmmo_env: num_npcs={num_npcs} is negative")
    if num_maps < 1:
        raise ValueError(f"nmmo_env: num_maps={num_maps}; give at least 1")
    return {
        "num_agents": int(num_agents),
        "map_size": int(map_size),
        "horizon": int(horizon),
        "num_npcs": int(num_npcs),
        "num_maps": int(num_maps),
    }


def seedlike_spaces(
    num_agents: int = 128,
    map_size: int = 128,
    horizon: int = 1024,
    num_npcs: int | None = None,
    num_maps: int = 1,
) -> tuple[list[str], gymnasium.spaces.Dict, gymnasium.spaces.MultiDiscrete]:
    """(possible_agents, observation_space, action_space) of parallel_env(same kwargs), without
    nmmo."""
    num_agents = _check(num_agents, map_size, horizon, num_npcs, num_maps)["num_agents"]
    agents = [f"agent_{i}" for i in range(1, num_agents + 1)]
    box = gymnasium.spaces.Box
    observation_space = gymnasium.spaces.Dict(
        {
            "entities": box(*INT16, (NUM_ENTITIES, NUM_ATTRIBUTES), np.float32),
            "self": box(*INT16, (NUM_ATTRIBUTES,), np.float32),
            "tiles": box(0.0, 1.0, (VISION, VISION, len(MATERIALS)), np.float32),
            "action_mask": box(0, 1, (sum(ACTION_HEADS),), np.bool_),
        }
    )
    return agents, observation_space, gymnasium.spaces.MultiDiscrete(ACTION_HEADS)


class NmmoEnv(ParallelEnv):
    """nmmo.Env with the flat observations and factorized action of the module docstring."""

    metadata = {"name": "nmmo_v0", "render_modes": []}

    def __init__(
        self,
        num_agents: int = 128,
        map_size: int = 128,
        horizon: int = 1024,
        num_npcs: int | None = None,
        num_maps: int = 1,
    ):
        try:
            import nmmo
            from nmmo.lib.event_log import EventAttr, EventState
        except ImportError as e:
            raise ValueError(
                f"Neural MMO needs nmmo, which {sys.executable} cannot import ({e}): build its "
                "virtualenv with scripts/nmmo_venv.sh and run the actors there, "
                "scripts/train.sh --actor_python=.nmmo-venv/bin/python (docs/entities.md, "
                "'Neural MMO')"
            ) from None

        kwargs = _check(num_agents, map_size, horizon, num_npcs, num_maps)
        self.possible_agents, self._obs_space, self._act_space = seedlike_spaces(**kwargs)
        self._names = {i: name for i, name in enumerate(self.possible_agents, 1)}
        self._ids = {name: i for i, name in self._names.items()}
        # nmmo writes its generated maps under PATH_MAPS (relative to the working directory by
        # default) and reads them back at every reset: give each env a directory of its own.
        self._maps = tempfile.mkdtemp(prefix="seedlike-nmmo-maps-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._maps, ignore_errors=True)
        config = nmmo.config.Default()  # nmmo's Medium preset with every game system
        area = (kwargs["map_size"] / 128) ** 2  # resource clusters scale with the map's area
        for key, value in {
            "PLAYER_N": kwargs["num_agents"],
            "NPC_N": kwargs["num_npcs"],
            "HORIZON": kwargs["horizon"],
            "MAP_CENTER": kwargs["map_size"],
            "MAP_SIZE": kwargs["map_size"] + 2 * MAP_BORDER,
            "PROGRESSION_SPAWN_CLUSTERS": max(1, round(64 * area)),
            "PROGRESSION_SPAWN_UNIFORMS": max(1, round(256 * area)),
            "MAP_N": kwargs["num_maps"],
            "PATH_MAPS": self._maps,
        }.items():
            config.set(key, value)
        self._env = nmmo.Env(config)
        self._event_table = EventState.Query.table
        self._event_cols = (EventAttr["ent_id"], EventAttr["event"], EventAttr["target_ent"])
        self._one_hot = np.eye(len(MATERIALS), dtype=np.float32)
        self._empty = {
            "entities": np.zeros((NUM_ENTITIES, NUM_ATTRIBUTES), np.float32),
            "self": np.zeros(NUM_ATTRIBUTES, np.float32),
            "tiles": np.zeros((VISION, VISION, len(MATERIALS)), np.float32),
            "action_mask": np.zeros(sum(ACTION_HEADS), np.bool_),
        }
        # A terminal observation's mask: stay, any style, no target (as nmmo's).
        directions, styles, _ = ACTION_HEADS
        self._empty["action_mask"][directions - 1 : directions + styles] = True
        self._empty["action_mask"][-1] = True

    @property
    def agents(self) -> list[str]:
        return [self._names[i] for i in self._env.agents or []]

    @property
    def nmmo_env(self):
        """The wrapped nmmo.Env."""
        return self._env

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def reset(self, seed=None, options=None):
        obs, infos = self._env.reset(seed=seed, options=options)
        return (
            {self._names[i]: self._observe(i, o) for i, o in obs.items()},
            {self._names[i]: infos.get(i, {}) for i in obs},
        )

    def step(self, actions):
        commands = {}
        for name, action in actions.items():
            direction, style, target = (int(x) for x in np.asarray(action).reshape(3))
            command = {"Move": {"Direction": direction}}
            if 0 <= target < NO_TARGET:
                command["Attack"] = {"Style": style, "Target": target}
            commands[self._ids[name]] = command
        obs, rewards, terms, truncs, infos = self._env.step(commands)
        names = self._names
        done = [i for i in obs if terms.get(i, False) or truncs.get(i, False)]
        infos = {names[i]: dict(infos.get(i, {})) for i in obs}
        if done:
            tick = int(self._env.realm.tick)
            for i, counts in zip(done, self._achievements(done)):
                infos[names[i]].update(lifetime=tick, achievements=counts)
        return (
            {names[i]: self._observe(i, o) for i, o in obs.items()},
            {names[i]: float(rewards.get(i, 0.0)) for i in obs},
            {names[i]: bool(terms.get(i, False)) for i in obs},
            {names[i]: bool(truncs.get(i, False)) for i in obs},
            infos,
        )

    def _observe(self, agent_id: int, obs: dict) -> dict:
        entity = obs["Entity"]
        own = np.flatnonzero(entity[:, 0] == agent_id)
        if own.size == 0:  # a dead agent's (terminal) observation: nmmo's zeros
            return {k: v.copy() for k, v in self._empty.items()}
        entities = entity.astype(np.float32)
        targets = obs["ActionTargets"]
        mask = np.concatenate(
            [
                targets["Move"]["Direction"],
                targets["Attack"]["Style"],
                targets["Attack"]["Target"],
            ]
        ).astype(np.bool_)
        mask[-1] = True  # not attacking is always possible
        me = entities[own[0]].copy()
        # Positions relative to the agent: what an attack's reach and a chase depend on.
        entities[entity[:, 0] != 0, 2:4] -= me[2:4]
        return {
            "entities": entities,
            "self": me,
            "tiles": self._one_hot[obs["Tile"][:, 2]].reshape(VISION, VISION, len(MATERIALS)),
            "action_mask": mask,
        }

    def _achievements(self, agent_ids: list[int]) -> list[dict[str, int]]:
        ent, event, target = self._event_cols
        table = self._event_table(self._env.realm.datastore)
        result = []
        for agent_id in agent_ids:
            rows = table[table[:, ent] == agent_id]
            codes = rows[:, event]
            counts = {name: int(np.count_nonzero(codes == code)) for name, code in EVENTS.items()}
            kills = codes == EVENTS["player_kill"]
            counts["npc_kill"] = int(np.count_nonzero(kills & (rows[:, target] < 0)))
            counts["player_kill"] -= counts["npc_kill"]
            result.append(counts)
        return result

    def render(self):
        return None

    def close(self):
        self._env.close()
        self._cleanup()


def parallel_env(
    num_agents: int = 128,
    map_size: int = 128,
    horizon: int = 1024,
    num_npcs: int | None = None,
    num_maps: int = 1,
) -> NmmoEnv:
    """Neural MMO with `num_agents` agents (nmmo's PLAYER_N), on a `map_size` x `map_size` playable
    square (nmmo's MAP_CENTER; a void border of 16 tiles surrounds it), for at most `horizon`
    ticks, with `num_npcs` NPCs (default: as many as agents), each episode on one of `num_maps`
    terrains (nmmo's MAP_N; a terrain depends only on its index, so every env has the same ones;
    reset(seed) places the resources and spawn points). The defaults are nmmo's default config
    (Medium preset), whose other settings stay."""
    return NmmoEnv(num_agents, map_size, horizon, num_npcs, num_maps)
