"""Find secrets (master seeds, epoch content keys) wherever a deployment writes bytes.

A secret is looked for in every form it could take on the way out of a process: the raw bytes,
lower- and upper-case hex, standard and URL-safe base64 at each of the three byte alignments it can
have inside a longer base64 text (so a key embedded in a larger encoded blob is still found), the
Python ``repr`` of the bytes (what a careless log line or traceback prints) and the list of its
byte values (a JSON array).

Places scanned: every record of every topic the broker lists (keys, values, header names and
values; read uncommitted, so records of aborted transactions count too), every file under a
directory tree (service logs, state files) and any text (a test's captured output).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from waiting import wait_until

from watchtower.topics.connection import kafka_config


@dataclass(frozen=True)
class Finding:
    secret: str  # the label of the secret (never the secret itself)
    form: str  # which encoding of it was found
    where: str  # topic/partition/offset/field, or a file path

    def __str__(self) -> str:
        return f"{self.secret} ({self.form}) in {self.where}"


def _b64_cores(secret: bytes, encode: object) -> list[bytes]:
    """The part of base64(…secret…) fixed by `secret` alone, for each alignment 0..2 of its first byte."""
    cores = []
    for lead in range(3):
        text = encode(bytes(lead) + secret + bytes(3))  # type: ignore[operator]
        first_full_group = -(-lead // 3)  # groups touched by the lead bytes are not the secret's alone
        last_full_group = (lead + len(secret)) // 3
        core = text[first_full_group * 4:last_full_group * 4]
        if len(core) >= 16:  # shorter cores would match by chance
            cores.append(core)
    return cores


def forms(secret: bytes) -> dict[str, list[bytes]]:
    """Every encoding of `secret` the scan looks for, by name."""
    return {
        "raw": [secret],
        "hex": [secret.hex().encode(), secret.hex().upper().encode()],
        "base64": _b64_cores(secret, base64.b64encode),
        "base64url": _b64_cores(secret, base64.urlsafe_b64encode),
        "repr": [repr(secret)[2:-1].encode()],
        "int list": [str(list(secret)).encode(), ",".join(map(str, secret)).encode()],
    }


class LeakScanner:
    """Holds the labelled secrets; each scan returns the findings (empty: nothing leaked)."""

    def __init__(self, secrets: Mapping[str, bytes]) -> None:
        if not secrets:
            raise ValueError("nothing to look for: a scan without secrets proves nothing")
        for label, secret in secrets.items():
            if len(secret) < 16:
                raise ValueError(f"{label}: secrets shorter than 16 bytes would match by chance")
        self.needles: list[tuple[str, str, bytes]] = []
        for label, secret in secrets.items():
            seen: set[bytes] = set()
            for form, encoded in forms(secret).items():
                for needle in encoded:
                    if needle not in seen:  # URL-safe base64 often equals the standard one
                        seen.add(needle)
                        self.needles.append((label, form, needle))

    def scan_bytes(self, blob: bytes, where: str) -> list[Finding]:
        return [Finding(label, form, where) for label, form, needle in self.needles if needle in blob]

    def scan_text(self, text: str, where: str) -> list[Finding]:
        return self.scan_bytes(text.encode("utf-8", "surrogateescape"), where)

    def scan_tree(self, root: Path) -> tuple[int, list[Finding]]:
        """(files scanned, findings) for every regular file under `root`."""
        files, found = 0, []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            files += 1
            found += self.scan_bytes(path.read_bytes(), str(path))
        return files, found

    def scan_topics(self, bootstrap: str, topics: Iterable[str] | None = None,
                    timeout: float = 300.0) -> tuple[int, list[Finding]]:
        """(records scanned, findings) over every partition of `topics` (default: all the broker
        lists, internal ones included) from the start to today's end, aborted records included.

        One consumer reads every partition at once (a partition at a time would cost a fetch
        wait per partition, and a whole test session's broker holds thousands)."""
        consumer = Consumer({**kafka_config(bootstrap), "group.id": f"wt-leak-scan-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                             "auto.offset.reset": "earliest", "log_level": 0})
        records, found = 0, []
        try:
            metadata = consumer.list_topics(timeout=30)
            names = sorted(metadata.topics) if topics is None else list(topics)
            ends: dict[tuple[str, int], int] = {}
            starts = []
            for topic in names:
                for partition in sorted(metadata.topics[topic].partitions):
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                    if high > low:
                        ends[(topic, partition)] = high
                        starts.append(TopicPartition(topic, partition, low))
            consumer.assign(starts)

            # Transaction markers occupy offsets but are never delivered: a partition is done when
            # the consumer's position (not the last record's offset) reaches today's high watermark.
            def at_the_ends() -> bool:
                nonlocal records, found
                if not ends:
                    return True
                for msg in consumer.consume(1000, 0.5):
                    if msg.error():
                        continue
                    records += 1
                    found += self._scan_record(msg)
                done = [tp for tp in consumer.position([TopicPartition(t, p) for t, p in ends])
                        if tp.offset >= ends[(tp.topic, tp.partition)]]
                for tp in done:
                    del ends[(tp.topic, tp.partition)]
                return not ends

            wait_until(lambda: f"the scan to reach the end of {sorted(ends)[:5]} ...", at_the_ends,
                       timeout_s=timeout, every_s=0)
        finally:
            consumer.close()
        return records, found

    def _scan_record(self, msg: Any) -> list[Finding]:
        where = f"{msg.topic()}/{msg.partition()}@{msg.offset()}"
        found = self.scan_bytes(_as_bytes(msg.key()), where + " key")
        found += self.scan_bytes(_as_bytes(msg.value()), where + " value")
        for name, value in list(msg.headers() or []):
            label = _as_bytes(name).decode(errors="replace")
            found += self.scan_bytes(_as_bytes(name) + b"=" + _as_bytes(value), f"{where} header {label}")
        return found


def _as_bytes(value: object) -> bytes:
    if value is None:
        return b""
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)  # type: ignore[call-overload]
