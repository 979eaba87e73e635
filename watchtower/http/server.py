"""The HTTP server under Faust's web layer: every error is spec JSON, and shutdown is prompt.

Errors reach a client from four places, and each answers ``{"error": {"code", "message"}}``:

1. a handler raising a `WatchtowerError` (the route wrappers in `service` answer it);
2. anything else a handler raises, and aiohttp's own HTTP errors (unknown route, wrong method,
   a body over ``client_max_size``): the `json_errors` middleware;
3. Faust's `WebError`s (no worker owns a key's partition yet): the `JsonView` base class;
4. requests aiohttp refuses while parsing, before any handler or middleware runs (a request line
   or header over 8,190 bytes, bytes that are not HTTP): `JsonErrorRequestHandler.handle_error`.
   aiohttp offers no hook for these (aio-libs/aiohttp#3287), so `install` gives Faust's web driver
   an `AppRunner` whose server builds this handler class.

The same runner cancels a handler whose client disconnected (so an abandoned long poll is
cancelled and its waiter removed) and gives open requests `SHUTDOWN_GRACE_S`, not aiohttp's 60 s,
when the worker stops.

A request body is read by `bounded_body`, the one middleware every server here (the API, the
gateway, the key manager) runs before its handlers: a declared ``Content-Length`` over the
server's limit is refused at once (413 PAYLOAD_TOO_LARGE, nothing read), and the whole body must
arrive within `BODY_DEADLINE_S` (else 408 TIMEOUT). Either refusal closes the connection: the
`JsonErrorRunner`'s connections read and discard what such a client still sends for at most
`LINGER_S` (so it sees the answer instead of a reset), then close. A client that declares a body
and never sends it, or sends it a byte at a time, so holds a connection for at most
`BODY_DEADLINE_S` + `LINGER_S`. aiohttp alone checks the size only as the bytes arrive, puts no
deadline on them, and lingers 10 s.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server
from faust.web import View
from faust.web.exceptions import WebError

from watchtower.http.errors import error_body, http_status
from watchtower.protocol.errors import (
    InvalidArgumentError,
    NotReadyError,
    PayloadTooLargeError,
    RequestTimeoutError,
    WatchtowerError,
)
from watchtower.protocol.json_ints import json_safe_ints

log = logging.getLogger("watchtower.http.server")

#: Largest request body (a signed command is a few KiB; a publish at most ~33 KiB of JSON).
MAX_BODY_BYTES: Final = 256 * 1024
#: How long a stopping worker lets open requests finish (long polls are answered at once first).
SHUTDOWN_GRACE_S: Final = 1.0
#: How long a request's whole body may take to arrive: the largest (256 KiB) needs 26 KiB/s; a
#: signed command, a few KiB, arrives in one round trip. Read at each request, so tests can lower it.
BODY_DEADLINE_S: float = 10.0
#: How long a connection whose request was refused with its body unread keeps reading (and dropping)
#: the body before it closes. Read when a `JsonErrorRunner` is made.
LINGER_S: float = 2.0


#: How long a NOT_READY answer tells the client to wait before asking again (``Retry-After``, seconds).
#: NOT_READY means a partition is in motion (its owner restarting, a rebalance moving it, its new
#: owner folding the log): the read succeeds once that ends, and asking every second finds out soon.
RETRY_AFTER_S: Final = 1


def retry_after(code: str) -> dict[str, str] | None:
    """The ``Retry-After`` header for an error answer with spec code `code` (None: not one to retry)."""
    return {"Retry-After": str(RETRY_AFTER_S)} if code == NotReadyError.CODE else None


def error_response(err: WatchtowerError, status: int | None = None) -> web.Response:
    """The JSON answer for `err` (status from its code unless given; NOT_READY with ``Retry-After``)."""
    return web.Response(text=json.dumps(error_body(err)), status=status or http_status(err.code),
                        content_type="application/json", headers=retry_after(err.code))


def error_for_status(status: int, detail: str) -> WatchtowerError:
    """The spec error for an HTTP-level refusal that came from aiohttp or Faust, not from a rule."""
    if status == 413:
        return PayloadTooLargeError(f"the request body is over {MAX_BODY_BYTES} bytes; a signed command is "
                                    "far smaller, so check what is being sent")
    if status == 404:
        return InvalidArgumentError("no such route; GET /openapi.json lists the routes")
    if status == 405:
        return InvalidArgumentError(f"this route does not take that method ({detail}); see /openapi.json")
    if status in (502, 503, 504):
        return NotReadyError(f"the worker that owns this key could not be reached ({detail}); retry in a moment")
    if status >= 500:
        return WatchtowerError(f"the server failed ({detail}); retry, and report it if it persists")
    return InvalidArgumentError(f"the request was refused ({detail[:200]}); fix it and retry")


@web.middleware
async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Answer every exception a handler lets out as spec JSON (never text/plain, never a traceback)."""
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(error_for_status(exc.status, exc.reason), exc.status)
    except WatchtowerError as err:
        return error_response(err)
    except RecursionError:
        return error_response(InvalidArgumentError("the request nests too deep; send flat JSON"))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return error_response(error_for_status(500, type(exc).__name__), 500)
    return response


