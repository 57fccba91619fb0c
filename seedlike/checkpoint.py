"""orbax checkpoints of the learner: TrainState (params, optimizer, normalizer, counters), metadata.

Layout: <directory>/<step>/{state, meta}. orbax writes each step into a temporary directory and
renames it when complete, so a crash mid-save never leaves a half-written step behind (the learner
removes such temporary directories when it restarts). If the newest
step cannot be read anyway (disk trouble, a file deleted by hand) restore falls back to the
previous one with a warning; so does one whose arrays do not match the sha256 digest saved with
them in meta, or are not finite (flipped bytes can decode to plausible numbers). A checkpoint
written for a different network or optimizer is refused with the names and shapes of the arrays
that do not match.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil

import flax
import jax
import numpy as np
import orbax.checkpoint as ocp

from seedlike.runtime.storage import StorageError, reason


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; entrypoints print the message alone."""


class IncompatibleCheckpoint(CheckpointError):
    """Written for another network or optimizer (or with no stored config)."""


class DamagedCheckpoint(CheckpointError):
    """Its arrays do not match the digest saved with them, or are not finite."""


# meta key of the state's digest (tree_digest), written by save and checked by restore.
DIGEST_KEY = "state_digest"
# A runtime's arrays saved beside the state (Checkpointer.save's `extra`), and their digest.
EXTRA = "device"
EXTRA_DIGEST_KEY = "device_digest"


class _QuietOrbax(logging.Filter):
    """Drops orbax's INFO lines (a dozen per save, most of a run's console); keeps its warnings
    and errors, one line each: a failed save is reported by `save` (StorageError), and orbax's
    tracebacks of it, a few per thread involved, would bury that line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}orbax{os.sep}" not in record.pathname:
            return True
        record.exc_info = record.exc_text = None
        return record.levelno >= logging.WARNING


_QUIET_ORBAX = _QuietOrbax()
# orbax logs through absl's logger; a filter there sees its records before any handler does.
logging.getLogger("absl").addFilter(_QUIET_ORBAX)


def _dotted(path) -> str:
    parts = []
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            parts.append(key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            parts.append(str(key.idx))
        else:
            parts.append(str(key))
    return ".".join(parts)


def shapes_by_name(tree) -> dict[str, tuple[tuple[int, ...], str]]:
    """Dotted leaf name -> (shape, dtype name), the naming orbax uses for stored arrays."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if leaf is None:
            continue
        out[_dotted(path)] = (tuple(np.shape(leaf)), np.dtype(leaf.dtype).name)
    return out


# orbax writes a step into <step>.orbax-checkpoint-tmp (0.12.8; older versions added -<time>) and
# renames it when complete; a process killed mid-save leaves that directory behind, and orbax never
# removes it.
_ORBAX_TMP = ".orbax-checkpoint-tmp"
_META_FILE = "metadata"  # orbax JsonCheckpointHandler's file: plain JSON


