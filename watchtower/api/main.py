"""``python -m watchtower.api.main BOOTSTRAP WORKER_ID PORT [PREFIX]``: one API worker.

The one place that composes the HTTP API: a projection worker (`watchtower.projections`: folds
the log, answers reads), with the command gateway (``POST /v1/commands``, unless
``WATCHTOWER_GATEWAY=0``: then a separate gateway process takes the commands) and the live feeds
(SSE and the feed pages, `watchtower.gateway`) mounted on its HTTP server, and its Prometheus
metrics (`watchtower.metrics`) on a port of their own. Neither side imports the other; what they
share lives in `watchtower.http`.
"""

from __future__ import annotations

import os
import sys

from watchtower.gateway.page import mount_live_feeds
from watchtower.gateway.routes import CommandGateway
from watchtower.logs import faust_logging_config, faust_worker_argv
from watchtower.metrics import gc_pauses
from watchtower.metrics import http as http_metrics
from watchtower.metrics import projection as projection_metrics
from watchtower.metrics.exposition import start_metrics
from watchtower.projections.service import DEFAULT_API_PORT, Projection


def assemble(bootstrap: str, worker_id: str, *, prefix: str | None = None, port: int = DEFAULT_API_PORT,
             datadir: str | None = None, gateway: bool | None = None) -> Projection:
    """A projection worker with the gateway (`gateway`; default: unless ``WATCHTOWER_GATEWAY=0``)
    and the live feeds mounted on its HTTP server."""
    projection = Projection(bootstrap, worker_id, prefix=prefix, port=port, datadir=datadir)
    http_metrics.install(projection.web_app)
    if gateway if gateway is not None else os.environ.get("WATCHTOWER_GATEWAY", "1") != "0":
        CommandGateway(bootstrap, prefix=prefix).mount(projection.web_app)
    # The live feeds' catch-up reads go through this API's own URL.
    mount_live_feeds(projection.web_app, bootstrap, prefix=prefix,
                     api_url=os.environ.get("WATCHTOWER_CANONICAL_URL", f"http://127.0.0.1:{port}"))
    return projection


def main(argv: list[str]) -> None:
    bootstrap, worker_id, port = argv[0], argv[1], int(argv[2])
    prefix = argv[3] if len(argv) > 3 else None
    gc_pauses.install()
    projection = assemble(bootstrap, worker_id, prefix=prefix, port=port,
                          datadir=os.environ.get("WATCHTOWER_FAUST_DATADIR"))
    start_metrics(projection_metrics.SERVICE, [projection_metrics.collector(),
                                               projection_metrics.PayloadCacheMeter(projection.cache)])
    # The Faust worker replaces the root handlers when it starts: with JSON logs chosen it installs
    # the same JSON lines as every other service (watchtower.logs).
    logging_config = faust_logging_config(projection_metrics.SERVICE, worker_id)
    if logging_config is not None:
        projection.app.conf.logging_config = logging_config
    # Faust's App.main() parses sys.argv like the `faust` command.
    sys.argv = faust_worker_argv(projection.app, "--loglevel", faust_loglevel(), "--web-port", str(port), "--web-host",
                                 os.environ.get("WATCHTOWER_WEB_HOST", "127.0.0.1"))  # no banner, no spinner
    projection.app.main()


#: `WATCHTOWER_LOG_LEVEL` names as Faust's ``--loglevel`` spells them.
_FAUST_LEVELS = {"CRITICAL": "crit", "ERROR": "error", "WARNING": "warn", "WARN": "warn", "INFO": "info",
                 "DEBUG": "debug"}


def faust_loglevel() -> str:
    """The API worker's Faust log level: ``WATCHTOWER_LOG_LEVEL`` (e.g. ``INFO``, to see its
    assignments and catch-ups), ``warn`` when unset or not a level."""
    return _FAUST_LEVELS.get(os.environ.get("WATCHTOWER_LOG_LEVEL", "").strip().upper(), "warn")


if __name__ == "__main__":
    main(sys.argv[1:])
