"""The replay a learner host keeps for the replay algorithms (seedlike.algos: rainbow, r2d2): the
unrolls of its learner batches, stored whole in a ring of slots, and their steps sampled as n-step
transitions, uniformly or in proportion to a priority (Schaul et al. 2016).

Each slot holds one unroll's T+1 steps as the trajectory store built it (seedlike.types.Unroll):
an observation is stored once per unroll it appears in (step T is also the next unroll's step 0:
(T+1)/T of the bytes per step), and a transition's bootstrap observation is another step of the
same slot, found when the unroll is inserted (td.n_step_targets), never a copy. A stack of
frames (seedlike.types.frame_stack: Atari's uint8 [4, 84, 84]) is stored as each step's newest
frame once, and stacks are rebuilt when sampled (`StackedFrames`): (T + S) / T frames per step
instead of S. A step
counts as a transition when its action was executed (`valid`): terminal observations and the
unrolls the influence caps kept out of the loss get priority 0 and are never sampled.

Priorities live in a sum tree over every slot's T steps (`SumTree`): sampling is stratified
(one draw from each of `count` equal slices of the total), a new step gets the largest priority
seen so far, and `update` writes the learner's new priorities back. Uniform sampling is the same
tree with every valid step at 1.
"""

from __future__ import annotations

import numpy as np

from seedlike.algos import td
from seedlike.algos.batches import Sequences, Transitions
from seedlike.types import frame_stack


class SumTree:
    """Non-negative leaf values in a complete binary tree of partial sums: prefix-sum search and
    batched updates in O(log n) per leaf, vectorized over leaves."""

    def __init__(self, size: int):
        self.size = int(size)
        self._base = 1 << max(int(np.ceil(np.log2(max(self.size, 1)))), 0)
        self._tree = np.zeros(2 * self._base, np.float64)  # node i's children: 2i, 2i + 1

    @property
    def total(self) -> float:
        return float(self._tree[1])

    def values(self, idx: np.ndarray) -> np.ndarray:
        return self._tree[self._base + np.asarray(idx, np.int64)]

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Sets leaves idx to values (a repeated index keeps its last value)."""
        node = self._base + np.asarray(idx, np.int64)
        self._tree[node] = values
        node = np.unique(node // 2)
        while node.size and node[0] >= 1:
            self._tree[node] = self._tree[2 * node] + self._tree[2 * node + 1]
            node = np.unique(node // 2)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The leaf where each prefix sum `mass` (in [0, total)) falls."""
        node = np.ones(np.shape(mass), np.int64)
        mass = np.asarray(mass, np.float64).copy()
        while node[0] < self._base if node.size else False:
            left = self._tree[2 * node]
            right = mass >= left
            # A right child of zero mass (rounding at the very end) is never chosen.
            right &= self._tree[2 * node + 1] > 0
            mass = np.where(right, mass - left, mass)
            node = 2 * node + right
        return np.minimum(node - self._base, self.size - 1)


