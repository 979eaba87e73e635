"""``python -m watchtower.delivery.main BOOTSTRAP WORKER_ID [PREFIX]``: one push delivery worker process.

Settings from the environment: ``WATCHTOWER_PUSH_BACKLOG`` (messages kept per stream, default
10,000, never more than the stream's ring capacity), ``WATCHTOWER_PUSH_BACKLOG_BYTES`` (bytes of
record values kept per stream, default 64 MiB), ``WATCHTOWER_KAFKA_CREDENTIALS`` (see
`topics.connection`), ``WATCHTOWER_HEALTH_FILE``, ``WATCHTOWER_LOG_LEVEL`` (default WARNING).
Exits with code 3 when fenced, for the supervisor to restart it.
"""

from __future__ import annotations

import sys

from watchtower.delivery.worker import DeliveryWorker
from watchtower.workers.tx_worker import worker_main


def main(argv: list[str]) -> int:
    return worker_main(argv, __doc__ or "", lambda bootstrap, worker_id, prefix: DeliveryWorker(
        bootstrap, worker_id, prefix=prefix), "watchtower.delivery")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
