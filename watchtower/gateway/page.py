"""The feed pages: ``GET /feeds`` (the registry's feeds) and ``GET /feeds/{feed_id}`` (one feed, live).

Static HTML and JavaScript from ``static/``; the browser does the rest against the same origin's
API: the listing reads ``/v1/feeds``, a feed page reads its listing and the stream's key history
(``/v1/streams/{id}/keys``) and follows ``/v1/feeds/{id}/events`` (`watchtower.gateway.sse`). Every
message is verified in the browser by ``static/signing.mjs`` (the canonical signing bytes rebuilt
as `watchtower.protocol.signing` builds them, SHA-256 and ed25519 through WebCrypto) and shown as
"verified" or "INVALID"; the server is not trusted for that.

On a confidential feed, a member may load its X25519 private key into the page (it stays in the
page's memory, never sent anywhere): ``static/keyload.mjs`` opens the keyloads that hold the
member and unmasks their messages in the browser (docs/feed-page.md). Its libsodium comes from
``static/vendor/`` (pinned, with licenses: ``static/vendor/README.md``), served from the exact list
`VENDOR_FILES` under ``/ui/vendor/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from aiohttp import web

from watchtower.http import params

STATIC: Final = Path(__file__).with_name("static")
ASSET_PREFIX: Final = "/ui/"
_TYPES: Final = {".html": "text/html", ".mjs": "text/javascript", ".css": "text/css"}
_ASSET_NAME: Final = re.compile(r"^[a-z][a-z0-9-]*\.(mjs|css)$")
#: The vendored library files the page imports, by name: nothing else under static/vendor/ is served.
VENDOR_FILES: Final = frozenset({"libsodium.mjs", "libsodium-wrappers.mjs"})
_HEADERS: Final = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def _file(name: str) -> web.Response:
    path = STATIC / name  # `name` is a fixed page name or one checked by `asset` / `vendor_asset`
    return web.Response(body=path.read_bytes(), content_type=_TYPES[path.suffix], charset="utf-8",
                        headers=_HEADERS)


async def feeds_page(_request: web.Request) -> web.Response:
    return _file("feeds.html")


async def feed_page(request: web.Request) -> web.Response:
    params.int_text(request.match_info["feed_id"], "feed_id", minimum=1)  # INVALID_ARGUMENT as JSON
    return _file("feed.html")


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if not _ASSET_NAME.match(name) or not (STATIC / name).is_file():  # a fixed set: no path ever leaves static/
        raise web.HTTPNotFound()
    return _file(name)


async def vendor_asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in VENDOR_FILES:  # an exact list: no other name, and so no path, is ever served
        raise web.HTTPNotFound()
    return _file(f"vendor/{name}")


def mount_live_feeds(app: web.Application, bootstrap: str, *, prefix: str | None, api_url: str) -> None:
    """The SSE route (`watchtower.gateway.sse`, reading `api_url` for catch-up) and the pages, on `app`."""
    from watchtower.gateway.sse import SseHub

    SseHub(bootstrap, prefix=prefix, api_url=api_url).mount(app)
    mount(app)


def mount(app: web.Application) -> None:
    """Add the pages and their assets to `app` (before it starts)."""
    app.router.add_get("/feeds", feeds_page, name="feeds_page")
    app.router.add_get("/feeds/{feed_id}", feed_page, name="feed_page")
    app.router.add_get(ASSET_PREFIX + "{name}", asset, name="feed_page_asset")
    app.router.add_get(ASSET_PREFIX + "vendor/{name}", vendor_asset, name="feed_page_vendor_asset")
