"""``watchtower_consumer_group_lag_records{group, topic}``: every worker group's lag, read from Kafka.

A worker's own ``watchtower_consumer_lag_records`` vanishes with the worker: a stopped delivery
or replay worker shows only as a target that is down. This exporter runs in a process that stays
up (the stream worker) and reads, every `EVERY_S` seconds on a daemon thread of its own (never the
worker's serving loop), the committed offsets of the deployment's consumer groups and the ends of
their topics, as `watchtower status` does (`topics.group_lag`: a read_committed count where the raw
lag is small, so commit markers do not count as records). A group's partitions are summed per
topic role (``topic``: ``commands``, ``events``, ...): no partition label, the per-partition view
is `watchtower status --json`'s.

Each reading is bounded by `TIMEOUT_S` per Kafka call; a reading that fails keeps the group's last
values and counts in ``watchtower_consumer_group_lag_read_failures_total{group}``.
``watchtower_consumer_group_lag_age_seconds{group}`` is how old the values shown are, so a stuck
exporter is visible rather than silently reporting an old lag.

Setting: ``WATCHTOWER_GROUP_LAG_EVERY_S`` (seconds between readings, default 5; ``off``: none).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from watchtower.metrics.common import topic_role
from watchtower.topics.group_lag import GroupLagReader

log = logging.getLogger("watchtower.metrics")

ENV_EVERY: Final = "WATCHTOWER_GROUP_LAG_EVERY_S"
EVERY_S: Final = 5.0
TIMEOUT_S: Final = 3.0


def every_s(env: Mapping[str, str] | None = None) -> float | None:
    """The configured interval (None: switched off); a value that is not a positive number is refused."""
    raw = (os.environ if env is None else env).get(ENV_EVERY, str(EVERY_S)).strip().lower()
    if raw in ("off", "none", "-"):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_EVERY}={raw!r} is not a number of seconds or 'off'") from None
    if not value > 0:
        raise ValueError(f"{ENV_EVERY}={raw} must be above 0 (or 'off')")
    return value


class GroupLagExporter(Collector):
    """The last lag reading of `groups` (group -> the topics it consumes); `start` reads on a thread."""

    def __init__(self, bootstrap: str, groups: Mapping[str, Sequence[str]], *,
                 every: float = EVERY_S, timeout_s: float = TIMEOUT_S) -> None:
        self.bootstrap = bootstrap
        self.groups = {g: list(ts) for g, ts in groups.items()}
        self.every = every
        self.timeout_s = timeout_s
        #: group -> ({topic role: lag}, monotonic time read)
        self._rows: dict[str, tuple[dict[str, float], float]] = {}
        self._failures = dict.fromkeys(self.groups, 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Quiet: a failed reading is this module's warning, not librdkafka's line at every failed connect.
        self._reader = GroupLagReader(bootstrap, quiet=True)

    def read_once(self) -> None:
        """Read every group's lag now (the thread's body; tests call it directly)."""
        for group, topics in self.groups.items():
            try:
                seen = self._reader.read(group, topics, self.timeout_s)
            except Exception as exc:  # the cluster did not answer in time: keep the last reading
                self._failures[group] += 1
                log.warning("no lag reading of group %s: %s: %s", group, type(exc).__name__, exc)
                continue
            by_topic = {topic_role(t): 0.0 for t in topics}
            for t, p in seen.partitions:
                by_topic[topic_role(t)] = by_topic.get(topic_role(t), 0.0) + seen.lag_of(t, p)
            self._rows[group] = (by_topic, time.monotonic())

    def start(self) -> threading.Thread:
        """Read now and every `every` seconds on a daemon thread until `stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="group-lag", daemon=True)
            self._thread.start()
        return self._thread

    def stop(self) -> None:
        """End the thread after its current reading (the clients it holds are dropped with it)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.read_once()
            except Exception:  # metrics never stop a service
                log.exception("the group lag reading failed")
            self._stop.wait(self.every)

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily("watchtower_consumer_group_lag_records",
                                "Records a consumer group still has to read after its committed offsets, "
                                "per topic role, read from Kafka.", labels=["group", "topic"])
        age = GaugeMetricFamily("watchtower_consumer_group_lag_age_seconds",
                                "How old the group's lag reading is.", labels=["group"])
        failures = CounterMetricFamily("watchtower_consumer_group_lag_read_failures",
                                       "Lag readings of the group that Kafka did not answer in time.",
                                       labels=["group"])
        now = time.monotonic()
        for group, (by_topic, at) in sorted(self._rows.items()):
            for topic, value in sorted(by_topic.items()):
                lag.add_metric([group, topic], value)
            age.add_metric([group], now - at)
        for group, count in sorted(self._failures.items()):
            failures.add_metric([group], count)
        yield lag
        yield age
        yield failures
