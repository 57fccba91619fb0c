"""Surgery: function-preserving changes to a trained seedlike policy (OpenAI Five sec. 3.3, B).

ops                 pure transforms of Flax parameter trees, each returning the map that
                    optimizer moments, carries and actions follow
optimizer           Adam moments through those maps; learning rate 0 after surgery
plan                lists of ops (JSON), derived from old and new networks
verify              old vs new policy on random steps and unrolls
checkpoint_surgery  whole run checkpoints and league snapshots; `python -m surgery`
"""

from surgery.checkpoint_surgery import (
    PolicySurgery,
    SurgeryOutcome,
    SurgeryRefused,
    read_snapshot,
    run_surgery,
    write_snapshot,
)
from surgery.ops import (
    ActionInfo,
    AxisMap,
    LeafMap,
    OpResult,
    ParamMap,
    SurgeryError,
    add_action_dims,
    add_action_head,
    add_actions,
    add_input_features,
    add_residual_block,
    annealed_legal_mask,
    extend_obs_norm,
    layer_paths,
    pad_carry,
    widen_conv,
    widen_dense,
    widen_lstm,
)
from surgery.optimizer import reset_opt_state, set_lr_zero, transform_opt_state
from surgery.plan import (
    AddActionDims,
    AddActionHead,
    AddActions,
    AddObservations,
    AddResidualBlock,
    Context,
    Layout,
    Plan,
    PlanError,
    PlanResult,
    WidenConv,
    WidenDense,
    WidenLSTM,
    config_from_params,
    derive_plan,
    layout_of,
)
from surgery.verify import VerifyReport, extend_observations, random_carry, sample_observations
from surgery.verify import verify as verify_policy

__all__ = [
    "ActionInfo",
    "AddActionDims",
    "AddActionHead",
    "AddActions",
    "AddObservations",
    "AddResidualBlock",
    "AxisMap",
    "Context",
    "LeafMap",
    "Layout",
    "OpResult",
    "ParamMap",
    "Plan",
    "PlanError",
    "PlanResult",
    "PolicySurgery",
    "SurgeryError",
    "SurgeryOutcome",
    "SurgeryRefused",
    "VerifyReport",
    "WidenConv",
    "WidenDense",
    "WidenLSTM",
    "add_action_dims",
    "add_action_head",
    "add_actions",
    "add_input_features",
    "add_residual_block",
    "annealed_legal_mask",
    "config_from_params",
    "derive_plan",
    "extend_obs_norm",
    "extend_observations",
    "layer_paths",
    "layout_of",
    "pad_carry",
    "read_snapshot",
    "random_carry",
    "reset_opt_state",
    "run_surgery",
    "sample_observations",
    "set_lr_zero",
    "transform_opt_state",
    "verify_policy",
    "widen_conv",
    "widen_dense",
    "widen_lstm",
    "write_snapshot",
]
