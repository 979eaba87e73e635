"""``python -m watchtower.workers.worker_main BOOTSTRAP WORKER_ID [PREFIX]``: one worker process.

Logs go to stderr at WARNING, or at the level named by ``WATCHTOWER_LOG_LEVEL`` (e.g. ``INFO``), as
text or as JSON lines (``WATCHTOWER_LOG_FORMAT=json``, `watchtower.logs`).
The health file is written where ``WATCHTOWER_HEALTH_FILE`` says (see :mod:`watchtower.workers.health`).
"""

from __future__ import annotations

import sys

from watchtower.logs import setup_logging
from watchtower.metrics import gc_pauses
from watchtower.workers.command_processor import run_worker


def main(argv: list[str]) -> None:
    bootstrap, worker_id, *rest = argv
    setup_logging("worker", worker_id)
    gc_pauses.install()
    run_worker(bootstrap, worker_id, prefix=rest[0] if rest else None)


if __name__ == "__main__":
    main(sys.argv[1:])
