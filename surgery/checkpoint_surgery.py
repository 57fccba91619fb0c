"""Surgery on a whole run: parameters, optimizer moments, normalizer, every league snapshot.

A run directory holds `checkpoints/<step>/` (seedlike.checkpoint; meta["config"] is the config
that wrote it) and, once the league exists, `league/snapshots/<version>/` (orbax checkpoints of
{"params", "obs_norm"}, see `read_snapshot`/`write_snapshot`). `run_surgery` rebuilds the old
network from the stored config, applies a plan (given, or derived from the new config), checks
that the result has exactly the structure the new config's learner expects, verifies every policy
against its original and writes a new run directory that

    scripts/train.sh --logdir=<out> --config=<out>/config.py

resumes (the learner restores the newest checkpoint of <out>/checkpoints). Nothing is written if
a policy changed by more than the tolerance, unless forced.

`PolicySurgery.transform_policy` is the per-policy transform the league applies to its pool.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Callable, Mapping

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from networks import Network, make_network
from seedlike import checkpoint as ckpt_lib
from seedlike import config as config_lib
from seedlike.algos import sgd_steps_per_update
from seedlike.learning import train_state as ts
from surgery import ops
from surgery.optimizer import reset_opt_state, set_lr_zero, transform_opt_state
from surgery.plan import AddActions, Context, Plan, PlanResult, config_from_params, derive_plan
from surgery.plan import layout_of as _layout_of
from surgery.verify import Verifier, VerifyReport, random_carry, sample_observations

SNAPSHOTS = os.path.join("league", "snapshots")
# Every frozen copy of the policy a run keeps: league opponents and TrueSkill reference snapshots.
POLICY_DIRS = (SNAPSHOTS, os.path.join("league", "references"))
CONFIG_FILE = "config.py"
CONFIG_JSON = "config.json"
REPORT_FILE = "surgery.json"


class SurgeryRefused(ops.SurgeryError):
    """The transformed policy differs from the original by more than the tolerance."""

    def __init__(self, message: str, reports: Mapping[str, VerifyReport]):
        super().__init__(message)
        self.reports = dict(reports)


@dataclasses.dataclass(frozen=True)
class PolicySurgery:
    """A plan bound to the old and new networks: transforms any policy of the old network.

    Attributes:
      plan: the ops.
      old_network, new_network: networks.Network before and after.
      seed: seeds the new random weights (the same for every policy transformed).
      batch_size, unroll_length: verification batch (and the batch choosing new-action biases).
    """

    plan: Plan
    old_network: Network
    new_network: Network
    seed: int = 0
    batch_size: int = 32
    unroll_length: int = 8

    def context(self, params, obs_norm) -> Context:
        """The old network's layout, plus its logits on random observations if an AddActions op
        has no bias and the heads' inputs are unbounded."""
        layout = _layout_of(self.old_network)
        needs_logits = layout.feature_bound is None and any(
            isinstance(op, AddActions) and op.bias is None for op in self.plan.ops
        )
        if not needs_logits:
            return Context(layout)
        gen = ops.generator(self.seed + 1)
        n = 8 * self.batch_size
        obs = sample_observations(self.old_network.spec, obs_norm, gen, (n,))
        carry = random_carry(self.old_network, gen, n)
        # Autoregressive heads: each argument's logits given random earlier arguments.
        actions = gen.integers(0, self.old_network.spec.num_actions, n).astype(np.int32)
        step = jax.jit(self.old_network.step)
        first = np.zeros((n,), bool)
        logits, _, _ = step(params, obs_norm or {}, obs, {}, carry, first, actions)
        return Context(layout, np.asarray(logits))

    def transform_params(self, params, obs_norm=None) -> PlanResult:
        """Applies the plan to one parameter tree of the old network."""
        return self.plan.apply(params, self.seed, self.context(params, obs_norm))

    def transform_obs_norm(self, obs_norm) -> dict:
        """Old normalizer statistics -> the new network's (new features mean 0, var 1)."""
        return ops.extend_obs_norm(obs_norm, self.new_network.init_obs_norm())

    def transform_policy(self, policy: Mapping) -> dict:
        """{"params", "obs_norm"} of the old network -> the same for the new network.

        The per-policy transform for league snapshots and any other frozen copy of the policy.
        """
        result = self.transform_params(policy["params"], policy.get("obs_norm"))
        return {
            "params": result.params,
            "obs_norm": self.transform_obs_norm(policy.get("obs_norm") or {}),
        }

    def transform_state(
        self, state: ts.TrainState, *, reset_optimizer: bool = False, lr_zero_sgd_steps: int = 0
    ) -> tuple[ts.TrainState, PlanResult]:
        """A learner TrainState of the old network -> one of the new network.

        Parameters and normalizer as transform_policy; Adam moments follow the parameters (or are
        reset); counters are kept; learning rate 0 for the next lr_zero_sgd_steps sgd steps.
        """
        result = self.transform_params(state.params, state.obs_norm)
        if reset_optimizer:
            opt_state = reset_opt_state(state.opt_state, result.params)
        else:
            opt_state = transform_opt_state(state.opt_state, result.param_maps)
        new = state.replace(
            params=result.params,
            opt_state=opt_state,
            obs_norm=self.transform_obs_norm(state.obs_norm),
        )
        if state.target_params:  # a Q network's target: the same function-preserving plan
            target = self.transform_params(state.target_params, state.obs_norm).params
            new = new.replace(target_params=target)
        return set_lr_zero(new, lr_zero_sgd_steps), result

    @functools.cached_property
    def _verifier(self) -> Verifier:
        # Compiled once, reused for the learner's policy and every league snapshot.
        return Verifier(self.old_network, self.new_network, self.batch_size, self.unroll_length)

    def verify(self, old_policy: Mapping, new_policy: Mapping, result: PlanResult) -> VerifyReport:
        """Old vs new policy (surgery.verify) with the plan's carry and action maps."""
        return self._verifier(
            old_policy["params"],
            old_policy.get("obs_norm") or {},
            new_policy["params"],
            new_policy.get("obs_norm") or {},
            rng=self.seed + 2,
            carry_map=result.carry_map,
            action_map=result.action_map,
        )

    def check_fits(self, tree, template) -> None:
        """Raises SurgeryError naming every array whose shape differs from `template`'s."""
        have, want = ckpt_lib.shapes_by_name(tree), ckpt_lib.shapes_by_name(template)
        problems = []
        for name in sorted(set(have) | set(want), key=lambda n: (not n.startswith("params"), n)):
            if name not in want:
                problems.append(f"{name} {list(have[name][0])} is not in the new network")
            elif name not in have:
                problems.append(f"{name} {list(want[name][0])} is missing after the plan")
            elif have[name] != want[name]:
                problems.append(
                    f"{name}: the plan gives {have[name][1]}{list(have[name][0])}, the new config "
                    f"needs {want[name][1]}{list(want[name][0])}"
                )
        if problems:
            shown = "; ".join(problems[:8])
            more = f"; and {len(problems) - 8} more" if len(problems) > 8 else ""
            raise ops.SurgeryError(
                f"the plan does not produce the new config's network: {shown}{more}"
            )


