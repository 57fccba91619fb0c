"""OpenAI Five's cross-agent max-pool: teammates' observations in every row (env.teammates) and the
pooled network (network.team_pool), checked against the plain network and a pool by hand."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import surgery
from networks import make_network
from networks.actor_critic import ActorCritic
from seedlike.config import ConfigError, base_config, env_spec, section, validate
from seedlike.envs import make_env, make_env_spec
from seedlike.envs.teammates import mates_table, with_teammates
from seedlike.types import TEAMMATES_PRESENT, ArraySpec, EnvSpec
from surgery.plan import Context, layout_of
from tests.helpers import assert_exact, check, random_obs_norm, random_params

F32 = np.float32


def test_mates_table_by_hand():
    np.testing.assert_array_equal(
        mates_table(6, 3), [[1, 2], [0, 2], [0, 1], [4, 5], [3, 5], [3, 4]]
    )
    np.testing.assert_array_equal(mates_table(2, 2), [[1], [0]])
    for players, k in ((6, 4), (4, 1)):
        with pytest.raises(ValueError, match=f"env.teammates={k}: .* teams of {k} consecutive"):
            mates_table(players, k)


def coins_env(num_envs=3, teammates=4, **kwargs):
    return section(
        "env", backend="pettingzoo", name="seedlike.envs.coins", num_envs=num_envs,
        kwargs={"size": 3, "max_steps": 24, **kwargs}, agent_id=True, teammates=teammates,
    )  # fmt: skip


def test_rows_carry_their_teammates_observations_of_the_same_step():
    """The same seed with and without env.teammates: every row's slot j holds the row of its
    j-th teammate in that step (present) or zeros (absent: dead, not yet born, game over)."""
    with_mates, plain = coins_env(), coins_env(teammates=0)
    spec = make_env_spec(with_mates)
    assert str(spec.observation["teammates/obs"]) == "float32[3, 5, 5, 4]"
    assert str(spec.observation["teammates/agent_id"]) == "float32[3, 8]"
    assert str(spec.observation[TEAMMATES_PRESENT]) == "bool[3]"
    a, b = make_env(with_mates, spec, 5), make_env(plain, make_env_spec(plain), 5)
    a.reset()
    b.reset()
    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0}
    for _ in range(120):
        rows, ref = a.recv(), b.recv()
        for key in ("obs", "agent_id"):
            np.testing.assert_array_equal(rows.obs[key], ref.obs[key])
        where = {(e, p): i for i, (e, p) in enumerate(zip(ref.env_id, ref.player_id))}
        for i, (e, p) in enumerate(zip(ref.env_id, ref.player_id)):
            team = range(4 * (p // 4), 4 * (p // 4) + 4)
            for j, q in enumerate(q for q in team if q != p):
                src = where.get((e, q))
                assert rows.obs[TEAMMATES_PRESENT][i, j] == (src is not None)
                seen[src is not None] += 1
                for key in ("obs", "agent_id"):
                    want = ref.obs[key][src] if src is not None else 0.0
                    np.testing.assert_array_equal(rows.obs["teammates/" + key][i, j], want)
        actions = rng.integers(0, 5, ref.reward.shape[0])
        a.send(actions, rows)
        b.send(actions, ref)
    assert seen[True] > 500 and seen[False] > 500


SPEC = EnvSpec("Team-v0", {"obs": ArraySpec(F32, (5,)), "id": ArraySpec(F32, (3,))}, 4, 6)
IMAGE_SPEC = EnvSpec("TeamImage-v0", {"obs": ArraySpec(np.uint8, (6, 6, 2))}, 4, 6)


def team_net(spec, pool, **overrides):
    c = base_config().network
    c.team_pool = 0.0 if pool is None else pool  # None: no teammates in the spec either
    for key, value in overrides.items():
        c[key] = value
    return make_network(c, with_teammates(spec, 3) if pool is not None else spec)


def team_obs(spec, n, seed):
    gen = np.random.default_rng(seed)
    obs = {}
    for key, s in spec.observation.items():
        shape = (n, 3, *s.shape)  # the agent and two teammates
        if s.dtype == np.uint8:
            obs[key] = gen.integers(0, 256, shape).astype(np.uint8)
        else:
            obs[key] = gen.standard_normal(shape).astype(F32)
    present = gen.random((n, 2)) < 0.6
    return obs, present


def split(obs, present, slot_of_self=0):
    own = {k: v[:, 0] for k, v in obs.items()}
    mates = {"teammates/" + k: v[:, 1:] for k, v in obs.items()}
    return {**own, **mates, TEAMMATES_PRESENT: present}


ARCHS = [
    (SPEC, dict(hidden_sizes=(8, 6))),  # separate policy and value torsos
    (SPEC, dict(hidden_sizes=(8, 6), shared_torso=True, activation="relu")),
    (SPEC, dict(hidden_sizes=(8, 6), core="lstm", core_size=5)),
    (IMAGE_SPEC, dict(torso="small_cnn", cnn_channels=(4, 4, 4), cnn_hidden=10)),
]


@pytest.mark.parametrize("spec, arch", ARCHS)
@pytest.mark.parametrize("share", [0.5, 1.0])
def test_pooled_network_is_the_plain_torso_pooled_by_hand(spec, arch, share):
    """Logits and values of the pooled network equal the plain network's torso on each agent,
    max-pooled by hand over the present ones (observation statistics: the agent's own), then the
    pooled network's heads."""
    pooled, plain = team_net(spec, share, **arch), team_net(spec, None, **arch)
    assert pooled.init_obs_norm().keys() == plain.init_obs_norm().keys()
    params = random_params(pooled, 1)
    obs_norm = random_obs_norm(pooled, 1)
    obs, present = team_obs(spec, 16, 2)
    torso = {k: v for k, v in params["params"].items() if "torso" in k}
    per_agent = [
        plain.module.apply(
            {"params": torso},
            plain._inputs(obs_norm, {k: v[:, a] for k, v in obs.items()}, 1),
            method=ActorCritic.encode,
        )
        for a in range(3)
    ]
    alive = np.concatenate([np.ones((16, 1), bool), present], 1)
    features = []
    for which in (0, 1):  # policy, value features
        h = np.stack([np.asarray(p[which]) for p in per_agent], 1)  # [N, 3, F]
        s = max(1, round(share * h.shape[-1]))
        pool = np.stack([h[i, alive[i], :s].max(0) for i in range(16)])
        features.append(np.concatenate([h[:, 0], pool], -1))
    inputs = split(obs, present)
    if pooled.is_recurrent:
        carry = pooled.initial_carry(16)
        first = np.ones(16, bool)
        logits, value, _ = pooled.step(params, obs_norm, inputs, {}, carry, first)
        x = features[0]
        carry, x = pooled.module.apply(params, carry, jnp.asarray(x), first, method="core_step")
        features = [x, x]
    else:
        logits, value = pooled.apply(params, obs_norm, inputs)
    want_logits, want_value = pooled.module.apply(params, *features, method=ActorCritic.outputs)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-5)


