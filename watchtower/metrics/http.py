"""Metrics of an aiohttp server (the read API, the command and SSE gateway, the key manager), by route.

- ``watchtower_http_requests_total{route, status}``: answers, by the pattern of the route that
  matched (``/v1/streams/{stream_id}/messages``: never the stream id itself; ``unmatched`` for a
  path no route has) and the HTTP status. NOT_READY answers are ``status="503"``.
- ``watchtower_http_request_seconds{route}``: time to the answer (a long poll's wait and an SSE
  stream's whole life included).

Which service answered is the scrape target's, so there is no service label. `install` puts the
middleware first (outermost), so it sees the status the client gets after the error middlewares
turned exceptions into JSON answers; installing twice on one app is a no-op (the SSE hub and the
projection's main both install it on the API's app).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Histogram

REQUESTS = Counter("watchtower_http_requests_total", "HTTP answers by route pattern and status.", ["route", "status"])
SECONDS = Histogram("watchtower_http_request_seconds", "Time to answer an HTTP request, by route pattern.",
                    ["route"], buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_MARK = "_watchtower_metrics"


def route_label(request: web.Request) -> str:
    """The pattern of the route that matched `request` (bounded by the routes the app has)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def middleware() -> Any:
    """An aiohttp middleware counting every answer (module docstring)."""
    timers: dict[str, Any] = {}

    @web.middleware
    async def metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            route = route_label(request)
            timer = timers.get(route)
            if timer is None:
                timer = timers[route] = SECONDS.labels(route)
            timer.observe(time.perf_counter() - started)
            REQUESTS.labels(route, str(status)).inc()

    setattr(metrics, _MARK, True)  # a marker on the function object
    return metrics


def install(app: web.Application) -> None:
    """Put the metrics middleware first on `app` (before it starts); once per app."""
    if not any(getattr(m, _MARK, False) for m in app.middlewares):
        app.middlewares.insert(0, middleware())