class StackedFrames:
    """One stacked-frames observation key of the replay's slots: [T+1, S, H, W] stacks kept as
    the S-1 frames before step 0 and each step's newest frame, [S-1 + T+1, H, W].

    A stack continues the one before (its older frames are the previous stack's newer ones) or
    starts an episode (envpool fills a new episode's stack with its first frame): `restart`
    marks the second kind, and rebuilding a stack repeats the latest restart's frame over the
    frames before it. A slot with a stack that follows neither rule keeps its stacks whole.
    """

    def __init__(self, slots: int, horizon: int, shape: tuple[int, ...]):
        self.stack = int(shape[0])
        self.frames = np.zeros((slots, self.stack - 1 + horizon + 1, *shape[1:]), np.uint8)
        self.restart = np.zeros((slots, horizon + 1), bool)
        self.whole: dict[int, np.ndarray] = {}  # slot -> its stacks [T+1, S, H, W]

    @property
    def nbytes(self) -> int:
        return self.frames.nbytes + self.restart.nbytes + sum(a.nbytes for a in self.whole.values())

    def write(self, slots: np.ndarray, stacks: np.ndarray) -> None:
        """Stores stacks [B, T+1, S, H, W] into `slots`."""
        s = self.stack
        continues = np.all(stacks[:, 1:, :-1] == stacks[:, :-1, 1:], axis=(2, 3, 4))
        restarts = np.all(stacks[:, 1:] == stacks[:, 1:, -1:], axis=(2, 3, 4))
        self.frames[slots, : s - 1] = stacks[:, 0, :-1]
        self.frames[slots, s - 1 :] = stacks[:, :, -1]
        self.restart[slots, 0] = False
        self.restart[slots, 1:] = ~continues & restarts
        rebuilt = (continues | restarts).all(axis=1)
        for b, slot in enumerate(slots.tolist()):
            if rebuilt[b]:
                self.whole.pop(slot, None)
            else:
                self.whole[slot] = stacks[b].copy()

    def read(self, slot: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The stacks [..., S, H, W] at steps t of slots `slot` (any equal shapes)."""
        s = self.stack
        step = t[..., None] - (s - 1) + np.arange(s)  # the steps whose newest frames form it
        restart = (step >= 1) & self.restart[slot[..., None], np.maximum(step, 0)]
        latest = np.where(restart, step, -s).max(-1, keepdims=True)
        stacks = self.frames[slot[..., None], np.maximum(step, latest) + s - 1]
        for kept, whole in self.whole.items():
            hit = slot == kept
            if hit.any():
                stacks[hit] = whole[t[hit]]
        return stacks


class Replay:
    """Unrolls [T+1] in `capacity // T` slots, sampled as n-step transitions.

    Args:
      example: one unroll's arrays as the learner receives them (any leading batch shape): what
        the slots are allocated like.
      capacity: env steps held (slots of T steps; the oldest slot is overwritten first).
      n_step, gamma, reward_clip: the transitions' targets (td.n_step_targets).
      prioritized: sample in proportion to (priority + eps) ** exponent; False: uniformly.
      exponent, eps: the priorities' exponent and floor.
      seed: the sampling generator's.
    """

    def __init__(
        self, example, capacity: int, n_step: int, gamma: float, reward_clip: float = 0.0,
        prioritized: bool = True, exponent: float = 0.5, eps: float = 1e-3, seed: int = 0,
    ):  # fmt: skip
        self.horizon = int(np.shape(example.reward)[-1])
        self.slots = max(int(capacity) // self.horizon, 1)
        self.n_step, self.gamma, self.reward_clip = int(n_step), float(gamma), float(reward_clip)
        self.prioritized = bool(prioritized)
        self.exponent, self.eps = float(exponent), float(eps)
        lead = np.ndim(example.reward) - 1  # the example's batch dimensions

        def alloc(x, steps):
            x = np.asarray(x)
            return np.zeros((self.slots, steps, *x.shape[lead + 1 :]), x.dtype)

        t1 = self.horizon + 1
        shapes = {k: np.shape(v)[lead + 1 :] for k, v in example.obs.items()}
        self.stacks = {
            k: StackedFrames(self.slots, self.horizon, shapes[k])
            for k, v in example.obs.items()
            if frame_stack(np.asarray(v).dtype, shapes[k])
        }
        self.obs = {k: alloc(v, t1) for k, v in example.obs.items() if k not in self.stacks}
        self.extras = {k: alloc(v, t1) for k, v in example.extras.items()}
        self.action = alloc(example.action, t1)
        self.reward = np.zeros((self.slots, self.horizon), np.float32)
        self.discount = np.zeros((self.slots, self.horizon), np.float32)
        self.boot = np.zeros((self.slots, self.horizon), np.int32)
        self.tree = SumTree(self.slots * self.horizon)
        self.max_priority = 1.0
        self.next_slot = 0
        self.filled = 0  # slots written
        self.inserted = 0  # valid steps inserted, all time
        self.sampled = 0  # steps sampled, all time (a transition is one)
        self.steps_per_sample = 1
        self._valid = np.zeros((self.slots, self.horizon), bool)
        self._rng = np.random.default_rng(seed)

    @property
    def size(self) -> int:
        """Transitions the replay can sample now (valid steps stored)."""
        return int(self._valid.sum())

    @property
    def nbytes(self) -> int:
        """Bytes of the stored arrays."""
        arrays = [*self.obs.values(), *self.extras.values(), self.action, self.reward]
        arrays += [self.discount, self.boot, self._valid]
        stacks = sum(s.nbytes for s in self.stacks.values())
        return sum(a.nbytes for a in arrays) + self.tree._tree.nbytes + stacks

    def insert(self, unrolls) -> int:
        """Stores stacked unrolls [B, T+1, ...] (host arrays); returns the valid steps added."""
        batch = int(np.shape(unrolls.reward)[0])
        total, discount, boot = td.n_step_targets(
            unrolls.reward, unrolls.terminated, unrolls.truncated, self.gamma, self.n_step,
            self.reward_clip,
        )  # fmt: skip
        valid = np.asarray(unrolls.valid)[:, : self.horizon]
        slots = (self.next_slot + np.arange(batch)) % self.slots
        for k, v in unrolls.obs.items():
            if k in self.stacks:
                self.stacks[k].write(slots, np.asarray(v))
            else:
                self.obs[k][slots] = v
        for k, v in unrolls.extras.items():
            self.extras[k][slots] = v
        self.action[slots] = unrolls.action
        self.reward[slots], self.discount[slots], self.boot[slots] = total, discount, boot
        self._valid[slots] = valid
        self._store(unrolls, slots)
        self.next_slot = int((self.next_slot + batch) % self.slots)
        self.filled = min(self.filled + batch, self.slots)
        added = int(valid.sum())
        self.inserted += added
        return added

    def _store(self, unrolls, slots: np.ndarray) -> None:
        """The new slots' priorities: each valid step's the largest seen so far."""
        del unrolls
        leaves = (slots[:, None] * self.horizon + np.arange(self.horizon)).reshape(-1)
        first = self.max_priority if self.prioritized else 1.0
        self.tree.set(leaves, np.where(self._valid[slots].reshape(-1), first, 0.0))

    def sample(self, count: int, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """(leaf indices int64 [count], importance weights float32 [count]): stratified draws in
        proportion to the priorities, and their weights (N P(i)) ** -beta (the loss divides them
        by the sgd batch's largest, over every device; all 0 while nothing can be sampled)."""
        total = self.tree.total
        if total <= 0:  # nothing valid yet: weight 0 learns nothing, and the update goes on
            return np.zeros(count, np.int64), np.zeros(count, np.float32)
        edges = (np.arange(count) + self._rng.random(count)) * (total / count)
        idx = self.tree.find(edges)
        self.sampled += int(count) * self.steps_per_sample
        if not self.prioritized:
            return idx, np.ones(count, np.float32)
        probs = self.tree.values(idx) / total
        weight = np.power(np.maximum(self.size * probs, 1e-12), -float(beta))
        return idx, weight.astype(np.float32)

    def batch(self, idx: np.ndarray, weight: np.ndarray, version: int) -> Transitions:
        """What the loss reads from the samples at idx with their importance weights: their
        transitions (`version`, the learner's policy version, is for SequenceReplay)."""
        del version
        return self.transitions(idx, weight)

    def transitions(self, idx: np.ndarray, weight: np.ndarray) -> Transitions:
        """The transitions at leaf indices idx [...] (any shape), with their weights."""
        slot, t = np.divmod(np.asarray(idx, np.int64), self.horizon)
        boot = self.boot[slot, t]

        def observations(step):
            obs = {k: v[slot, step] for k, v in self.obs.items()}
            obs.update({k: s.read(slot, step) for k, s in self.stacks.items()})
            return obs

        return Transitions(
            obs=observations(t),
            extras={k: v[slot, t] for k, v in self.extras.items()},
            action=self.action[slot, t].astype(np.int32),
            reward=self.reward[slot, t],
            discount=self.discount[slot, t],
            next_obs=observations(boot),
            next_extras={k: v[slot, boot] for k, v in self.extras.items()},
            weight=np.asarray(weight, np.float32),
        )

    def update(self, idx: np.ndarray, priority: np.ndarray) -> None:
        """Writes the learner's new priorities (|TD error| or loss per sample) back."""
        if not self.prioritized:
            return
        idx = np.asarray(idx, np.int64).reshape(-1)
        priority = np.asarray(priority, np.float64).reshape(-1)
        priority = np.where(np.isfinite(priority), priority, 0.0)
        value = np.power(priority + self.eps, self.exponent)
        # A step of priority 0 (invalid: never sampled, or the weight-0 draws of an empty
        # replay) stays at 0. (Sampling and this write-back happen within one update, so no
        # slot is overwritten in between.)
        live = self.tree.values(idx) > 0
        self.tree.set(idx[live], value[live])
        self.max_priority = max(self.max_priority, float(value.max(initial=0.0)))

    # Checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every array and counter, for save_replay (np.savez)."""
        state = {f"obs/{k}": v for k, v in self.obs.items()}
        for k, s in self.stacks.items():
            state.update({f"frames/{k}": s.frames, f"restart/{k}": s.restart})
            state.update({f"whole/{k}/{slot}": a for slot, a in s.whole.items()})
        state.update({f"extras/{k}": v for k, v in self.extras.items()})
        state.update(
            action=self.action, reward=self.reward, discount=self.discount, boot=self.boot,
            valid=self._valid, tree=self.tree._tree,
            counters=np.array([self.next_slot, self.filled, self.inserted, self.sampled]),
            max_priority=np.array(self.max_priority),
        )  # fmt: skip
        return state

    def load_state_dict(self, state) -> None:
        """Restores `state_dict`'s arrays (ValueError where a shape differs)."""
        mine = {k: v for k, v in self.state_dict().items() if not k.startswith("whole/")}
        saved = {k for k in state.keys() if not k.startswith("whole/")}
        if set(mine) != saved:
            raise ValueError(f"the saved replay holds {sorted(state.keys())}, not {sorted(mine)}")
        for key, have in mine.items():
            got = np.asarray(state[key])
            if got.shape != have.shape or got.dtype != have.dtype:
                raise ValueError(
                    f"the saved replay's {key} is {got.dtype}{list(got.shape)}, this config's "
                    f"{have.dtype}{list(have.shape)} (replay capacity, unroll_length or the env "
                    "changed)"
                )
        for k in self.obs:
            self.obs[k][...] = state[f"obs/{k}"]
        for k, s in self.stacks.items():
            s.frames[...], s.restart[...] = state[f"frames/{k}"], state[f"restart/{k}"]
            prefix = f"whole/{k}/"
            s.whole = {
                int(n[len(prefix) :]): np.asarray(state[n]) for n in state if n.startswith(prefix)
            }
        for k in self.extras:
            self.extras[k][...] = state[f"extras/{k}"]
        self.action[...], self.reward[...] = state["action"], state["reward"]
        self.discount[...], self.boot[...] = state["discount"], state["boot"]
        self._valid[...], self.tree._tree[...] = state["valid"], state["tree"]
        self.next_slot, self.filled, self.inserted, self.sampled = (
            int(x) for x in state["counters"]
        )
        self.max_priority = float(state["max_priority"])


class SequenceReplay(Replay):
    """Unrolls [T+1] stored as R2D2's sequences (seedlike.algos.r2d2): each slot also keeps the
    recurrent state before its step 0 and the policy version that acted there, and is sampled
    whole, by one priority per slot. The n-step targets are computed at insert as for
    transitions; `burn_in` first steps of a slot only refresh the state, so a slot with no valid
    step after them is never sampled.
    """

    def __init__(self, example, capacity: int, n_step: int, gamma: float, burn_in: int, **kwargs):
        super().__init__(example, capacity, n_step, gamma, **kwargs)
        self.burn_in = int(burn_in)
        lead = np.ndim(example.reward) - 1
        self.first = np.zeros((self.slots, self.horizon + 1), bool)
        self.carry = [
            np.zeros((self.slots, *np.shape(c)[lead:]), np.asarray(c).dtype)
            for c in _leaves(example.carry)
        ]
        self.version = np.zeros(self.slots, np.int64)
        self._carry_def = example.carry
        self.steps_per_sample = self.horizon  # a sequence counts its steps in `sampled`
        self.tree = SumTree(self.slots)

    @property
    def size(self) -> int:
        """Sequences the replay can sample now."""
        return int(self._learnable().sum())

    def _learnable(self) -> np.ndarray:
        return self._valid[:, self.burn_in :].any(axis=1)

    def _store(self, unrolls, slots: np.ndarray) -> None:
        """The new slots' states, first flags, versions and priorities (the largest seen so far
        for a slot with a step to learn from)."""
        self.first[slots] = unrolls.first
        for stored, c in zip(self.carry, _leaves(unrolls.carry)):
            stored[slots] = c
        self.version[slots] = np.asarray(unrolls.policy_version)[:, 0]
        first = self.max_priority if self.prioritized else 1.0
        self.tree.set(slots, np.where(self._learnable()[slots], first, 0.0))

    def batch(self, idx: np.ndarray, weight: np.ndarray, version: int) -> Sequences:
        """The sequences at idx (Replay.batch)."""
        return self.sequences(idx, weight, version)

    def sequences(self, idx: np.ndarray, weight: np.ndarray, version: int) -> Sequences:
        """The sequences at slots idx [...] (any shape), their weights, and the age of their
        stored states against the learner's policy `version`."""
        slot = np.asarray(idx, np.int64)
        t = np.arange(self.horizon + 1)
        obs = {k: v[slot] for k, v in self.obs.items()}
        grid = np.broadcast_to(t, (*slot.shape, t.size))
        obs.update({k: s.read(slot[..., None] + 0 * grid, grid) for k, s in self.stacks.items()})
        learn = self._valid[slot] & (np.arange(self.horizon) >= self.burn_in)
        carry = _unflatten(self._carry_def, [c[slot] for c in self.carry])
        return Sequences(
            obs=obs,
            extras={k: v[slot] for k, v in self.extras.items()},
            action=self.action[slot].astype(np.int32),
            first=self.first[slot],
            carry=carry,
            reward=self.reward[slot],
            discount=self.discount[slot],
            boot=self.boot[slot],
            learn=learn,
            weight=np.asarray(weight, np.float32),
            age=(int(version) - self.version[slot]).astype(np.float32),
        )

    def state_dict(self) -> dict[str, np.ndarray]:
        state = super().state_dict()
        state.update({f"carry/{i}": c for i, c in enumerate(self.carry)})
        state.update(first=self.first, version=self.version)
        return state

    def load_state_dict(self, state) -> None:
        super().load_state_dict(state)
        for i, c in enumerate(self.carry):
            c[...] = state[f"carry/{i}"]
        self.first[...], self.version[...] = state["first"], state["version"]


def _leaves(tree) -> list:
    import jax

    return jax.tree.leaves(tree)


def _unflatten(like, leaves):
    import jax

    return jax.tree.unflatten(jax.tree.structure(like), leaves)
