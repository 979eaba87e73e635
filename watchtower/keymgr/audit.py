"""Audit records on the ``keymgr`` topic: who decrypted or fetched keys of which stream and epochs.

One JSON record per operation, keyed by stream id:
``{"v": 1, "action", "stream_id", "caller", "account", "key_epochs", "at_ms", ...}``. Never key
material, never plaintext, never an envelope. Produced idempotently (acks=all) and not waited
for: an audit record that the broker has not acknowledged yet is flushed when the service stops.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from confluent_kafka import Producer

from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config

log = logging.getLogger("watchtower.keymgr.audit")


class KafkaAudit:
    """Writes audit records to the deployment's ``keymgr`` topic."""

    def __init__(self, bootstrap: str, prefix: str | None) -> None:
        self.topic = topic_name("keymgr", prefix)
        self._producer = Producer(
            kafka_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3})
        )

    def record(self, action: str, **fields: Any) -> None:
        value = {"v": 1, "action": action, "at_ms": int(time.time() * 1000), **fields}
        key = str(fields.get("stream_id", "")).encode()
        try:
            self._producer.produce(self.topic, key=key, value=json.dumps(value, sort_keys=True).encode())
        except BufferError:
            self._producer.flush(5)
            self._producer.produce(self.topic, key=key, value=json.dumps(value, sort_keys=True).encode())
        self._producer.poll(0)

    def close(self) -> None:
        left = self._producer.flush(10)
        if left:
            log.error("%d audit records were not acknowledged before the key manager stopped", left)
