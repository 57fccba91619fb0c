"""The policy/value network used by the server (acting) and the learner (training).

`Network` bundles a Flax module with the observation preprocessing that happens outside it
(running mean/std normalization of float inputs, uint8 scaling), so acting and learning run exactly
the same function of (params, obs_norm, obs).

Parameter layout (module paths, used by surgery):
  shared torso:   params/torso/dense_i, params/policy_head/logits, params/value_head/value
  separate torsos: params/policy_torso/dense_i, params/value_torso/dense_i, heads as above
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from networks import heads, normalization, torsos
from seedlike.types import EnvSpec


class ActorCritic(nn.Module):
    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False

    @nn.compact
    def __call__(self, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        if self.shared_torso:
            policy_h = value_h = torsos.MLP(self.hidden_sizes, self.activation, name="torso")(
                features
            )
        else:
            policy_h = torsos.MLP(self.hidden_sizes, self.activation, name="policy_torso")(features)
            value_h = torsos.MLP(self.hidden_sizes, self.activation, name="value_torso")(features)
        logits = heads.CategoricalHead(self.num_actions, name="policy_head")(policy_h)
        value = heads.ValueHead(name="value_head")(value_h)
        return logits, value


@dataclasses.dataclass(frozen=True)
class Network:
    """A pure (params, obs_norm, obs, extras) -> (logits, value) function and its initializers.

    Observations are dicts key -> [*batch, *spec.shape]; any number of leading batch dims.
    """

    spec: EnvSpec
    module: nn.Module
    normalize_obs: bool = True
    obs_clip: float = normalization.DEFAULT_CLIP

    def init(self, rng: jax.Array):
        dummy = {k: jnp.zeros((1, *s.shape), s.dtype) for k, s in self.spec.observation.items()}
        return self.module.init(rng, self._features(self.init_obs_norm(), dummy, 1))

    def init_obs_norm(self) -> dict[str, normalization.RunningStats]:
        """Running statistics for every float observation key (others are not normalized)."""
        if not self.normalize_obs:
            return {}
        return {
            k: normalization.init_stats(s.shape)
            for k, s in self.spec.observation.items()
            if np.issubdtype(s.dtype, np.floating)
        }

    def apply(self, params, obs_norm, obs, extras=None):
        """Returns masked logits [*batch, A] and values [*batch]."""
        key = next(iter(self.spec.observation))
        batch_ndim = obs[key].ndim - len(self.spec.observation[key].shape)
        logits, value = self.module.apply(params, self._features(obs_norm, obs, batch_ndim))
        mask = (extras or {}).get("legal_action_mask")
        return heads.apply_mask(logits, mask), value

    def _features(self, obs_norm, obs, batch_ndim: int) -> jax.Array:
        inputs = {}
        for k, s in self.spec.observation.items():
            x = obs[k]
            if k in obs_norm:
                x = normalization.normalize(obs_norm[k], x, self.obs_clip)
            elif s.dtype == np.uint8:
                x = x.astype(jnp.float32) / 255.0
            inputs[k] = x.astype(jnp.float32)
        return torsos.flatten_features(inputs, batch_ndim)


def make_network(network_config, spec: EnvSpec) -> Network:
    """Builds the network described by a config's `network` section."""
    torso = network_config.get("torso", "mlp")
    if torso != "mlp":
        raise ValueError(f"network.torso={torso!r} is not one of ['mlp']")
    module = ActorCritic(
        num_actions=spec.num_actions,
        hidden_sizes=tuple(int(h) for h in network_config.hidden_sizes),
        activation=network_config.get("activation", "tanh"),
        shared_torso=bool(network_config.get("shared_torso", False)),
    )
    return Network(
        spec=spec,
        module=module,
        normalize_obs=bool(network_config.get("normalize_obs", True)),
        obs_clip=float(network_config.get("obs_clip", normalization.DEFAULT_CLIP)),
    )
