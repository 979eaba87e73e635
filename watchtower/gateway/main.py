"""``python -m watchtower.gateway.main BOOTSTRAP PORT [PREFIX]``: one command gateway process.

Listens on ``WATCHTOWER_WEB_BIND`` (default 127.0.0.1: a gateway accepts commands, and a stack on a
laptop must not serve the network; containers set 0.0.0.0).
"""

from __future__ import annotations

import asyncio
import os
import sys

from watchtower.gateway.server import serve
from watchtower.logs import setup_logging
from watchtower.metrics import gc_pauses
from watchtower.metrics.exposition import start_metrics


def main(argv: list[str]) -> None:
    bootstrap, port = argv[0], int(argv[1])
    prefix = argv[2] if len(argv) > 2 else None  # None: WATCHTOWER_TOPIC_PREFIX, default wt
    setup_logging("gateway")
    gc_pauses.install()
    start_metrics("gateway")
    asyncio.run(serve(bootstrap, port, prefix=prefix, bind=os.environ.get("WATCHTOWER_WEB_BIND", "127.0.0.1")))


if __name__ == "__main__":
    main(sys.argv[1:])
