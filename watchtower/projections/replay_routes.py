"""The replay reads on the projection HTTP API (ICRC-77 ``replay_status`` / ``get_replays``).

A replay lives on its stream's partition, but a read names it by replay id (or lists them all), so
no single partition answers it. As ``/v1/cby/supply`` does, the worker asked takes its own serving
partitions' replays and asks the other workers of the group for theirs
(``GET /v1/replays/local``, marked so it is never forwarded again); unless the shares cover every
partition the read is NOT_READY, never a partial answer. A lookup found in this worker's own share
needs nobody else.

- ``GET /v1/replays/{replay_id}``: the ICRC-77 ReplayStatus (`replay_status.replay_status_json`),
  404 REPLAY_NOT_FOUND;
- ``GET /v1/replays?requester=&stream_id=&status=&prev=&take=``: ordered by replay id, ``prev``
  exclusive, ``take`` 1..500: ``{"replays": [...], "next": id | null}``;
- ``GET /v1/replays/digest``: ``{"digest", "replays"}`` over every partition, comparable with the
  offline rebuild (`rebuild.rebuild_replay_digest`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from faust.web import Request, Response
from yarl import URL

from watchtower.projections import http_params as params
from watchtower.projections.replay_tables import digest_of, parse_page_query, replay_page
from watchtower.projections.routing import FORWARD_TIMEOUT, ROUTED_HEADER
from watchtower.protocol.errors import NotReadyError, ReplayNotFoundError
from watchtower.protocol.replay_status import ReplayView, replay_status_json, view_from_dict, view_to_dict

LOCAL_REPLAYS_PATH = "/v1/replays/local"


def install(projection: Any, page: Callable[..., Any]) -> None:
    """Register the replay reads with the service's `page` decorator (error bodies). The fixed paths
    come before ``/v1/replays/{replay_id}``, which would otherwise match them."""

    @page("/v1/replays/local")  # LOCAL_REPLAYS_PATH
    async def local_replays(web: Any, _request: Request) -> Response:
        partitions, views = local_share(projection)
        return web.json({"partitions": partitions, "views": [view_to_dict(v) for v in views]})

    @page("/v1/replays/digest")
    async def replays_digest(web: Any, _request: Request) -> Response:
        return web.json(digest_of(await all_views(projection)))

    @page("/v1/replays/{replay_id}")
    async def replay_status(web: Any, _request: Request, replay_id: str) -> Response:
        rid = params.int_text(replay_id, "replay_id", minimum=1)
        partitions, mine = local_share(projection)
        found = next((v for v in mine if v.replay_id == rid), None)
        if found is None and len(partitions) < projection.partitions:
            found = next((v for v in await all_views(projection) if v.replay_id == rid), None)
        if found is None:
            raise ReplayNotFoundError(f"no replay has id {rid}; list your replays with `watchtower replay list "
                                      "--mine` (a replay registered a moment ago may take a moment to show)")
        return web.json(replay_status_json(found))

    @page("/v1/replays")
    async def replays(web: Any, request: Request) -> Response:
        query = parse_page_query(request.query)
        return web.json(replay_page(await all_views(projection), **query))


def local_share(projection: Any) -> tuple[list[int], list[ReplayView]]:
    """This worker's serving partitions and their replays (read at once: no await in between)."""
    partitions = [p for p in range(projection.partitions) if projection.owned.serves(p)]
    return partitions, list(projection.replays.values())


async def all_views(projection: Any) -> list[ReplayView]:
    """Every partition's replays: this worker's share plus the other workers'; NOT_READY unless the
    shares cover every partition."""
    partitions, views = local_share(projection)
    covered = set(partitions)
    if len(covered) < projection.partitions:
        for share in await _remote_shares(projection, covered):
            fresh = set(share["partitions"]) - covered
            covered |= fresh
            # Only the partitions not seen yet: in a rebalance two workers may both claim one.
            views += [v for v in map(view_from_dict, share["views"])
                      if projection.partition_of(v.stream_id) in fresh]
    if covered != set(range(projection.partitions)):
        raise NotReadyError("the replays are spread over every partition and some partition does not serve right "
                            "now (a rebalance or a worker catching up); retry in a moment")
    return views


async def _remote_shares(projection: Any, covered: set[int]) -> list[dict[str, Any]]:
    """The other workers' shares, from the owners the group's assignment names (marked: no forwarding)."""
    app = projection.app
    own = URL(str(app.conf.canonical_url))
    urls = [URL(str(url)) for url, topics in app.assignor.external_topics_metadata().items()
            if set(topics.get(projection.t_events, ())) - covered]
    urls = [u for u in urls if (u.host, u.port) != (own.host, own.port)]

    async def one(url: URL) -> dict[str, Any]:
        try:
            async with app.http_client.get(url.with_path(LOCAL_REPLAYS_PATH), headers={ROUTED_HEADER: "1"},
                                           timeout=FORWARD_TIMEOUT) as response:
                if response.status != 200:
                    raise NotReadyError(f"worker {url} could not give its share of the replays; retry")
                share: dict[str, Any] = await response.json()
                return share
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise NotReadyError(f"worker {url} did not answer for its share of the replays "
                                f"({type(exc).__name__}); retry in a moment") from None
    return list(await asyncio.gather(*(one(u) for u in urls)))
