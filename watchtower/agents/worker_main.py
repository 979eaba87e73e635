"""``python -m watchtower.agents.worker_main BOOTSTRAP WORKER_ID [PREFIX]``: one worker process.

Logs go to stderr at WARNING, or at the level named by ``WATCHTOWER_LOG_LEVEL`` (e.g. ``INFO``).
The health file is written where ``WATCHTOWER_HEALTH_FILE`` says (see :mod:`watchtower.agents.health`).
"""

from __future__ import annotations

import logging
import os
import sys

from watchtower.agents.command_processor import run_worker


def main(argv: list[str]) -> None:
    level = os.environ.get("WATCHTOWER_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    bootstrap, worker_id, *rest = argv
    run_worker(bootstrap, worker_id, prefix=rest[0] if rest else None)


if __name__ == "__main__":
    main(sys.argv[1:])
