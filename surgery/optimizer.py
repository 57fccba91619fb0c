"""Optimizer state surgery: Adam moments follow the parameters; learning rate 0 for a while.

seedlike's optimizer is `optax.inject_hyperparams(chain(clip_by_global_norm, adam))`; its state
holds Adam's `mu` and `nu` trees (the parameters' structure) and counters. After surgery every
ParamMap the plan produced is applied to them:

  new entries (new units, new rows, new leaves)      mu = nu = 0
  copied entries (Net2Wider, moved blocks)           the source entry's, times the gradient scale
                                                     (mu * g, nu * g^2)

The gradient scale g is what the gradients themselves do under the transform: a unit replicated
into n copies has its readers' rows divided by n, so the gradient reaching each copy's incoming
weights and bias is 1/n of the old unit's (g = 1/n), while the divided outgoing rows still see the
unit's full activation and get the old gradient unchanged (g = 1; not divided like the weights).
The moments then match the gradients the new network produces, and Adam's first steps after
surgery move each copy by the same amount the old unit would have moved. Counters are kept.

OpenAI Five (App. B, "Smooth Training Restart") also trains with learning rate 0 for a while after
surgery so that the moments adjust (and the rollouts reach steady state) before the weights move:
`set_lr_zero` sets TrainState.lr_zero_until, which seedlike's sgd_step honours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import numpy as np
import optax

from surgery.ops import ParamMap, SurgeryError


def _map_state(node, adam_fn, where: str = "opt_state"):
    """Rebuilds an optax state, applying adam_fn to every ScaleByAdamState."""
    if isinstance(node, optax.ScaleByAdamState):
        return adam_fn(node)
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return type(node)(
            *(_map_state(v, adam_fn, f"{where}.{f}") for f, v in zip(node._fields, node))
        )
    if isinstance(node, tuple | list):
        return type(node)(_map_state(v, adam_fn, f"{where}[{i}]") for i, v in enumerate(node))
    if isinstance(node, Mapping):
        return {k: _map_state(v, adam_fn, f"{where}.{k}") for k, v in node.items()}
    if node is not None and np.ndim(node) > 0:
        # Per-parameter statistics of another transform: their scaling rule is unknown here.
        raise SurgeryError(
            f"{where} has shape {list(np.shape(node))}: optimizer statistics surgery does not "
            "know how to map; use reset_optimizer"
        )
    return node


def transform_opt_state(opt_state, param_maps: Sequence[ParamMap]):
    """Maps Adam's moments through the plan's ParamMaps (in order); counters are kept.

    Args:
      opt_state: the optax state of the OLD parameters.
      param_maps: PlanResult.param_maps (or one op's [OpResult.param_map]).

    Returns:
      The optax state of the new parameters.
    """

    def adam(state: optax.ScaleByAdamState):
        mu, nu = state.mu, state.nu
        for pmap in param_maps:
            mu = pmap.apply(mu, "first_moment")
            nu = pmap.apply(nu, "second_moment")
        return state._replace(mu=mu, nu=nu)

    return _map_state(opt_state, adam)


def reset_opt_state(opt_state, params):
    """Zero Adam moments for `params` and Adam's count 0 (bias correction restarts with them).

    The injected hyperparameters and the outer counters are kept.
    """

    def zeros():
        return jax.tree.map(lambda p: np.zeros(np.shape(p), np.asarray(p).dtype), params)

    def adam(state: optax.ScaleByAdamState):
        return state._replace(count=np.zeros_like(np.asarray(state.count)), mu=zeros(), nu=zeros())

    return _map_state(opt_state, adam)


def set_lr_zero(state, num_sgd_steps: int):
    """TrainState with learning rate 0 for the next `num_sgd_steps` gradient steps.

    seedlike's sgd_step uses lr 0 while sgd_steps < lr_zero_until; Adam's moments keep updating.
    """
    if num_sgd_steps < 0:
        raise ValueError(f"num_sgd_steps={num_sgd_steps} must be >= 0")
    until = np.asarray(state.sgd_steps, np.int32) + np.int32(num_sgd_steps)
    return state.replace(lr_zero_until=until.astype(np.int32))
