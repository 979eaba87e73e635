"""``python -m watchtower.projections.main BOOTSTRAP WORKER_ID PORT [PREFIX]``: one projection worker."""

from __future__ import annotations

import os
import sys
from typing import Any

from watchtower.metrics import http as http_metrics
from watchtower.metrics import projection as projection_metrics
from watchtower.metrics.exposition import start_metrics
from watchtower.projections.service import Projection


def main(argv: list[str]) -> None:
    bootstrap, worker_id, port = argv[0], argv[1], int(argv[2])
    prefix = argv[3] if len(argv) > 3 else None
    datadir = os.environ.get("WATCHTOWER_FAUST_DATADIR")
    projection = Projection(bootstrap, worker_id, prefix=prefix, port=port, datadir=datadir)
    faust_web: Any = projection.app.web  # Faust's aiohttp driver: its aiohttp app is `web_app`
    http_metrics.install(faust_web.web_app)
    start_metrics(projection_metrics.SERVICE, [projection_metrics.collector(),
                                               projection_metrics.PayloadCacheMeter(projection.cache)])
    # Faust's App.main() parses sys.argv like the `faust` command.
    sys.argv = ["faust", "worker", "--loglevel", "warn", "--web-port", str(port), "--web-host",
                os.environ.get("WATCHTOWER_WEB_HOST", "127.0.0.1")]
    projection.app.main()


if __name__ == "__main__":
    main(sys.argv[1:])
