"""librdkafka's own log lines, through Python logging, with repeats held back.

While a broker is away librdkafka logs every failed reconnect (about twenty lines a second per
client), which would bury everything else a worker says during an outage. The worker's clients
send their log lines to the ``watchtower.kafka`` logger, whose filter lets a line through only if
no line of the same shape (digits ignored) passed in the last :data:`REPEAT_WINDOW_S`; the next
one that passes says how many were held back.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Final

REPEAT_WINDOW_S: Final = 30.0
_MAX_SHAPES: Final = 1024
_DIGITS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Passes a record unless one of the same shape passed within ``window_s``."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._monotonic = monotonic
        self._passed: dict[str, tuple[float, int]] = {}  # shape -> (when it last passed, held back since)

    def filter(self, record: logging.LogRecord) -> bool:
        shape = _DIGITS.sub("#", record.getMessage())
        now = self._monotonic()
        last = self._passed.get(shape)
        if last is not None and now - last[0] < self.window_s:
            self._passed[shape] = (last[0], last[1] + 1)
            return False
        if len(self._passed) >= _MAX_SHAPES:
            self._passed.clear()
        held = 0 if last is None else last[1]
        self._passed[shape] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} ({held} similar lines held back)"
            record.args = None
        return True


def kafka_logger() -> logging.Logger:
    """The logger to pass as the ``logger`` setting of a worker's Kafka clients."""
    logger = logging.getLogger("watchtower.kafka")
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
    return logger
