"""Failures of the run directory's storage (a full disk, a directory that cannot be written).

They are not the run's fault and retrying inside the process does not help, so the learner says
what failed in one line and exits: `StorageError` carries that line. The process must then end
without waiting for its threads (orbax leaves threads behind that wait forever for a save that
failed), which learner.py does.
"""

from __future__ import annotations


class StorageError(Exception):
    """Writing the run directory failed; the message says what, where and why."""


def reason(error: BaseException) -> str:
    """The operating system's words for the innermost OSError behind `error` (orbax and logging
    wrap them), e.g. "No space left on device: '/runs/x/checkpoints/7.orbax-checkpoint-tmp'"."""
    seen, cause = set(), error
    found = None
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError):
            found = cause
        cause = cause.__cause__ or cause.__context__
    if found is None:
        return f"{type(error).__name__}: {error}"
    why = found.strerror or str(found)
    return f"{why}: {found.filename!r}" if found.filename else why