def bounded_body(max_bytes: int) -> Middleware:
    """The middleware that reads each request's body before the handler runs, within bounds.

    A ``Content-Length`` over `max_bytes` answers 413 PAYLOAD_TOO_LARGE before a byte is read; a
    body (declared or chunked) that has not wholly arrived within `BODY_DEADLINE_S` answers 408
    TIMEOUT; a chunked body that grows past `max_bytes` answers 413. Each of these closes the
    connection (the unread rest of the body must not be read as the next request). The body read
    here is kept by aiohttp, so the handler's ``read()`` / ``json()`` return it at once. A client
    that disconnects mid-body ends the request with nothing answered.
    """

    @web.middleware
    async def read_body_first(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.body_exists:
            declared = request.content_length
            if declared is not None and declared > max_bytes:
                return _closing(PayloadTooLargeError(
                    f"the request declares a {declared}-byte body; this server takes at most {max_bytes} bytes "
                    "(a signed command is a few KiB), so check what is being sent"), 413)
            try:
                async with asyncio.timeout(BODY_DEADLINE_S):
                    await request.read()
            except TimeoutError:
                return _closing(RequestTimeoutError(
                    f"the request body did not arrive within {BODY_DEADLINE_S:g} s; send the whole body at "
                    "once, and retry"), 408)
            except web.HTTPRequestEntityTooLarge:
                return _closing(PayloadTooLargeError(
                    f"the request body is over {max_bytes} bytes; a signed command is far smaller, so check "
                    "what is being sent"), 413)
            except ConnectionError:  # the client went away mid-body: nobody is left to answer
                log.debug("a client disconnected while sending %s %s", request.method, request.path)
                return _closing(InvalidArgumentError("the request body was cut off; send it again"), 400)
        response: web.StreamResponse = await handler(request)
        return response

    return read_body_first


def _closing(err: WatchtowerError, status: int) -> web.Response:
    response = error_response(err, status)
    response.force_close()
    return response


class JsonView(View):
    """Faust view whose Faust-level errors (e.g. no partition owner yet) are spec JSON too."""

    async def on_request_error(self, request: Any, exc: WebError) -> Any:  # noqa: ARG002 (Faust's signature)
        status = int(exc.code or 500)
        err = error_for_status(status, str(exc.detail))
        return self.json(error_body(err), status=status, headers=retry_after(err.code))


class JsonErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering requests it cannot parse with spec JSON."""

    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: a response is already under way
            raise ConnectionError("response already started; cannot send the error")
        if status >= 500:
            log.error("error answering a request from %s", request.remote, exc_info=exc)
        else:  # hostile or broken clients: one line, no traceback, so they cannot flood the log
            log.debug("refused a request from %s: %s", request.remote, exc)
        if isinstance(exc, LineTooLong):
            err: WatchtowerError = InvalidArgumentError(
                "the request line or a header is over 8190 bytes; shorten the URL (a filter is at most "
                "16 predicates) or the header")
        else:
            err = error_for_status(status, message or type(exc).__name__)
        response = error_response(err, status)
        response.force_close()
        return response


class _JsonErrorServer(Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


class JsonErrorRunner(web.AppRunner):
    """An AppRunner whose connections use `JsonErrorRequestHandler`, lingering at most `LINGER_S`."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        kwargs.setdefault("lingering_time", LINGER_S)
        super().__init__(app, **kwargs)

    async def _make_server(self) -> Server:
        plain = await super()._make_server()
        return _JsonErrorServer(plain.request_handler, request_factory=plain.request_factory,
                                handler_cancellation=plain.handler_cancellation, loop=plain._loop, **plain._kwargs)


def application_options() -> dict[str, Any]:
    """The API's and the gateway's aiohttp application options (Faust's ``web_application_options``):
    the error middleware, the body limit, and the bounded body read (`bounded_body`)."""
    return {"middlewares": [json_errors, bounded_body(MAX_BODY_BYTES)], "client_max_size": MAX_BODY_BYTES}


def install(faust_web: Any, *, on_shutdown: Callable[[], None]) -> None:
    """Give Faust's aiohttp web driver the JSON-error runner (before the worker starts it).

    `on_shutdown` runs first when the server stops (it answers the open long polls).
    """
    async def shutting_down(_app: web.Application) -> None:
        on_shutdown()

    faust_web.web_app.on_shutdown.append(shutting_down)
    faust_web._runner = JsonErrorRunner(faust_web.web_app, access_log=None, handler_cancellation=True,
                                        shutdown_timeout=SHUTDOWN_GRACE_S)


class SafeJsonWeb:
    """A Faust web driver whose ``json()`` writes the body by the rule (every other attribute is the
    driver's): what the projection's route decorator hands each handler."""

    __slots__ = ("_web",)

    def __init__(self, web: Any) -> None:
        self._web = web

    def json(self, value: Any, **kwargs: Any) -> Any:
        return self._web.json(json_safe_ints(value), **kwargs)

    def schema_json(self, value: Any, **kwargs: Any) -> Any:
        """A JSON Schema / OpenAPI document, written as it is (its bounds are schema, not data)."""
        return self._web.json(value, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._web, name)
