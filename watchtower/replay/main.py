"""``python -m watchtower.replay.main BOOTSTRAP WORKER_ID [PREFIX]``: one replay worker process.

Settings from the environment: ``WATCHTOWER_REPLAY_SLICE`` (records of ``messages`` per slice,
default 1000), ``WATCHTOWER_REPLAY_RATE`` (records/s per worker, 0 = no cap),
``WATCHTOWER_SPARK_REPLAY_THRESHOLD`` (plan size handed to Spark, default 250,000, 0 = never),
``WATCHTOWER_KAFKA_CREDENTIALS`` (see `topics.connection`), ``WATCHTOWER_HEALTH_FILE``,
``WATCHTOWER_LOG_LEVEL`` (default WARNING). Exits with code 3 when fenced, for the supervisor to
restart it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from watchtower.replay.worker import EXIT_FENCED, FencedError, ReplayWorker


def main(argv: list[str]) -> int:
    level = os.environ.get("WATCHTOWER_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    bootstrap, worker_id, *rest = argv
    worker = ReplayWorker(bootstrap, worker_id, prefix=rest[0] if rest else None)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    try:
        worker.run()
    except FencedError as exc:
        logging.getLogger("watchtower.replay").error("%s; exiting for a restart", exc)
        return EXIT_FENCED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