class Checkpointer:
    def __init__(self, directory: str, max_to_keep: int = 3):
        self.directory = os.path.abspath(directory)
        self._pending = None  # the step of the save in flight, for its error
        alone = ocp.options.MultiprocessingOptions()
        if jax.process_count() > 1:
            # With several learner processes (seedlike.runtime.distributed) only process 0 has a
            # Checkpointer; orbax would wait for the others at its barriers unless told it is
            # alone, and then it leaves creating the directory to us.
            me = jax.process_index()
            alone = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
            os.makedirs(self.directory, exist_ok=True)
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                create=jax.process_count() == 1,
                multiprocessing_options=alone,
            ),
            item_handlers={
                "state": ocp.StandardCheckpointHandler(multiprocessing_options=alone),
                "meta": ocp.JsonCheckpointHandler(multiprocessing_options=alone),
                EXTRA: ocp.StandardCheckpointHandler(multiprocessing_options=alone),
            },
        )

    def remove_interrupted_saves(self) -> None:
        """For the run's writer, at start: readers (evaluation of a live run) must not call it,
        since a save in progress looks the same."""
        if not os.path.isdir(self.directory):
            return
        for name in sorted(os.listdir(self.directory)):
            if _ORBAX_TMP in name:
                logging.warning("removing %s, left by an interrupted save", name)
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def save(self, step: int, state, meta: dict, extra=None) -> None:
        """Starts saving and returns; orbax writes in the background and commits the step when
        complete (`wait` or `close` waits for it). The state is copied to host memory first, so
        the caller may go on changing it. `extra`: a runtime's own arrays saved beside the state
        (an on-device run's envs and keys: `restore_extra`), digested with it."""
        self.wait()  # one save at a time
        # orbax copies the arrays before it returns (tests/core/test_checkpoint.py checks that later
        # changes to the caller's arrays do not reach the write).
        state = jax.device_get(state)
        extra = jax.device_get(extra)
        meta = {**meta, DIGEST_KEY: tree_digest(state)}
        if extra is not None:
            meta[EXTRA_DIGEST_KEY] = tree_digest(extra)
        try:
            if int(step) in self._manager.all_steps():
                # Same policy version saved again (an interval without an update, or a resume
                # stopped before its first): the state is the one on disk, the counters in meta
                # may have moved on. Deleting the step to write it again would leave no step N
                # until the new write commits, so its meta is replaced in place instead.
                if self._replace_meta(int(step), meta):
                    self._pending = None
                    return
                self._manager.delete(int(step))  # another state or extra, or no digests
            items = {"state": ocp.args.StandardSave(state), "meta": ocp.args.JsonSave(meta)}
            if extra is not None:
                items[EXTRA] = ocp.args.StandardSave(extra)
            self._manager.save(int(step), args=ocp.args.Composite(**items), force=True)
        except StorageError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever orbax wraps the OSError in
            raise self._storage_error(step, e) from None
        self._pending = int(step)

    def _replace_meta(self, step: int, meta: dict) -> bool:
        """Writes `meta` over step's, atomically (a new file renamed over the old), if the state
        saved there is the one `meta` describes (same digest); False, writing nothing, if not."""
        path = os.path.join(self.directory, str(step), "meta", _META_FILE)
        try:
            with open(path) as f:
                saved = json.load(f)
        except (OSError, ValueError):
            return False
        # Both the state's and any `extra`'s (which may move on while the state does not).
        if any(saved.get(k) != meta.get(k) for k in (DIGEST_KEY, EXTRA_DIGEST_KEY)):
            return False
        partial = f"{path}.partial"
        try:
            with open(partial, "w") as f:
                f.write(json.dumps(meta))
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise self._storage_error(step, e, kept=True) from None
        return True

    def wait(self) -> None:
        """Returns once the last save is committed; raises StorageError if it failed."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - orbax re-raises its threads' errors
            raise self._storage_error(self._pending, e) from None

    def _storage_error(self, step, error: BaseException, kept: bool = False) -> StorageError:
        """`kept`: the failed write left step's earlier copy complete."""
        try:
            done = [s for s in self._manager.all_steps() if kept or s != step]
        except Exception:  # noqa: BLE001 - the directory itself may be what failed
            done = []
        last = f"{self.directory}/{max(done)}" if done else "none"
        return StorageError(
            f"cannot write checkpoint {step} in {self.directory}: {reason(error)}. The last "
            f"complete checkpoint is {last}; fix the storage and rerun with the same --logdir "
            "to resume"
        )

    def steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def restore(self, target, step: int | None = None, older=None):
        """Restores (state, meta) into the structure of `target`; None if there is no checkpoint.

        With step=None the newest readable step is used. `older(target) -> (older_target,
        upgrade)` names the layout checkpoints of earlier versions hold the same state in
        (seedlike.learning.train_state.older_layout): a step that fits it is restored into it and
        upgraded.
        """
        steps = self.steps()
        if step is not None:
            return self._restore_step(step, target, older)
        for candidate in reversed(steps):
            try:
                return self._restore_step(candidate, target, older)
            except IncompatibleCheckpoint:
                raise
            except Exception as e:  # noqa: BLE001 - any read failure or damage: an older step
                logging.warning(
                    "checkpoint step %d in %s is unreadable (%s: %s); falling back to an older one",
                    candidate,
                    self.directory,
                    type(e).__name__,
                    e,
                )
        if steps:
            raise IncompatibleCheckpoint(
                f"no readable checkpoint in {self.directory} (steps {steps})"
            )
        return None

    def _restore_step(self, step: int, target, older=None):
        try:
            self.check_compatible(step, target)
        except IncompatibleCheckpoint as first:
            layout = older(target) if older is not None else None
            if layout is None:
                raise
            old_target, upgrade = layout  # the layout before this one, and back to it
            try:
                state, meta = self._restore_step(step, old_target, older)
            except IncompatibleCheckpoint:
                raise first from None  # it names what differs from today's layout
            return upgrade(state), meta
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
            ),
        )
        meta = dict(restored.meta)
        meta.pop(EXTRA_DIGEST_KEY, None)
        digest = meta.pop(DIGEST_KEY, None)  # absent in checkpoints of older seedlike versions
        where = f"checkpoint {self.directory}/{step}"
        if digest is not None and tree_digest(restored.state) != digest:
            raise DamagedCheckpoint(f"{where} does not match the digest saved with it")
        bad = [
            _dotted(path)
            for path, leaf in jax.tree_util.tree_flatten_with_path(restored.state)[0]
            if np.asarray(leaf).dtype.kind == "f" and not np.all(np.isfinite(leaf))
        ]
        if bad:
            raise DamagedCheckpoint(f"{where} holds non-finite values in {', '.join(bad[:4])}")
        return restored.state, meta

    def restore_extra(self, step: int, target):
        """The `extra` saved with step, in the structure of `target` (IncompatibleCheckpoint
        where the step has none, or one of another shape)."""
        where = f"checkpoint {self.directory}/{step}"
        if not os.path.isdir(os.path.join(self.directory, str(step), EXTRA)):
            raise IncompatibleCheckpoint(f"{where} holds no {EXTRA!r} state to resume from")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{EXTRA: ocp.args.StandardRestore(abstract)})
            )[EXTRA]
        except (ValueError, KeyError) as e:
            raise IncompatibleCheckpoint(
                f"{where}: its {EXTRA!r} state does not fit: {e}"
            ) from None
        # orbax restores an array of another shape or dtype as it was saved, without a word.
        shapes = lambda tree: [(np.shape(x), np.dtype(x.dtype)) for x in jax.tree.leaves(tree)]  # noqa: E731
        if shapes(restored) != shapes(target):
            raise IncompatibleCheckpoint(f"{where}: its {EXTRA!r} state has other shapes")
        digest = self.read_meta(step).get(EXTRA_DIGEST_KEY)
        if digest is not None and tree_digest(restored) != digest:
            raise DamagedCheckpoint(f"{where}: its {EXTRA!r} state does not match its digest")
        return restored

    def read_meta(self, step: int) -> dict:
        restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored.meta)

    def check_compatible(self, step: int, target) -> None:
        metadata = self._manager.item_metadata(step)["state"]
        stored = {
            leaf.name: (tuple(leaf.shape), np.dtype(leaf.dtype).name)
            for leaf in jax.tree.leaves(metadata.tree)
            if hasattr(leaf, "shape")
        }
        wanted = shapes_by_name(target)
        problems = []
        # Fields with no arrays (a TrainState's empty target_params) are in the tree too.
        fields = set(flax.serialization.to_state_dict(target))
        if isinstance(metadata.tree, dict) and set(metadata.tree) != fields:
            differ = sorted(set(metadata.tree) ^ fields)
            problems.append(f"the state's fields differ at {', '.join(differ)}")
        # Parameters first: they say what changed; optimizer moments follow from them.
        names = sorted(set(stored) | set(wanted), key=lambda n: (not n.startswith("params."), n))
        for name in names:
            if name not in stored:
                problems.append(
                    f"{name} is missing from the checkpoint (config has {wanted[name][0]})"
                )
            elif name not in wanted:
                problems.append(
                    f"{name} {stored[name][0]} is in the checkpoint but not in the config"
                )
            elif stored[name] != wanted[name]:
                problems.append(
                    f"{name} is {stored[name][1]}{list(stored[name][0])} in the checkpoint, "
                    f"{wanted[name][1]}{list(wanted[name][0])} in the config"
                )
        if problems:
            shown = "; ".join(problems[:6]) + (
                f"; and {len(problems) - 6} more" if len(problems) > 6 else ""
            )
            raise IncompatibleCheckpoint(
                f"checkpoint {self.directory}/{step} does not fit the configured network and "
                f"optimizer: {shown}. Resume with the config that wrote it, or convert it with "
                "`python -m surgery`."
            )

    def close(self) -> None:
        try:
            self._manager.close()
        except Exception as e:  # noqa: BLE001 - a failed save in flight re-raises here
            raise self._storage_error(self._pending, e) from None


