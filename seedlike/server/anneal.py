"""Annealing an environment change into training (OpenAI Five App. B).

After surgery adds an action or observation features, the change is brought in gradually: each new
episode "has" the change with probability f, which ramps linearly from 0 to 1 over
`anneal.versions` policy versions starting at `anneal.start_version`. In an episode without it the
new actions are illegal (masked) and the new observation features read 0, exactly as the network
saw the world before surgery. The server applies this per seat, before inference and before
recording, so the learner trains on exactly what the policy saw.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seedlike.types import LEGAL_ACTION_MASK, TEAMMATES, ArraySpec, EnvSpec


@dataclasses.dataclass(frozen=True)
class Annealing:
    start_version: int
    versions: int
    new_actions: tuple[int, ...]
    new_obs_features: tuple[int, ...]  # indices into the flat features of observation "obs"

    @classmethod
    def from_config(cls, anneal_config) -> Annealing | None:
        if not anneal_config or int(anneal_config.versions) <= 0:
            return None
        return cls(
            int(anneal_config.start_version),
            int(anneal_config.versions),
            tuple(int(a) for a in anneal_config.new_actions),
            tuple(int(i) for i in anneal_config.new_obs_features),
        )

    def fraction(self, version: int) -> float:
        """Share of new episodes that have the change at this policy version."""
        return float(np.clip((version - self.start_version) / self.versions, 0.0, 1.0))

    def server_spec(self, spec: EnvSpec) -> EnvSpec:
        """The spec the server records with: a legal-action mask is added if actions anneal."""
        if not self.new_actions or LEGAL_ACTION_MASK in spec.extras:
            return spec
        extras = {**spec.extras, LEGAL_ACTION_MASK: ArraySpec(np.bool_, (spec.logits_size,))}
        return dataclasses.replace(spec, extras=extras)

    def hide_change(self, obs: dict, extras: dict, changed: np.ndarray, logits_size: int):
        """(obs, extras) of m rows as the policy sees them: without the change where `changed` [m]
        is False. New actions are columns of the legal mask [m, logits_size] (for a factorized
        action, the new choices of one head)."""
        old = ~changed
        extras = dict(extras)
        if self.new_obs_features and old.any():
            obs = dict(obs)
            features = np.asarray(self.new_obs_features)
            obs["obs"] = _zero_features(obs["obs"], old, features, 1)
            if TEAMMATES + "obs" in obs:  # teammates see the world of the agent's episode
                obs[TEAMMATES + "obs"] = _zero_features(obs[TEAMMATES + "obs"], old, features, 2)
        if self.new_actions:
            m = changed.shape[0]
            mask = extras.get(LEGAL_ACTION_MASK, np.ones((m, logits_size), np.bool_)).copy()
            mask[np.ix_(old, np.asarray(self.new_actions))] = False
            extras[LEGAL_ACTION_MASK] = mask
        return obs, extras


def _zero_features(x: np.ndarray, rows: np.ndarray, features: np.ndarray, batch_ndim: int):
    """x [m, ...] with the flat features `features` of each row in `rows` set to 0 (a row's
    features are everything after its first `batch_ndim` axes)."""
    flat = x.reshape(x.shape[:batch_ndim] + (-1,)).copy()
    chosen = flat[rows]
    chosen[..., features] = 0
    flat[rows] = chosen
    return flat.reshape(x.shape)
