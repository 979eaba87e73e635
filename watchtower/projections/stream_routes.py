"""The stream and registry reads on the projection HTTP API.

Each read names its routing key: a stream's reads (head, info, ``get_since`` with its long poll and
page proof, the key history, the subscribers) route by the stream id, the feed registry's by
`REGISTRY_KEY`; the service's `page` decorator routes them to the worker that serves the key's
partition and writes a refusal as its error body. ``/v1/admin/digest`` answers for this worker's
share of the tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faust.web import Request, Response

from watchtower.http import params
from watchtower.protocol.errors import FeedNotFoundError, LimitExceededError
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.stream.views import feeds, head_view, key_at, key_page, stream_subscribers


def install(projection: Any, page: Callable[..., Any]) -> None:
    """Register the stream and registry reads with the service's `page` decorator (routing, error bodies)."""

    @page("/v1/streams/{stream_id}/head", key="stream_id")
    async def get_head(web: Any, _request: Request, stream_id: str) -> Response:
        return web.json(head_view(projection.stream_view(stream_id), projection.heads.get(stream_id),
                                  projection.key_schedule_of(stream_id)))

    @page("/v1/streams/{stream_id}", key="stream_id")
    async def info(web: Any, _request: Request, stream_id: str) -> Response:
        view = projection.stream_view(stream_id)
        body = head_view(view, projection.heads.get(stream_id), projection.key_schedule_of(stream_id))
        body.update(config=view["config"], allowlist=view["allowlist"], subscribers=view["subscribers"],
                    created_at_block=view["created_at_block"], key_epoch=view["last_key_epoch"])
        return web.json(body)

    @page("/v1/streams/{stream_id}/messages", key="stream_id")
    async def get_since(web: Any, request: Request, stream_id: str) -> Response:
        q = request.query
        limit = params.limit_param(q)  # first, as the spec orders the checks
        cursor = params.int_param(q, "cursor", 0)
        filter_spec = params.filter_param(q)
        min_head = params.int_param(q, "min_head", 0)
        wait_ms = params.wait_ms_param(q)
        proof = params.bool_param(q, "proof")
        if min_head:
            await projection.waiters.wait(stream_id, min_head, wait_ms, lambda: projection.head_of(stream_id))
        body = await projection.get_since_bytes(stream_id, cursor, limit, filter_spec, proof)
        return web.bytes(body, content_type="application/json")

    @page("/v1/streams/{stream_id}/keys/at/{sequence}", key="stream_id")
    async def key_at_sequence(web: Any, _request: Request, stream_id: str, sequence: str) -> Response:
        entry = key_at(projection.stream_view(stream_id), params.int_text(sequence, "sequence", minimum=1))
        # publisher_key is the spec's name; public_key_hex is the deprecated one.
        return web.json({**entry.to_dict(), "publisher_key": entry.public_key.hex()})

    @page("/v1/streams/{stream_id}/keys", key="stream_id")
    async def key_history(web: Any, request: Request, stream_id: str) -> Response:
        q = request.query
        page_ = key_page(projection.stream_view(stream_id), params.int_param(q, "from", 1, minimum=1),
                         params.int_param(q, "limit", 100, minimum=1, maximum=500,
                                          error=LimitExceededError))
        return web.json({"entries": [{**e.to_dict(), "publisher_key": e.public_key.hex()} for e in page_.entries],
                         "next_from": page_.next_from_signing_key_id})

    @page("/v1/streams/{stream_id}/subscribers", key="stream_id")
    async def subscribers(web: Any, request: Request, stream_id: str) -> Response:
        active = params.bool_param(request.query, "active_only")
        projection.stream_view(stream_id)
        subs = stream_subscribers(projection.subscriptions.items(), stream_id, active_only=active)
        return web.json({"stream_id": stream_id, "subscribers": subs})

    @page("/v1/feeds", exact=REGISTRY_KEY)
    async def list_feeds(web: Any, request: Request) -> Response:
        return web.json({"feeds": feeds(projection.registry.items(), request.query.get("owner"))})

    @page("/v1/feeds/{feed_id}", exact=REGISTRY_KEY)
    async def get_feed(web: Any, _request: Request, feed_id: str) -> Response:
        entry = projection.registry.get(str(params.int_text(feed_id, "feed_id", minimum=1)))
        if entry is None:
            raise FeedNotFoundError(f"no feed has id {feed_id}; run `watchtower list` to see the feeds")
        return web.json(entry)

    @page("/v1/admin/digest")
    async def digest(web: Any, _request: Request) -> Response:
        return web.json(projection.digest())