def tree_digest(tree) -> str:
    """sha256 over every leaf's name, dtype, shape and bytes."""
    import hashlib

    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        array = np.asarray(leaf)
        digest.update(_dotted(path).encode())
        digest.update(array.dtype.str.encode() + str(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def params_fingerprint(params) -> str:
    """A short hash of every parameter's bytes: equal fingerprints mean identical parameters."""
    return tree_digest(params)[:16]


def split_checkpoint_path(path: str) -> tuple[str, int | None]:
    """'<run>/checkpoints', '<run>' or '<run>/checkpoints/<step>' -> (checkpoints dir, step)."""
    path = os.path.abspath(path)
    if os.path.basename(path).isdigit():
        return os.path.dirname(path), int(os.path.basename(path))
    if os.path.isdir(os.path.join(path, "checkpoints")):
        return os.path.join(path, "checkpoints"), None
    return path, None


def existing_checkpoint_path(path: str) -> tuple[str, int | None]:
    """split_checkpoint_path for reading: FileNotFoundError, saying what to pass, if there is
    nothing at `path` (checked before orbax sees it: its manager would create the directory)."""
    directory, step = split_checkpoint_path(path)
    if not os.path.isdir(directory if step is None else os.path.join(directory, str(step))):
        raise FileNotFoundError(
            f"no run or checkpoint at {path}: pass a run directory, its checkpoints/ directory "
            "or one step directory"
        )
    return directory, step


def load_checkpoint(path: str):
    """Loads a learner checkpoint without knowing its config: (config, network, state, meta).

    The config stored with the checkpoint (over base_config: keys added since at their
    defaults) rebuilds the network and the state structure.
    """
    from networks import make_network
    from seedlike.config import from_dict
    from seedlike.envs import make_env_spec
    from seedlike.learning import train_state as ts

    directory, step = existing_checkpoint_path(path)
    checkpointer = Checkpointer(directory)
    try:
        step, meta = _latest_meta(checkpointer, directory, step)
        config = from_dict(meta["config"])
        network = make_network(config.network, make_env_spec(config.env))
        target = ts.abstract_train_state(network, config.optimizer)
        state, meta = checkpointer.restore(target, step, ts.older_layout)
        state = jax.device_put(state)  # restored as host arrays; callers compute with it
    finally:
        checkpointer.close()
    return config, network, state, meta


def _latest_meta(checkpointer: Checkpointer, directory: str, step: int | None):
    """(step, metadata) of `step` or the newest step; the metadata holds the run's config."""
    steps = checkpointer.steps()
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    step = step if step is not None else steps[-1]
    meta = checkpointer.read_meta(step)
    if "config" not in meta:
        raise IncompatibleCheckpoint(
            f"{directory} has no stored config (written by an old seedlike)"
        )
    return step, meta


def stored_config(path: str) -> dict:
    """The config a run, checkpoint or step directory was trained with, as a dict."""
    directory, step = existing_checkpoint_path(path)
    checkpointer = Checkpointer(directory)
    try:
        return _latest_meta(checkpointer, directory, step)[1]["config"]
    finally:
        checkpointer.close()


def init_from(path: str, state):
    """A new run's state with the parameters and observation statistics of another run's
    checkpoint (fine-tuning); optimizer, counters and RNG stay fresh."""
    try:
        _, _, source, meta = load_checkpoint(path)
    except FileNotFoundError as e:
        raise IncompatibleCheckpoint(f"init_from={path}: {e}") from None
    for part in ("params", "obs_norm"):
        have = shapes_by_name(getattr(state, part))
        got = shapes_by_name(getattr(source, part))
        if have != got:
            differ = sorted(k for k in set(have) | set(got) if have.get(k) != got.get(k))
            raise IncompatibleCheckpoint(
                f"init_from={path}: its {part} do not fit this config's network (they differ at "
                f"{', '.join(differ[:4])}{' ...' if len(differ) > 4 else ''}); change a run's "
                "network with surgery (python -m surgery) instead"
            )
    logging.info(
        "initialized from %s (policy version %s, params %s); optimizer and counters fresh",
        path,
        meta.get("policy_version"),
        params_fingerprint(source.params),
    )
    state = state.replace(params=source.params, obs_norm=source.obs_norm)
    if state.target_params:  # a Q network's target starts where its parameters do
        state = state.replace(target_params=source.params)
    return state
