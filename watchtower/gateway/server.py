"""The command gateway as a process of its own: ``POST /v1/commands``, ``/v1/health``, ``/openapi.json``,
and the live feeds as Server-Sent Events (``GET /v1/feeds/{id}/events``, `watchtower.gateway.sse`,
reading from the API named by ``WATCHTOWER_API_URL``).

It serves the same HTTP contract as the combined API process (same JSON errors, same body limit,
same prompt shutdown: `watchtower.http.server`), and nothing of the read side. Health is
``ready`` once the command client is connected and the broker answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import signal
from typing import Any, Final

from aiohttp import web

from watchtower.gateway.routes import BATCH_PATH, COMMANDS_PATH, CommandGateway
from watchtower.gateway.sse import EVENTS_PATH, SseHub
from watchtower.http import server as web_server
from watchtower.http.broker_probe import BrokerProbe
from watchtower.http.openapi import OPENAPI
from watchtower.topics.catalogue import topic_name

log = logging.getLogger("watchtower.gateway.server")

DEFAULT_GATEWAY_PORT: Final = 8480


def gateway_openapi() -> dict[str, Any]:
    """The API's OpenAPI document, cut to what a gateway serves (its health has no partitions)."""
    health = copy.deepcopy(OPENAPI["paths"]["/v1/health"])
    schema = health["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    schema["required"] = ["broker", "ok", "ready", "worker"]
    schema["properties"] = {**{k: schema["properties"][k] for k in schema["required"]}, "role": {"type": "string"},
                            "sse": {"type": "object", "description": "open SSE connections, lagged closes, "
                                                                     "the largest connection buffer seen"}}
    return {**OPENAPI, "paths": {COMMANDS_PATH: OPENAPI["paths"][COMMANDS_PATH],
                                 BATCH_PATH: OPENAPI["paths"][BATCH_PATH], "/v1/health": health,
                                 EVENTS_PATH: OPENAPI["paths"][EVENTS_PATH]}}


def build_app(gateway: CommandGateway, *, name: str = "gateway", sse: SseHub | None = None) -> web.Application:
    """An aiohttp app serving `gateway`, the SSE route, its health and its OpenAPI document."""
    app = web.Application(**web_server.application_options())
    probe = BrokerProbe(gateway.bootstrap, topic_name("commands", gateway.prefix))
    gateway.mount(app)
    hub = sse or SseHub(gateway.bootstrap, prefix=gateway.prefix)
    hub.mount(app)

    async def health(_request: web.Request) -> web.Response:
        broker = await probe.status()
        return web.json_response({"ok": True, "ready": gateway.connected and bool(broker["reachable"]),
                                  "worker": name, "role": "gateway", "broker": broker, "sse": hub.stats()})

    async def openapi(_request: web.Request) -> web.Response:
        return web.json_response(gateway_openapi())

    async def connect(_app: web.Application) -> None:
        # Connect in the background: health answers (not ready) while the broker is slow to come up.
        app["connecting"] = asyncio.get_running_loop().run_in_executor(None, _connect, gateway)

    app.router.add_get("/v1/health", health)
    app.router.add_get("/openapi.json", openapi)
    app.on_startup.append(connect)
    return app


def _connect(gateway: CommandGateway) -> None:
    try:
        gateway.client()
    except Exception:  # the first command retries the connection; health says not ready meanwhile
        log.exception("the command gateway could not connect to %s yet", gateway.bootstrap)


async def serve(bootstrap: str, port: int, *, prefix: str | None = None, bind: str = "127.0.0.1",
                name: str = "gateway", stop: asyncio.Event | None = None) -> None:
    """Serve until `stop` is set (or SIGTERM / SIGINT when no event is given)."""
    stop = stop or _stop_on_signals()
    runner = web_server.JsonErrorRunner(build_app(CommandGateway(bootstrap, prefix=prefix), name=name),
                                        access_log=None, handler_cancellation=True,
                                        shutdown_timeout=web_server.SHUTDOWN_GRACE_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, bind, port).start()
        log.warning("command gateway on http://%s:%s", bind, port)
        await stop.wait()
    finally:
        await runner.cleanup()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # not on every platform
            loop.add_signal_handler(sig, stop.set)
    return stop
