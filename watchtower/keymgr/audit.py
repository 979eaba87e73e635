"""Audit records on the ``keymgr`` topic: who decrypted or fetched keys of which stream and epochs.

One `schemas.keymgr_records.AuditRecord` per operation, keyed by stream id. Never key material,
never plaintext, never an envelope. Produced idempotently (acks=all) and not waited
for: an audit record that the broker has not acknowledged yet is flushed when the service stops.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Producer

from watchtower.schemas.keymgr_records import KEYMGR_RECORD_VERSION, AuditRecord, encode_keymgr_record
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

    def record(self, action: str, *, stream_id: str, caller: str, account: str, key_epochs: list[int],
               account_key_id: int | None = None) -> None:
        value = encode_keymgr_record(AuditRecord(
            v=KEYMGR_RECORD_VERSION, action=action, stream_id=stream_id, caller=caller, account=account,
            key_epochs=list(key_epochs), at_ms=int(time.time() * 1000), account_key_id=account_key_id,
        ))
        key = stream_id.encode()
        try:
            self._producer.produce(self.topic, key=key, value=value)
        except BufferError:
            self._producer.flush(5)
            self._producer.produce(self.topic, key=key, value=value)
        self._producer.poll(0)

    def close(self) -> None:
        left = self._producer.flush(10)
        if left:
            log.error("%d audit records were not acknowledged before the key manager stopped", left)
