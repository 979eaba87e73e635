"""Audit records on the ``keymgr`` topic: who decrypted or fetched keys of which stream and epochs.

One `schemas.keymgr_records.AuditRecord` per operation, keyed by stream id. Never key material,
never plaintext, never an envelope. Written idempotently (acks=all) and not waited for
(`topics.record_writer`): an audit record that the broker has not acknowledged yet is flushed when
the service stops.
"""

from __future__ import annotations

import logging
import time

from watchtower.schemas.keymgr_records import KEYMGR_RECORD_VERSION, AuditRecord, encode_keymgr_record
from watchtower.topics.catalogue import topic_name
from watchtower.topics.record_writer import RecordWriter

log = logging.getLogger("watchtower.keymgr.audit")


class KafkaAudit:
    """Writes audit records to the deployment's ``keymgr`` topic."""

    def __init__(self, bootstrap: str, prefix: str | None) -> None:
        self.topic = topic_name("keymgr", prefix)
        self._writer = RecordWriter(bootstrap)

    def record(self, action: str, *, stream_id: str, caller: str, account: str, key_epochs: list[int],
               account_key_id: int | None = None) -> None:
        value = encode_keymgr_record(AuditRecord(
            v=KEYMGR_RECORD_VERSION, action=action, stream_id=stream_id, caller=caller, account=account,
            key_epochs=list(key_epochs), at_ms=int(time.time() * 1000), account_key_id=account_key_id,
        ))
        self._writer.write(self.topic, value, key=stream_id.encode())

    def close(self) -> None:
        left = self._writer.flush(10)
        if left:
            log.error("%d audit records were not acknowledged before the key manager stopped", left)
