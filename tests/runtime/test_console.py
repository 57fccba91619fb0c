"""Console log lines: time and message, a word for warnings and errors."""

import logging
import time

from seedlike.runtime import console


def record(level: int, message: str, *args) -> logging.LogRecord:
    r = logging.LogRecord("seedlike", level, "learner.py", 1, message, args, None)
    r.created = time.mktime((2026, 11, 29, 4, 27, 58, 0, 0, -1)) + 0.4
    return r


def test_a_log_line_is_its_time_and_message():
    f = console.ShortFormatter()
    assert f.format(record(logging.INFO, "checkpoint %d saved", 3)) == "04:27:58 checkpoint 3 saved"
    assert f.format(record(logging.WARNING, "slow")) == "04:27:58 warning: slow"
    assert f.format(record(logging.ERROR, "gone")) == "04:27:58 error: gone"


def test_setup_puts_it_on_absl_and_keeps_the_tpu_note_off():
    from absl import logging as absl_logging

    console.setup()
    handler = absl_logging.get_absl_handler()
    assert isinstance(handler.python_handler.formatter, console.ShortFormatter)
    assert logging.getLogger("jax._src.xla_bridge").getEffectiveLevel() == logging.WARNING
