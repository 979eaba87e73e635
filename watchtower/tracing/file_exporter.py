"""`JsonLinesExporter`: spans appended to a file, one ``span.to_json()`` per line.

The SDK has no file exporter; this one is for an operator without a collector and for tests,
which read the file back. One file per process: lines from two processes never interleave.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger("watchtower.tracing")


class JsonLinesExporter(SpanExporter):
    """Appends each exported span to `path` as one line of JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(json.loads(s.to_json()), separators=(",", ":")) + "\n" for s in spans)
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as out:
                out.write(lines)
        except OSError as exc:  # tracing never stops a service
            log.warning("cannot write spans to %s: %s", self.path, exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:  # noqa: ARG002 (every export is written at once)
        return True
