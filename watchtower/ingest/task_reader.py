"""A runner's reader of ``ingest.tasks``: a static member of the runner's own consumer group that
outlives the errors that kill a librdkafka consumer.

The runner's group has one member, and it is static (``group.instance.id``): a runner restarted
after kill -9 takes its partitions back at once instead of waiting out its dead self's session, and
a second process with the same key fences the first (one process per runner identity).

Static membership has a trap. When the group coordinator is away longer than the session (a broker
killed or restarted), librdkafka rejoins under the same instance id with a new member id, the
coordinator fences the old one, and the consumer's next request under it fails with
FENCED_INSTANCE_ID, a *fatal* error: the consumer never delivers a record again
(confluentinc/librdkafka#3437). A runner that only logged it would look alive and run nothing. The
reader therefore replaces a consumer that failed fatally with a new one of the same configuration,
which joins under the instance id again (fencing, in turn, whatever held it). A reader fenced
again within `REJOIN_WINDOW_S` of its last rejoin is most likely sharing its runner key with another
process: it says so and waits longer before each next rejoin (up to `MAX_REJOIN_WAIT_S`), so two
such processes take turns slowly instead of fencing each other in a loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from watchtower.topics.batches import failed_fatally

log = logging.getLogger("watchtower.ingest.runner")

#: The runner's one member of its group (static membership: see the module docstring).
INSTANCE_ID: Final = "runner"
REJOIN_WINDOW_S: Final = 60.0
MAX_REJOIN_WAIT_S: Final = 30.0


class TaskReader:
    """Reads `topic` as the static member of `group`; `consume` returns records only (errors and ends
    of partition are logged or skipped), and replaces the consumer after a fatal error."""

    def __init__(self, config: dict[str, Any], topic: str,
                 factory: Callable[[dict[str, Any]], Consumer] = Consumer) -> None:
        self._config = {**config, "group.instance.id": INSTANCE_ID}
        self._topic = topic
        self._factory = factory
        self.replaced = 0
        self._last_rejoin = float("-inf")
        self._quick_rejoins = 0
        self.consumer = self._subscribe()

    def _subscribe(self) -> Consumer:
        consumer = self._factory(self._config)
        consumer.subscribe([self._topic])
        return consumer

    def consume(self, max_records: int, timeout_s: float) -> list[Message]:
        records = []
        for msg in self.consumer.consume(max_records, timeout_s):
            error = msg.error()
            if error is None:
                records.append(msg)
            elif failed_fatally(error):  # the event carries _FATAL
                self._replace(error)
                return records
            elif error.code() != KafkaError._PARTITION_EOF:
                log.warning("%s: %s", self._topic, error)
        return records

    def _replace(self, error: KafkaError) -> None:
        log.error("%s: the task reader failed (%s); it joins its group again with a new consumer",
                  self._topic, error.str())
        self.close()
        now = time.monotonic()
        self._quick_rejoins = self._quick_rejoins + 1 if now - self._last_rejoin < REJOIN_WINDOW_S else 0
        if self._quick_rejoins:
            wait = min(MAX_REJOIN_WAIT_S, 2.0 ** self._quick_rejoins)
            log.error("%s: fenced again %.0f s after rejoining: another process may run with this runner's key; "
                      "rejoining in %.0f s", self._topic, now - self._last_rejoin, wait)
            time.sleep(wait)
        self.replaced += 1
        self._last_rejoin = time.monotonic()
        self.consumer = self._subscribe()

    def close(self) -> None:
        """Close the consumer (after a fatal error it may refuse: that is logged, not raised)."""
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("%s: closing the task reader failed: %s", self._topic, exc)