def test_absent_teammates_change_nothing_and_get_no_gradient():
    net = team_net(SPEC, 0.5, hidden_sizes=(8, 6))
    params = random_params(net, 3)
    obs, present = team_obs(SPEC, 32, 4)
    inputs = split(obs, present)

    @jax.jit  # one compilation, not one per op
    def total(mate_obs):
        logits, value = net.apply(params, {}, {**inputs, "teammates/obs": mate_obs})
        return jnp.sum(logits) + jnp.sum(value)

    noise = np.random.default_rng(5).standard_normal(obs["obs"][:, 1:].shape).astype(F32)
    moved = np.where(present[..., None], inputs["teammates/obs"], noise)
    np.testing.assert_allclose(total(moved), total(inputs["teammates/obs"]), rtol=1e-6)
    grad = np.asarray(jax.grad(total)(inputs["teammates/obs"]))  # [N, 2, 5]
    assert np.all(grad[~present] == 0.0)
    assert np.abs(grad[present]).sum(-1).min() >= 0.0 and np.abs(grad[present]).max() > 1e-3
    # A present teammate only moves the pooled features when it holds a maximum there.
    assert (np.abs(grad[present]).sum(-1) > 0).mean() > 0.5


def test_pooling_needs_teammates_and_teams_must_match():
    with pytest.raises(ValueError, match="network.team_pool=0.5 .* needs env.teammates"):
        team_net(SPEC, None, team_pool=0.5)
    with pytest.raises(ValueError, match=r"pools a share in \(0, 1\]"):
        team_net(SPEC, 1.5)
    c = base_config()
    c.env.update(coins_env(teammates=3))
    c.teams.sizes = (4, 4)
    with pytest.raises(ConfigError, match=r"env.teammates=3 needs teams of 3 agents each"):
        validate(c)
    c.teams.sizes = ()
    with pytest.raises(ConfigError, match="8 agents do not form teams of 3 consecutive"):
        env_spec(c)


def test_surgery_on_a_pooled_network_widens_below_the_pool_and_refuses_to_move_it():
    old = team_net(SPEC, 0.5, hidden_sizes=(8, 6))
    new = team_net(SPEC, 0.5, hidden_sizes=(12, 6))
    params, obs_norm = random_params(old, 6), random_obs_norm(old, 6)
    plan = surgery.derive_plan(old, new)
    result = plan.apply(params, 3, Context(layout_of(old)))
    assert_exact(check(old, new, params, obs_norm, result))
    # A new observation feature reaches the torso of the agent and of each teammate.
    more = dataclasses.replace(SPEC, observation={**SPEC.observation, "obs": ArraySpec(F32, (7,))})
    grown = team_net(more, 0.5, hidden_sizes=(8, 6))
    plan = surgery.derive_plan(old, grown)
    assert [op.kind for op in plan.ops] == ["add_observations"]
    assert_exact(
        check(old, grown, params, obs_norm, plan.apply(params, 3, Context(layout_of(old))))
    )
    with pytest.raises(
        surgery.PlanError, match="widening params/policy_torso/dense_1 and .* would move the pooled"
    ):
        surgery.derive_plan(old, team_net(SPEC, 0.5, hidden_sizes=(8, 9)))
    with pytest.raises(surgery.PlanError, match="network.team_pool changes from 0.5 to 0.25"):
        surgery.derive_plan(old, team_net(SPEC, 0.25, hidden_sizes=(8, 6)))
