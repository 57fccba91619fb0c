"""Flax networks for seedlike: torsos, heads and the actor-critic used for acting and learning."""

from networks.actor_critic import ActorCritic, Network
from networks.build import NetworkError, make_network, network_problems
from networks.heads import apply_mask, entropy, kl_divergence, log_prob

__all__ = [
    "ActorCritic",
    "Network",
    "NetworkError",
    "apply_mask",
    "entropy",
    "kl_divergence",
    "log_prob",
    "make_network",
    "network_problems",
]
