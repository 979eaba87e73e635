"""The key manager's HTTP API (aiohttp): the routes of the shared interface §7.

- ``POST /v1/keymgr/encrypt``, ``/decrypt``, ``/epoch-keys``: body ``{"command": <signed command>}``;
- ``GET /v1/keymgr/public-key`` → ``{"public_key_hex"}`` (the receipt key); ``GET /healthz`` (also
  ``/v1/health``, which `watchtower status` asks every HTTP service); ``GET /openapi.json``, the
  document of all of them (`keymgr.openapi`).

Every refusal is ``{"error": {"code", "message", "details"?}}`` with the spec code and the API's
status for it; bodies are bounded in size (`MAX_BODY_BYTES`, PAYLOAD_TOO_LARGE beyond, refused from
the declared length at once) and in time (`web_server.bounded_body`, 408 TIMEOUT). The blocking work
(catch-up, vault writes, crypto) runs in a thread so one slow request never stalls the others.
Nothing here logs a request body.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from watchtower.http import params
from watchtower.http import server as web_server
from watchtower.http.errors import error_body, http_status
from watchtower.keymgr.openapi import OPENAPI
from watchtower.keymgr.service import KeyManager
from watchtower.protocol.errors import InvalidArgumentError, PayloadTooLargeError, WatchtowerError
from watchtower.protocol.json_ints import json_safe_ints
from watchtower.protocol.signed_command import Method

log = logging.getLogger("watchtower.keymgr.http")

#: A 16,344-byte plaintext is ~33 KiB of hex inside the signed command; nothing legitimate is bigger.
MAX_BODY_BYTES: Final = 96 * 1024


def _error(err: WatchtowerError, status: int | None = None) -> web.Response:
    return web.json_response(error_body(err), status=status or http_status(err.code))


@web.middleware
async def _json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except WatchtowerError as err:
        return _error(err)
    except web.HTTPRequestEntityTooLarge:
        return _error(PayloadTooLargeError(f"the request body is over {MAX_BODY_BYTES} bytes"), 413)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(
            InvalidArgumentError(f"the request was refused ({exc.reason}); see the key manager's routes"), exc.status
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.error("unexpected %s answering %s %s", type(exc).__name__, request.method, request.path)
        return _error(WatchtowerError(f"the key manager failed ({type(exc).__name__}); retry"), 500)


def _route(
    manager: KeyManager, method: Method, op: Callable[[Any], dict[str, Any]]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        payload = params.json_text(await request.read(), what="the request body",
                                   usage='send {"command": <a signed command>}')

        def work() -> dict[str, Any]:
            return op(manager.authenticate(payload, method))

        return web.json_response(json_safe_ints(await asyncio.to_thread(work)))

    return handle


def build_app(manager: KeyManager) -> web.Application:
    app = web.Application(middlewares=[_json_errors, web_server.bounded_body(MAX_BODY_BYTES)],
                          client_max_size=MAX_BODY_BYTES)

    async def public_key(_request: web.Request) -> web.Response:
        return web.json_response({"public_key_hex": manager.public_key.hex()})

    async def health(_request: web.Request) -> web.Response:
        # "ready" as the projections' /v1/health, so `watchtower status` reads both the same way.
        return web.json_response(manager.health())

    app.router.add_post("/v1/keymgr/encrypt", _route(manager, Method.STREAM_ENCRYPT, manager.encrypt))
    app.router.add_post("/v1/keymgr/decrypt", _route(manager, Method.STREAM_DECRYPT, manager.decrypt))
    app.router.add_post("/v1/keymgr/epoch-keys", _route(manager, Method.FETCH_EPOCH_KEYS, manager.epoch_keys))
    app.router.add_get("/v1/keymgr/public-key", public_key)
    async def openapi(_request: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    app.router.add_get("/healthz", health)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/v1/health", health)
    return app


async def serve_app(app: web.Application, host: str, port: int, stop: asyncio.Event) -> None:
    """Serve `app` on ``host:port`` until `stop` is set.

    The connections use the projections' `JsonErrorRequestHandler`, so a request aiohttp cannot
    parse (an over-long request line or header) is answered with spec JSON INVALID_ARGUMENT, as
    the API and the gateway answer it, never with aiohttp's text/plain 400 and a logged traceback.
    """
    runner = web_server.JsonErrorRunner(app, access_log=None, shutdown_timeout=2)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        await stop.wait()
    finally:
        await runner.cleanup()
