"""Run the Stream Key Manager: ``python -m watchtower.keymgr.main BOOTSTRAP PORT [PREFIX [INSTANCE]]``.

(`watchtower keymgr serve` is the same with flags.) Reads the KEK (`kek.load_kek`), fences older
instances and loads ``keymgr.state`` (`Vault.open`), folds the events topic up to its current end,
then serves the HTTP API on ``WATCHTOWER_KEYMGR_BIND`` (default 127.0.0.1) until SIGTERM/SIGINT.
A KEK problem exits with status 2 and one line saying what to fix; secrets are never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Final

from aiohttp import web

from watchtower import tracing
from watchtower.keymgr.audit import KafkaAudit
from watchtower.keymgr.follower import EventFollower
from watchtower.keymgr.http import build_app, serve_app
from watchtower.keymgr.kek import KekError, load_kek
from watchtower.keymgr.service import KeyManager
from watchtower.keymgr.vault import Vault
from watchtower.logs import setup_logging
from watchtower.metrics import gc_pauses
from watchtower.metrics import http as http_metrics
from watchtower.metrics import keymgr as keymgr_metrics
from watchtower.metrics.exposition import start_metrics

log = logging.getLogger("watchtower.keymgr")

DEFAULT_PORT: Final = 8472
ENV_BIND: Final = "WATCHTOWER_KEYMGR_BIND"


def serve(bootstrap: str, port: int = DEFAULT_PORT, prefix: str | None = None, bind: str | None = None) -> int:
    """Run until stopped; the process exit status."""
    try:
        kek = load_kek()
    except KekError as exc:
        print(f"watchtower keymgr: {exc}", file=sys.stderr)
        return 2
    vault = Vault(bootstrap, prefix, kek)
    try:
        vault.open()
    except KekError as exc:
        print(f"watchtower keymgr: {exc}", file=sys.stderr)
        return 2
    follower = EventFollower(bootstrap, prefix)
    follower.start()
    audit = KafkaAudit(bootstrap, prefix)
    manager = KeyManager(vault, follower, kek, audit)
    start_metrics("keymgr", [keymgr_metrics.SealedStreams(vault)])
    try:
        follower.catch_up(timeout_s=300)
        log.info("key manager %s serving on %s:%d", kek, bind or "127.0.0.1", port)
        app = build_app(manager)
        http_metrics.install(app)
        tracing.install_http(app)  # a span per request with WATCHTOWER_TRACES (as every hop traces)
        asyncio.run(_serve_until_signalled(app, bind or os.environ.get(ENV_BIND, "127.0.0.1"), port))
    finally:
        follower.stop()
        audit.close()
        vault.close()
    return 0


async def _serve_until_signalled(app: web.Application, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # not on every platform
            loop.add_signal_handler(sig, stop.set)
    await serve_app(app, host, port, stop)


def main(argv: list[str]) -> None:
    setup_logging("keymgr", default_level="INFO")
    gc_pauses.install()
    if len(argv) < 2:
        print("usage: python -m watchtower.keymgr.main BOOTSTRAP PORT [PREFIX [INSTANCE]]", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(argv[0], int(argv[1]), argv[2] if len(argv) > 2 else None))


if __name__ == "__main__":
    main(sys.argv[1:])