def abstract_policy(network) -> dict:
    """The {"params", "obs_norm"} structure of a network's league snapshot."""
    return jax.eval_shape(
        lambda key: {"params": network.init(key), "obs_norm": network.init_obs_norm()},
        jax.random.key(0),
    )


def read_snapshot(path: str, network) -> dict:
    """A league snapshot {"params", "obs_norm"} of `network` (an orbax StandardCheckpointer dir)."""
    checkpointer = ocp.StandardCheckpointer()
    try:
        return checkpointer.restore(os.path.abspath(path), abstract_policy(network))
    finally:
        checkpointer.close()


def write_snapshot(path: str, policy: Mapping) -> None:
    """Writes a league snapshot {"params", "obs_norm"} (path must not exist)."""
    checkpointer = ocp.StandardCheckpointer()
    try:
        checkpointer.save(os.path.abspath(path), jax.device_get(dict(policy)))
        checkpointer.wait_until_finished()
    finally:
        checkpointer.close()


def snapshot_dirs(run_dir: str | None) -> list[str]:
    """Frozen policies of a run, as paths relative to it (league/snapshots/<v>, then
    league/references/<v>), in version order."""
    found = []
    for sub in POLICY_DIRS:
        root = os.path.join(run_dir, sub) if run_dir else None
        if not root or not os.path.isdir(root):
            continue
        names = [n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))]
        names.sort(key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n))
        found.extend(os.path.join(sub, n) for n in names)
    return found


