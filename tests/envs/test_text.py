"""Tasks given as text: missions as word ids over the wire and the text encoder that reads them."""

import dataclasses

import envpool
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from envpool.minigrid import decode_mission

import surgery
from networks import make_network
from networks.text import TextEncoder
from seedlike.config import ConfigError, base_config, env_spec, section
from seedlike.envs import make_env, make_env_spec
from seedlike.envs.text import PAD, UNKNOWN, VOCAB, tokenize
from seedlike.types import ArraySpec
from surgery.plan import Context, layout_of
from tests.helpers import assert_exact, check, random_params


def test_tokenize_by_hand():
    ids = tokenize("go to the red ball", 7)
    assert ids.dtype == np.int32
    want = [VOCAB["go"], VOCAB["to"], VOCAB["the"], VOCAB["red"], VOCAB["ball"], PAD, PAD]
    np.testing.assert_array_equal(ids, want)
    assert len(set(want[:5])) == 5 and min(want[:5]) > UNKNOWN
    np.testing.assert_array_equal(
        tokenize("Pick up a key, then open the door", 9)[3:6],
        [VOCAB["key"], VOCAB[","], VOCAB["then"]],
    )
    assert tokenize("go to the mauve ball", 5)[3] == UNKNOWN
    with pytest.raises(ValueError, match="has 5 words; env.mission_tokens=4 is too short"):
        tokenize("go to the red ball", 4)


def babyai(**kwargs):
    return section(
        "env", **{"name": "BabyAI-GoToLocal-v0", "num_envs": 6, "obs_keys": ("image", "mission"),
                  "mission_tokens": 8, **kwargs}
    )  # fmt: skip


def test_rows_carry_the_missions_that_envpool_gives_as_word_ids():
    """The same seed with and without tokens: each row's ids spell envpool's own decoded mission,
    across episodes (new missions); blank_mission sends only padding."""
    config = babyai()
    spec = make_env_spec(config)
    assert str(spec.observation["mission"]) == "int32[8]"
    env = make_env(config, spec, seed=3)
    raw = envpool.make("BabyAI-GoToLocal-v0", env_type="gymnasium", num_envs=6, seed=3)
    blank = make_env(babyai(blank_mission=True), spec, seed=3)
    env.reset(), blank.reset()
    raw.async_reset()
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(200):
        rows, b = env.recv(), blank.recv()
        obs, *_, info = raw.recv()
        for i, e in enumerate(info["env_id"]):
            text = decode_mission(obs["mission"][i])
            seen.add(text)
            np.testing.assert_array_equal(
                rows.obs["mission"][rows.env_id == e][0], tokenize(text, 8)
            )
        assert not b.obs["mission"].any()
        actions = rng.integers(0, 7, 6).astype(np.int32)
        env.send(actions, rows)
        blank.send(actions, b)
        raw.send(actions, info["env_id"])
    assert len(seen) >= 10


def test_missions_need_a_mission_observation():
    c = base_config()
    c.env.update(babyai(name="CartPole-v1", obs_keys=()))
    with pytest.raises(ConfigError, match="env.mission_tokens=8: CartPole-v1 has no observation"):
        env_spec(c)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_text_encoder_reads_words_in_order_and_ignores_padding():
    enc = TextEncoder(vocab_size=10, features=6)
    tokens = jnp.array([[3, 4, 5, 0, 0], [5, 4, 3, 0, 0], [3, 4, 6, 0, 0]], jnp.int32)
    params = enc.init(jax.random.key(0), tokens)
    out = enc.apply(params, tokens)
    longer = enc.apply(params, jnp.pad(tokens, ((0, 0), (0, 4))))
    np.testing.assert_allclose(out, longer, atol=1e-6)  # padding leaves the state as it is
    assert np.abs(out[0] - out[1]).max() > 1e-3  # word order matters
    assert np.abs(out[0] - out[2]).max() > 1e-3  # and every word
    # The GRU by hand: the same cell stepped over the three words.
    x = params["params"]["embed"]["embedding"][tokens[0, :3]]
    h = jnp.zeros((1, 6))
    for t in range(3):
        h, _ = nn.GRUCell(6).apply({"params": params["params"]["gru"]}, h, x[None, t])
    np.testing.assert_allclose(out[0], h[0], atol=1e-6)


def text_network(spec=None, **overrides):
    c = base_config().network
    settings = dict(torso="small_cnn", image_key="image", text_key="mission", text_size=8,
                    core="none", normalize_obs=False)  # fmt: skip
    c.update({**settings, **overrides})
    return make_network(c, spec or make_env_spec(babyai()))


def test_the_policy_depends_on_the_mission_and_gradients_reach_only_the_words_used():
    net = text_network()
    params = jax.jit(net.init)(jax.random.key(1))
    image = np.random.default_rng(0).integers(0, 10, (2, 7, 7, 3)).astype(np.uint8)
    red = tokenize("go to the red ball", 8)
    blue = tokenize("go to the blue ball", 8)
    apply = jax.jit(net.apply)
    logits, _ = apply(params, {}, {"image": image, "mission": np.stack([red, red])})
    other, _ = apply(params, {}, {"image": image, "mission": np.stack([red, blue])})
    np.testing.assert_allclose(logits[0], other[0], atol=1e-6)
    assert np.abs(logits[1] - other[1]).max() > 1e-6

    def total(p):
        lo, v = net.apply(p, {}, {"image": image, "mission": np.stack([red, red])})
        return jnp.sum(lo**2) + jnp.sum(v)

    grad = jax.jit(jax.grad(total))(params)["params"]["text_encoder"]["embed"]["embedding"]
    used = np.abs(np.asarray(grad)).sum(-1) > 0
    assert set(np.flatnonzero(used)) == {VOCAB[w] for w in ("go", "to", "the", "red", "ball")}


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_surgery_widens_a_text_network_and_refuses_to_move_its_words():
    old, new = text_network(), text_network(cnn_hidden=160)
    params = random_params(old, 2)
    # The graph names every layer, the text encoder's GRU too (refused: the words stay as read).
    graph = old.layer_graph()
    assert set(graph.layers()) == {p.removeprefix("params/") for p in surgery.layer_paths(params)}
    assert "text encoder" in graph.spaces["text_encoder/gru/hz"].refused
    plan = surgery.derive_plan(old, new)
    result = plan.apply(params, 3, Context(layout_of(old)))
    assert_exact(check(old, new, params, {}, result))
    with pytest.raises(surgery.PlanError, match="network.text_size changes from 8 to 16"):
        surgery.derive_plan(old, text_network(text_size=16))
    # A new observation's rows go before the words' features in dense_0 (the layer graph says
    # which rows follow the observations).
    spec = make_env_spec(babyai())
    more = dataclasses.replace(
        spec, observation={**spec.observation, "extra": ArraySpec(np.float32, (3,))}
    )
    grown = text_network(more)
    plan = surgery.derive_plan(old, grown)
    assert [op.kind for op in plan.ops] == ["add_observations"]
    result = plan.apply(params, 3, Context(layout_of(old)))
    assert_exact(check(old, grown, params, {}, result))
