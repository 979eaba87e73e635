"""``python -m watchtower.agents.worker_main BOOTSTRAP WORKER_ID [PREFIX]``: one worker process."""

from __future__ import annotations

import logging
import sys

from watchtower.agents.command_processor import run_worker


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    bootstrap, worker_id, *rest = argv
    run_worker(bootstrap, worker_id, prefix=rest[0] if rest else None)


if __name__ == "__main__":
    main(sys.argv[1:])