@dataclasses.dataclass(frozen=True)
class SurgeryOutcome:
    """What run_surgery did.

    Attributes:
      out: the new run directory (nothing written if dry_run).
      step: the checkpoint step (policy version) transformed and written.
      config: the new config.
      plan: the plan applied.
      report: verification of the learner's policy.
      snapshot_reports: verification of each league snapshot, by version.
      lr_zero_until: TrainState.lr_zero_until of the new state (sgd steps).
      changes: parameter path -> "old shape -> new shape".
      written: whether the new run directory was written.
      warnings: what the caller should know but surgery cannot check (a change of environment).
    """

    out: str
    step: int
    config: ml_collections.ConfigDict
    plan: Plan
    report: VerifyReport
    snapshot_reports: dict[str, VerifyReport]
    lr_zero_until: int
    changes: dict[str, str]
    written: bool
    warnings: list = dataclasses.field(default_factory=list)


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def run_surgery(
    checkpoint: str,
    out: str,
    *,
    plan: Plan | None = None,
    new_config: ml_collections.ConfigDict | None = None,
    old_config: ml_collections.ConfigDict | None = None,
    lr_zero_updates: int = 10,
    reset_optimizer: bool = False,
    tolerance: float = 1e-5,
    force: bool = False,
    dry_run: bool = False,
    seed: int = 0,
    mode: str = "random",
    lstm_noise: float = 0.0,
    spec_fn: Callable | None = None,
    new_action_value: float = 0.0,
) -> SurgeryOutcome:
    """Applies a plan to a run checkpoint and writes a new run directory `out`.

    Args:
      checkpoint: a run directory, its checkpoints/ directory or one step directory.
      out: the new run directory (must not hold checkpoints yet).
      plan: the ops; None derives them from the old config and `new_config`.
      new_config: the new experiment config; None reads the network section from the plan's
        result (hand-written architecture-only plans).
      old_config: the config that wrote the checkpoint, for checkpoints without a stored one
        (a stored config takes precedence).
      lr_zero_updates: learner updates with learning rate 0 after surgery (converted to sgd
        steps: updates * epochs * num_minibatches of the new config's algorithm).
      reset_optimizer: zero Adam's moments instead of transforming them.
      tolerance: largest verification error (max |Δ logits|, |Δ value|, KL) accepted.
      force: write even above tolerance.
      dry_run: transform and verify, write nothing.
      seed: seeds the new weights and the verification batch.
      mode, lstm_noise, new_action_value: derive_plan settings when the plan is derived.
      spec_fn: config.env -> EnvSpec (default: seedlike.envs.make_env_spec).

    Raises:
      SurgeryRefused: a policy changed by more than the tolerance (and not forced).
      SurgeryError / PlanError: the plan cannot be applied or does not fit the new config.
    """
    if spec_fn is None:
        from seedlike.envs import make_env_spec as spec_fn
    if plan is None and new_config is None:
        raise ops.SurgeryError("run_surgery needs a plan or a new config (or both)")
    source = _read_source(checkpoint, old_config, spec_fn)
    inferred = new_config is None
    if inferred:
        probe = PolicySurgery(plan, source.network, source.network, seed).transform_params(
            source.state.params, source.state.obs_norm
        )
        new_config = config_from_params(source.config, probe.params, probe.graph)
    config_lib.resolve(new_config)
    new_network = make_network(new_config.network, spec_fn(new_config.env))
    problems = _env_problems(source.config.env, new_config.env, new_network.spec, spec_fn)
    if problems:
        raise ops.SurgeryError("; ".join(problems))
    derive = dict(mode=mode, lstm_noise=lstm_noise, new_action_value=new_action_value)
    plan = plan if plan is not None else derive_plan(source.network, new_network, **derive)
    surgery = PolicySurgery(plan, source.network, new_network, seed)
    lr_zero = int(lr_zero_updates) * sgd_steps_per_update(new_config)
    new_state, result = surgery.transform_state(
        source.state, reset_optimizer=reset_optimizer, lr_zero_sgd_steps=lr_zero
    )
    _check_fits(surgery, new_state, new_network, new_config, inferred)
    old_policy = {"params": source.state.params, "obs_norm": source.state.obs_norm}
    new_policy = {"params": new_state.params, "obs_norm": new_state.obs_norm}
    report = surgery.verify(old_policy, new_policy, result)
    snapshots, snapshot_reports = _snapshot_surgery(surgery, source, new_network)
    forced = _check_tolerance(report, snapshot_reports, tolerance, force)
    outcome = SurgeryOutcome(
        out=os.path.abspath(out),
        step=int(source.step),
        config=new_config,
        plan=plan,
        report=report,
        snapshot_reports=snapshot_reports,
        lr_zero_until=int(np.asarray(new_state.lr_zero_until)),
        changes=result.param_map.describe(),
        written=not dry_run,
        warnings=_env_warnings(source.config.env, new_config.env),
    )
    if dry_run:
        return outcome
    entry = {
        "source": os.path.join(source.directory, str(source.step)),
        **_report_entry(outcome, result),
        "tolerance": tolerance,
        "forced": forced,
        "reset_optimizer": reset_optimizer,
    }
    _write_run(out, source.step, new_state, source.meta, new_config, entry, snapshots)
    return outcome


