"""seedlike.envs.nmmo_env: Neural MMO's spaces without nmmo, its observations, masks and targets.

Needs nmmo, which lives in its own virtualenv: scripts/nmmo_venv.sh, then
.nmmo-venv/bin/python -m pytest tests/envs/test_nmmo_env.py (pytest installed there).
"""

import numpy as np
import pytest

nmmo = pytest.importorskip("nmmo", reason="nmmo is not installed here (scripts/nmmo_venv.sh)")

from seedlike.envs import nmmo_env  # noqa: E402

SMALL = dict(num_agents=16, map_size=32, horizon=64)


@pytest.fixture(scope="module")
def env():
    env = nmmo_env.parallel_env(**SMALL)
    yield env
    env.close()


def legal_sample(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    action, offset = [], 0
    for n in nmmo_env.ACTION_HEADS:
        action.append(rng.choice(np.flatnonzero(mask[offset : offset + n])))
        offset += n
    return np.asarray(action)


def test_constants_match_nmmo():
    from nmmo.core import action
    from nmmo.entity.entity import EntityState
    from nmmo.lib import material
    from nmmo.lib.event_code import EventCode

    columns = EntityState.State.attr_name_to_col
    assert tuple(sorted(columns, key=columns.get)) == nmmo_env.ENTITY_ATTRIBUTES
    names = {m.index: m.__name__.lower() for m in material.All.materials}
    assert tuple(names[i] for i in range(len(names))) == nmmo_env.MATERIALS
    assert tuple(d.__name__.lower() for d in action.Direction.edges) == nmmo_env.MOVE_DIRECTIONS
    assert tuple(s.__name__.lower() for s in action.Style.edges) == nmmo_env.ATTACK_STYLES
    assert {k.lower(): v for k, v in vars(EventCode).items() if k.isupper()} == nmmo_env.EVENTS
    config = nmmo.config.Default()
    assert config.PLAYER_N_OBS == nmmo_env.NUM_ENTITIES
    assert config.PLAYER_VISION_DIAMETER == nmmo_env.VISION
    assert config.MAP_SIZE - config.MAP_CENTER == 2 * nmmo_env.MAP_BORDER


@pytest.mark.parametrize("kwargs", [SMALL, {}])
def test_spaces_without_nmmo_equal_the_env(kwargs):
    agents, obs_space, act_space = nmmo_env.seedlike_spaces(**kwargs)
    env = nmmo_env.parallel_env(**kwargs)
    try:
        assert env.possible_agents == agents
        assert len(agents) == kwargs.get("num_agents", 128)
        for agent in (agents[0], agents[-1]):
            assert env.observation_space(agent) == obs_space
            assert env.action_space(agent) == act_space
        assert list(act_space.nvec) == [5, 3, nmmo_env.NUM_ENTITIES + 1]
    finally:
        env.close()


def test_observations(env):
    obs, _ = env.reset(seed=0)
    assert set(obs) == set(env.possible_agents) == set(env.agents)
    space = env.observation_space(env.possible_agents[0])
    for name, o in obs.items():
        assert space.contains(o), name
        agent_id = int(name.split("_")[1])
        nmmo_obs = env.nmmo_env.obs[agent_id]
        entities = o["entities"]
        assert entities.dtype == np.float32 and entities.shape == (100, 31)
        # present = any nonzero attribute = a nonzero id; present rows come first, as in nmmo
        present = np.any(entities != 0, axis=1)
        np.testing.assert_array_equal(present, entities[:, 0] != 0)
        assert present.sum() == min(nmmo_obs.entities.len, 100)
        assert not present[present.sum() :].any()
        assert o["self"].dtype == np.float32 and o["self"][0] == agent_id
        # the agent's own row, at relative position (0, 0); "self" has its map position
        own = entities[entities[:, 0] == agent_id]
        assert own.shape[0] == 1 and np.all(own[0, 2:4] == 0)
        np.testing.assert_array_equal(np.delete(own[0], [2, 3]), np.delete(o["self"], [2, 3]))
        # tiles: one-hot materials on the grid around the agent
        tiles = o["tiles"]
        assert tiles.shape == (15, 15, 16) and tiles.dtype == np.float32
        np.testing.assert_array_equal(tiles.sum(-1), 1.0)
        raw = nmmo_obs.tiles.reshape(15, 15, 3)
        np.testing.assert_array_equal(tiles.argmax(-1), raw[..., 2])
        row, col = o["self"][2], o["self"][3]
        assert (raw[7, 7, 0], raw[7, 7, 1]) == (row, col)
        assert (raw[0, 3, 0], raw[0, 3, 1]) == (row - 7, col - 4)
        mask = o["action_mask"]
        assert mask.dtype == np.bool_ and mask.shape == (109,)
        assert mask[4] and mask[5:8].all() and mask[-1]  # stay, every style, no target


def test_legal_actions_step_and_the_dead_leave(env):
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=1)
    space = env.observation_space(env.possible_agents[0])
    gone, ended = set(), 0
    for _ in range(SMALL["horizon"]):
        actions = {a: legal_sample(obs[a]["action_mask"], rng) for a in env.agents}
        assert set(actions) == set(obs) - gone
        obs, rewards, terms, truncs, infos = env.step(actions)
        assert not gone & set(obs)  # agents whose episode ended are not reported again
        for agent in obs:
            assert space.contains(obs[agent])
            assert set(rewards) == set(terms) == set(truncs) == set(infos) == set(obs)
            if terms[agent] or truncs[agent]:
                assert infos[agent]["lifetime"] == env.nmmo_env.realm.tick
                assert set(infos[agent]["achievements"]) >= {"eat_food", "score_hit", "npc_kill"}
                assert rewards[agent] == (-1.0 if terms[agent] else 1 / SMALL["horizon"])
                gone.add(agent)
                ended += 1
        if not env.agents:
            break
    assert not env.agents and ended == len(env.possible_agents)


def test_target_index_attacks_that_row(env):
    """Target j hits the entity in row j of the attacker's last `entities` (nmmo's event log)."""
    from nmmo.lib.event_log import EventAttr, EventState

    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=2)
    checked = []
    for _ in range(300):
        if not env.agents:
            obs, _ = env.reset()
        actions = {a: legal_sample(obs[a]["action_mask"], rng) for a in env.agents}
        for action in actions.values():
            action[2] = nmmo_env.NO_TARGET
        # one attacker, at the last row in its reach (other rows than 0 and 1 where possible)
        last = {a: np.flatnonzero(obs[a]["action_mask"][8:-1]).max(initial=-1) for a in obs}
        attacker = max(env.agents, key=last.get)
        row = int(last[attacker])
        if row >= 0:
            actions[attacker][2] = row
            target_id = int(obs[attacker]["entities"][row, 0])
        obs, *_ = env.step(actions)
        if row < 0:
            continue
        events = EventState.Query.table(env.nmmo_env.realm.datastore)
        hits = events[
            (events[:, EventAttr["event"]] == nmmo_env.EVENTS["score_hit"])
            & (events[:, EventAttr["ent_id"]] == int(attacker.split("_")[1]))
            & (events[:, EventAttr["tick"]] == env.nmmo_env.realm.tick)
        ]
        assert hits.shape[0] == 1
        assert hits[0, EventAttr["target_ent"]] == target_id
        # nmmo's skill ids: melee 1, range 2, mage 3
        assert hits[0, EventAttr["type"]] == actions[attacker][1] + 1
        checked.append(row)
        if len(checked) == 10:
            break
    assert len(checked) == 10, f"only {len(checked)} attacks checked"
    assert max(checked) >= 2, checked
