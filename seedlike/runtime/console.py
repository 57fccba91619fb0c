"""What the entrypoints print: log lines as their time and message.

absl's prefix (level, date, microseconds, thread id, file:line; about 60 characters) is for
reading a process's log in a debugger, not a console: the message is what a researcher reads.
Warnings and errors keep a word that says so. JAX's note that a machine has no TPU (INFO, from
every process) and PyOpenGL's on its optional accelerator module are left out.
"""

import logging
import time


class ShortFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        level = "" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: "
        text = f"{clock} {level}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup() -> None:
    """Short log lines on the console (absl's handler) and no TPU note; idempotent."""
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().setFormatter(ShortFormatter())
    for noisy in ("jax._src.xla_bridge", "OpenGL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