def _report_entry(outcome: SurgeryOutcome, result) -> dict:
    """What surgery.json records of an outcome: the plan, the reports, the parameter changes
    and the new actions."""
    return {
        "plan": outcome.plan.to_dict(),
        "report": outcome.report.to_dict(),
        "snapshot_reports": {k: v.to_dict() for k, v in outcome.snapshot_reports.items()},
        "lr_zero_until": outcome.lr_zero_until,
        "changes": outcome.changes,
        "actions": [dataclasses.asdict(info) for info in result.action_infos],
    }


@dataclasses.dataclass
class _Source:
    """The checkpoint surgery starts from: where it is, its config, network, state and meta."""

    directory: str
    step: int
    run_dir: str | None  # the run directory, where the checkpoint is a run's (its snapshots)
    config: ml_collections.ConfigDict
    network: object
    state: ts.TrainState
    meta: dict


def _read_source(checkpoint: str, old_config, spec_fn) -> _Source:
    """The checkpoint (a run, its checkpoints/ or a step directory) restored into its own
    network: the stored config's, or `old_config` for a checkpoint without one."""
    directory, step = ckpt_lib.existing_checkpoint_path(checkpoint)
    run_dir = os.path.dirname(directory) if os.path.basename(directory) == "checkpoints" else None
    checkpointer = ckpt_lib.Checkpointer(directory)
    try:
        steps = checkpointer.steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {directory}")
        step = steps[-1] if step is None else step
        meta = checkpointer.read_meta(step)
        if "config" in meta:
            old_config = config_lib.from_dict(meta["config"])
        elif old_config is None:
            raise ckpt_lib.IncompatibleCheckpoint(
                f"{directory}/{step} has no stored config (written by an older seedlike); pass "
                "the config that wrote it (--old_config)"
            )
        config_lib.resolve(old_config)  # a config a user passed may still say "auto"
        network = make_network(old_config.network, spec_fn(old_config.env))
        target = ts.abstract_train_state(network, old_config.optimizer)
        state, meta = checkpointer.restore(target, step, ts.older_layout)
    finally:
        checkpointer.close()
    return _Source(directory, step, run_dir, old_config, network, state, meta)


def _check_fits(surgery, new_state, new_network, new_config, inferred: bool) -> None:
    """Raises SurgeryError where the transformed state does not fit the new config's network
    (with a hint where that config was read from the plan's result)."""
    try:
        surgery.check_fits(new_state, ts.abstract_train_state(new_network, new_config.optimizer))
    except ops.SurgeryError as e:
        if not inferred:
            raise
        raise ops.SurgeryError(
            f"{e}. The new config was read from the plan's result with the old env; plans that "
            "change observations or actions need the new config (--new_config)"
        ) from None


def _snapshot_surgery(surgery, source: _Source, new_network):
    """Every league snapshot of the run transformed like the learner's params and verified:
    (snapshots by name, their reports)."""
    snapshots, reports = {}, {}
    for name in snapshot_dirs(source.run_dir):
        old_snap = read_snapshot(os.path.join(source.run_dir, name), source.network)
        snap_result = surgery.transform_params(old_snap["params"], old_snap["obs_norm"])
        new_snap = {
            "params": snap_result.params,
            "obs_norm": surgery.transform_obs_norm(old_snap["obs_norm"]),
        }
        surgery.check_fits(new_snap, abstract_policy(new_network))
        snapshots[name] = new_snap
        reports[name] = surgery.verify(old_snap, new_snap, snap_result)
    return snapshots, reports


