"""Flax networks for seedlike: torsos, heads and the actor-critic used for acting and learning."""

from networks.actor_critic import ActorCritic, Network, make_network
from networks.heads import apply_mask, entropy, kl_divergence, log_prob

__all__ = [
    "ActorCritic",
    "Network",
    "apply_mask",
    "entropy",
    "kl_divergence",
    "log_prob",
    "make_network",
]
