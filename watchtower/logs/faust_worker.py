"""`QuietWorker`: the Faust worker of the API process and the ingestion scheduler, without the
console chatter Faust writes beside its logs.

Faust's worker draws a terminal spinner for every log record at WARNING and above. Its first
frame writes a cursor-hide escape (``ESC[?25l``) to stdout even when stdout is a file, so a log
file gets a line that starts with it; once started, the worker prints `` OK ^``. Neither is a log
line. This worker has no spinner (it logs "Ready" through logging instead), and, with ``quiet``
(``faust --quiet``, `watchtower.logs.faust_worker_argv` under JSON logs), prints nothing itself.
"""

from __future__ import annotations

from typing import Any

import faust


class QuietWorker(faust.Worker):
    """A `faust.Worker` without the terminal spinner (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None
