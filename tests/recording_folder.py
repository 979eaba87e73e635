"""A `Folder` that keeps every quarantine decision, for tests that compare two folds' refusals."""

from __future__ import annotations

from typing import Any

from watchtower.projections.fold import Folder


class RecordingFolder(Folder):
    """A Folder that also keeps every quarantine decision (the summary keeps only the last few)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decisions: list[tuple[str, int, str]] = []

    def quarantined(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.decisions.append((topic, offset, reason))
        super().quarantined(topic, partition, offset, reason)