def _check_tolerance(report, snapshot_reports: dict, tolerance: float, force: bool) -> bool:
    """Raises SurgeryRefused where a policy changed by more than the tolerance (unless
    `force`); returns whether one did (the write was forced)."""
    reports = {"learner": report, **{f"snapshot {k}": v for k, v in snapshot_reports.items()}}
    bad = {k: r for k, r in reports.items() if not r.ok(tolerance)}
    if bad and not force:
        worst = ", ".join(f"{k}: error {r.error:.3g}" for k, r in bad.items())
        raise SurgeryRefused(
            f"surgery changes the policy by more than the tolerance {tolerance:g} ({worst}); "
            "nothing written. Pass force=True (--force) to write it anyway.",
            reports,
        )
    return bool(bad)


def _env_problems(old_env, new_env, new_spec, spec_fn) -> list[str]:
    """Env settings whose change no surgery of the parameters can follow: they move what the
    policy's inputs or outputs mean, and the verification (old and new network on the same
    observations) cannot see it."""
    problems = []
    if new_spec.continuous and old_env.action_bounds != new_env.action_bounds:
        problems.append(
            f"env.action_bounds changes from {old_env.action_bounds!r} to "
            f"{new_env.action_bounds!r}: the same outputs would move the env differently"
        )
    old_i, new_i = tuple(old_env.obs_indices), tuple(new_env.obs_indices)
    if old_env.name == new_env.name and old_i != new_i:
        # Observations grow by new entries after the old ones (AddObservations): the old
        # features must keep their places.
        every = ml_collections.ConfigDict(new_env.to_dict())
        every.obs_indices = ()
        features = tuple(range(int(np.prod(spec_fn(every).observation["obs"].shape))))
        old_r, new_r = old_i or features, new_i or features
        if new_r[: len(old_r)] != old_r:
            order = old_r + tuple(i for i in new_r if i not in old_r)
            problems.append(
                f"env.obs_indices changes from {old_i} to {new_i}: surgery keeps the old "
                f"features in their places and adds new ones after them; use {order}"
            )
    return problems


def _env_warnings(old_env, new_env) -> list[str]:
    """Surgery preserves the policy on the old observations; on another task those mean something
    else, so a change of env.name is allowed (curricula) but said out loud."""
    if old_env.name == new_env.name:
        return []
    return [
        f"the environment changes from {old_env.name} to {new_env.name}: the function is "
        f"preserved on {old_env.name}'s observations, not on the new task's"
    ]


def _write_run(out, step, state, meta, config, entry, snapshots) -> None:
    out = os.path.abspath(out)
    checkpoints = os.path.join(out, "checkpoints")
    if os.path.isdir(checkpoints) and os.listdir(checkpoints):
        raise ops.SurgeryError(f"{checkpoints} already exists and is not empty; choose a new --out")
    for name in snapshots:
        if os.path.exists(os.path.join(out, name)):
            raise ops.SurgeryError(f"{os.path.join(out, name)} already exists")
    os.makedirs(out, exist_ok=True)
    config_json = json.loads(config.to_json())
    new_meta = dict(meta)
    new_meta["config"] = config_json
    new_meta["surgery"] = [*meta.get("surgery", []), _json_safe(entry)]
    checkpointer = ckpt_lib.Checkpointer(checkpoints, int(config.checkpoint.max_to_keep))
    try:
        checkpointer.save(step, state, new_meta)
    finally:
        checkpointer.close()
    for name, policy in snapshots.items():
        write_snapshot(os.path.join(out, name), policy)
    with open(os.path.join(out, CONFIG_JSON), "w") as f:
        json.dump(config_json, f, indent=2)
    with open(os.path.join(out, CONFIG_FILE), "w") as f:
        f.write(_CONFIG_PY)
    with open(os.path.join(out, REPORT_FILE), "w") as f:
        json.dump(_json_safe(entry), f, indent=2)


_CONFIG_PY = '''"""This run's config after surgery (written by python -m surgery; see surgery.json).

    scripts/train.sh --logdir=<this directory> --config=<this directory>/config.py
"""

import json
import os

from seedlike.config import from_dict


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.json")
    with open(path) as f:
        config = from_dict(json.load(f))  # keys added to seedlike since then at their defaults
    config.lock()
    return config
'''
