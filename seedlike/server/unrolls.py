"""Where steps are recorded: buffers of T+1 steps, one per seat at a time, that become learner
batches by reference.

Every open seat holds one buffer (its current unroll) and a position in it. A step of the seat on
which the policy ran is written at (buffer, position); the position then advances, and when it
reaches T+1 the unroll is complete: the seat gets a fresh buffer whose step 0 repeats the old
buffer's step T (consecutive unrolls share their boundary step; with an `overlap` of O, steps
0..O repeat the old buffer's steps T-O..T, as R2D2's overlapping sequences), and the old buffer
goes to the learner (seedlike.server.trajectory_store) or back to the free list. `place` does
this for a whole inference batch in a few vectorized operations, before the batch is
dispatched, so the places a step's rows go to are known when its actions go back: a stream front
end (seedlike.rpc.frontend) writes the next step's observations straight there, and nobody copies
them again.

Layout. Buffer b lives in chunk b // K at slot b % K; each chunk holds, for every observation and
extras key, an array [K, T+1, *spec.shape], in shared memory when front ends write them. Chunks
are only ever added, never moved. A step is addressed by its flat index `b * (T+1) + t`. The
small fields of a step (action, log-probability, value, flags, reward) are the trajectory store's.

Threads: `open`, `close` and `place` are the gather thread's; `release`, `read`, `write`,
`gather` and `slabs` happen on the recorder and learner threads, on buffers no other thread writes
at the time; the free list is locked.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from seedlike.types import EnvSpec

ALIGN = 64
# Aim for chunks of about this many bytes of observations. A chunk costs address space, not
# memory, until its buffers are written (the lowest free ids are taken first), and the fewer the
# chunks, the more often a step's rows all go to one of them: one copy (PoolView.write).
CHUNK_BYTES = 1 << 30


class Chunk(NamedTuple):
    """K buffers' observations: arrays name -> [K, T+1, *shape] ("obs/<key>", "extras/<key>"),
    over one mapping, and the same as [K * (T+1), *shape] (`steps`: step b * (T+1) + t of the
    chunk); `fd` is the shared-memory descriptor (None for private memory)."""

    arrays: dict
    steps: dict
    fd: int | None
    size: int


def aligned_empty(shape, dtype) -> np.ndarray:
    """np.empty aligned to 64 bytes: JAX's CPU backend takes such an array without copying it
    (an ordinary numpy array, 16-byte aligned, is copied on every transfer)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    offset = -raw.ctypes.data % ALIGN
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def chunk_layout(spec: EnvSpec, steps: int, k: int) -> tuple[dict, int]:
    """name -> (offset, dtype, shape) of one chunk's arrays, and its size in bytes. Every array
    starts on a 64-byte boundary, so a view of whole steps can be handed to JAX without a copy."""
    entries = [(f"obs/{n}", s) for n, s in spec.observation.items()]
    entries += [(f"extras/{n}", s) for n, s in spec.extras.items()]
    out, offset = {}, 0
    for name, s in entries:
        offset = -(-offset // ALIGN) * ALIGN
        shape = (k, steps, *s.shape)
        out[name] = (offset, s.dtype, shape)
        offset += int(np.prod(shape, dtype=np.int64)) * s.dtype.itemsize
    return out, max(offset, 1)


def map_chunk(layout: dict, size: int, fd: int | None) -> Chunk:
    """The chunk's arrays over shared memory `fd` (its size set already), or over fresh private
    memory when fd is None."""
    buffer = mmap.mmap(fd if fd is not None else -1, size)
    arrays = {
        name: np.ndarray(shape, dtype, buffer, offset)
        for name, (offset, dtype, shape) in layout.items()
    }
    steps = {name: a.reshape(a.shape[0] * a.shape[1], *a.shape[2:]) for name, a in arrays.items()}
    return Chunk(arrays, steps, fd, size)


class Placement(NamedTuple):
    """Where one inference batch's steps go (flat step indices b * (T+1) + t).

    Layout (n rows, m of them ran, k unrolls completed):
      pending: int64 [n]  each row's seat's last recorded step, whose outcome the row reports
                          (-1: the seat has recorded nothing since it opened)
      target:  int64 [m]  where each ran row's step is recorded
      done_row, done_seat, done_old, done_new: int64 [k]  for each unroll this batch
                          completed: the ran row (index into target) that was its step T, its
                          seat, the complete buffer and the fresh one whose step `overlap`
                          repeats step T (and steps before it, the old one's before T)
      next:    int64 [n]  each row's seat's next step after this batch (for front ends; None
                          where the pool is not shared)
    """

    pending: np.ndarray
    target: np.ndarray
    done_row: np.ndarray
    done_seat: np.ndarray
    done_old: np.ndarray
    done_new: np.ndarray
    next: np.ndarray


class Geometry(NamedTuple):
    """What a writer in another process needs to address steps: T+1, buffers per chunk, and each
    chunk's layout and size."""

    steps: int
    k: int
    layout: dict
    chunk_bytes: int

    @classmethod
    def of(cls, spec: EnvSpec, horizon: int) -> Geometry:
        steps = int(horizon) + 1
        row_bytes = sum(
            int(np.prod(s.shape, dtype=np.int64)) * s.dtype.itemsize
            for s in (*spec.observation.values(), *spec.extras.values())
        )
        k = int(np.clip(CHUNK_BYTES // max(row_bytes * steps, 1), 8, 4096))
        return cls(steps, k, *chunk_layout(spec, steps, k))


class PoolView:
    """The observations of a pool's buffers, chunk by chunk: what both the learner process and a
    front end (over the same shared memory) read and write."""

    def __init__(self, geometry: Geometry):
        self.geometry = geometry
        self.steps, self.k = geometry.steps, geometry.k
        self.layout, self.chunk_bytes = geometry.layout, geometry.chunk_bytes
        self.chunks: list[Chunk] = []

    def attach(self, index: int, fd: int) -> None:
        """Maps chunk `index` (a front end, from the learner process's CHUNK message)."""
        if index != len(self.chunks):
            raise ValueError(f"chunk {index} arrived after {len(self.chunks)} chunks")
        self.chunks.append(map_chunk(self.layout, self.chunk_bytes, fd))
        os.close(fd)  # the mapping stays

    def write_rows(self, flat: np.ndarray, obs: dict, extras: dict) -> None:
        """Writes steps [m] of every observation and extras array at flat step indices [m]."""
        for key, values in obs.items():
            self.write(f"obs/{key}", flat, values)
        for key, values in extras.items():
            self.write(f"extras/{key}", flat, values)

    def write(self, name: str, flat: np.ndarray, values: np.ndarray) -> None:
        """Writes steps `values` [m, ...] of array `name` at flat step indices [m]."""
        chunk, local = np.divmod(flat, self.k * self.steps)
        if chunk.size and chunk[0] == chunk[-1] and (chunk == chunk[0]).all():
            self.chunks[int(chunk[0])].steps[name][local] = values
            return
        # Runs of consecutive steps in one chunk, each written from a view of `values`: a step
        # is copied once (values[mask] would copy it first).
        cuts = (np.flatnonzero(chunk[1:] != chunk[:-1]) + 1).tolist()
        for a, b in zip([0, *cuts], [*cuts, chunk.size]):
            self.chunks[int(chunk[a])].steps[name][local[a:b]] = values[a:b]

    def copy_step(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Copies whole steps (every observation and extras array) from flat [k] to flat [k]."""
        for name in self.layout:
            self.write(name, dst, self.read(name, src))

    def read(self, name: str, flat: np.ndarray) -> np.ndarray:
        """Steps [m, ...] of array `name` at flat step indices [m] (a copy)."""
        chunk, local = np.divmod(flat, self.k * self.steps)
        out = None
        for c in np.unique(chunk):
            mine = chunk == c
            part = self.chunks[int(c)].steps[name][local[mine]]
            if out is None:
                out = np.empty((flat.shape[0], *part.shape[1:]), part.dtype)
            out[mine] = part
        return out

    def slabs(self, name: str, buffers: np.ndarray) -> list[np.ndarray]:
        """Whole buffers [B] of array `name`, each a view [T+1, ...] of where it lives."""
        chunk, slot = np.divmod(buffers, self.k)
        return [self.chunks[c].arrays[name][s] for c, s in zip(chunk.tolist(), slot.tolist())]

    def gather(self, name: str, buffers: np.ndarray, out: np.ndarray) -> None:
        """Whole buffers [B] of array `name` into out [B, T+1, ...] (the learner's batch)."""
        chunk, slot = np.divmod(buffers, self.k)
        for c in np.unique(chunk):
            mine = np.flatnonzero(chunk == c)
            source = self.chunks[int(c)].arrays[name]
            if mine.size == buffers.size:
                np.take(source, slot, axis=0, out=out, mode="clip")
            else:
                out[mine] = source[slot[mine]]


class UnrollPool(PoolView):
    """Args:
    spec: what a step holds (observation and extras keys).
    horizon: T; a buffer holds T+1 steps.
    shared: keep the observations in shared memory (front ends write them).
    on_chunk: called with (index, Chunk) whenever a chunk is added (front ends map it), under the
      pool's lock.
    overlap: steps besides the boundary step that consecutive unrolls of a seat share (0 to
      T-1): a completed unroll's steps T-overlap..T are its successor's steps 0..overlap.
    """

    def __init__(
        self,
        spec: EnvSpec,
        horizon: int,
        shared: bool = False,
        on_chunk: Callable[[int, Chunk], None] | None = None,
        overlap: int = 0,
    ):
        super().__init__(Geometry.of(spec, horizon))
        self.spec = spec
        self.horizon = int(horizon)
        if not 0 <= overlap < self.horizon:
            raise ValueError(f"overlap={overlap} must lie in [0, {self.horizon - 1}] (T - 1)")
        self.overlap = int(overlap)
        self.shared = shared
        self.on_chunk = on_chunk
        self._lock = threading.Lock()
        self._free: list[int] = []
        self.capacity = 0
        # Per seat: its buffer (-1: none) and the position of its next step.
        self.seat_buffer = np.zeros(0, np.int64)
        self.seat_pos = np.zeros(0, np.int64)

    # Buffers -------------------------------------------------------------------------------------

    def take(self, n: int) -> np.ndarray:
        """n free buffers (the pool grows by chunks as needed)."""
        with self._lock:
            while len(self._free) < n:
                self._add_chunk()
            taken = self._free[-n:] if n else []
            del self._free[len(self._free) - n :]
        return np.asarray(taken, np.int64)

    def release(self, buffers) -> None:
        with self._lock:
            self._free.extend(np.asarray(buffers).reshape(-1).tolist())

    @property
    def free(self) -> int:
        with self._lock:
            return len(self._free)

    def _add_chunk(self) -> None:
        fd = None
        if self.shared:
            fd = os.memfd_create("seedlike-unrolls", os.MFD_CLOEXEC)
            os.ftruncate(fd, self.chunk_bytes)
        chunk = map_chunk(self.layout, self.chunk_bytes, fd)
        index = len(self.chunks)
        self.chunks.append(chunk)
        first = index * self.k
        self._free.extend(range(first + self.k - 1, first - 1, -1))  # lowest ids taken first
        self.capacity += self.k
        if self.on_chunk is not None:
            self.on_chunk(index, chunk)

    # Seats ----------------------------------------------------------------------------------------

    def open(self, seats: np.ndarray) -> None:
        """Gives new seats a buffer each; they record from its step 0."""
        if seats.size and seats.max() >= self.seat_buffer.shape[0]:
            grow = (
                max(int(seats.max()) + 1, 2 * self.seat_buffer.shape[0]) - self.seat_buffer.shape[0]
            )
            self.seat_buffer = np.concatenate([self.seat_buffer, np.full(grow, -1, np.int64)])
            self.seat_pos = np.concatenate([self.seat_pos, np.zeros(grow, np.int64)])
        self.seat_buffer[seats] = self.take(seats.size)
        self.seat_pos[seats] = 0

    def close(self, seats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Takes closed seats' buffers away; returns them and the steps recorded in them (the
        recorder releases the buffers once it has recorded everything before the close)."""
        buffers, steps = self.seat_buffer[seats].copy(), self.seat_pos[seats].copy()
        self.seat_buffer[seats] = -1
        return buffers, steps

    def place(self, seats: np.ndarray, ran: np.ndarray) -> Placement:
        """Where an inference batch's steps go; advances the seats. `seats` [n] appear once each;
        `ran` [n]: the policy runs on the row (its step is recorded)."""
        steps = self.steps
        buf, pos = self.seat_buffer[seats], self.seat_pos[seats]
        flat = buf * steps + pos
        pending = np.where(pos > 0, flat - 1, -1)
        if ran.all():  # the common case: every row's step is recorded
            r, target = seats, flat
        else:
            r, target = seats[ran], flat[ran]
        pos = self.seat_pos[r] + 1
        self.seat_pos[r] = pos
        done_row = np.flatnonzero(pos == steps)
        done_seat = r[done_row]
        done_old = self.seat_buffer[done_seat]
        done_new = self.take(done_seat.size) if done_seat.size else done_seat
        if done_seat.size:
            self.seat_buffer[done_seat] = done_new
            self.seat_pos[done_seat] = 1 + self.overlap
        nxt = None
        if self.shared:  # front ends write the next steps in place
            nxt = self.seat_buffer[seats] * steps + self.seat_pos[seats]
        return Placement(pending, target, done_row, done_seat, done_old, done_new, nxt)
