"""``python -m watchtower.gateway.main BOOTSTRAP PORT [PREFIX [NAME]]``: one command gateway process.

NAME (default ``gateway``) is what its health calls it (``worker``), and lets a supervisor tell its
process apart by its command line (`watchtower up` runs ``gateway-g1`` as ``g1``).

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
    prefix = argv[2] if len(argv) > 2 and argv[2] else None  # None: WATCHTOWER_TOPIC_PREFIX, default wt
    name = argv[3] if len(argv) > 3 else "gateway"
    setup_logging("gateway")
    gc_pauses.install()
    start_metrics("gateway")
    asyncio.run(serve(bootstrap, port, prefix=prefix, bind=os.environ.get("WATCHTOWER_WEB_BIND", "127.0.0.1"),
                      name=name))


if __name__ == "__main__":
    main(sys.argv[1:])
