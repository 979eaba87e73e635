"""``python -m watchtower.replay.main BOOTSTRAP WORKER_ID [PREFIX]``: one replay worker process.

Settings from the environment: ``WATCHTOWER_REPLAY_SLICE`` (records of ``messages`` per slice,
default 1000), ``WATCHTOWER_REPLAY_RATE`` (records/s per worker, 0 = no cap),
``WATCHTOWER_SPARK_REPLAY_THRESHOLD`` (plan size handed to Spark, default 250,000, 0 = never),
``WATCHTOWER_KAFKA_CREDENTIALS`` (see `topics.connection`), ``WATCHTOWER_HEALTH_FILE``,
``WATCHTOWER_LOG_LEVEL`` (default WARNING). Exits with code 3 when fenced, for the supervisor to
restart it.
"""

from __future__ import annotations

import sys

from watchtower.replay.worker import ReplayWorker
from watchtower.workers.tx_worker import worker_main


def main(argv: list[str]) -> int:
    return worker_main(argv, __doc__ or "", lambda bootstrap, worker_id, prefix: ReplayWorker(
        bootstrap, worker_id, prefix=prefix), "watchtower.replay")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
