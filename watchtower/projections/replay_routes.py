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

from collections.abc import Callable
from typing import Any

from faust.web import Request, Response

from watchtower.http import params
from watchtower.projections.replay_tables import digest_of, parse_page_query, replay_page
from watchtower.projections.routing import peer_shares
from watchtower.protocol.errors import NotReadyError, ReplayNotFoundError
from watchtower.protocol.replay.status import ReplayView, replay_status_json, view_from_dict, view_to_dict

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
        page_ = replay_page(await all_views(projection), **query)
        # `next` is the next page's `prev`: a replay id, so a decimal string (json_ints).
        return web.json({**page_, "next": None if page_["next"] is None else str(page_["next"])})


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
        for share in await peer_shares(projection, covered, LOCAL_REPLAYS_PATH, "the replays"):
            fresh = set(share["partitions"]) - covered
            covered |= fresh
            # Only the partitions not seen yet: in a rebalance two workers may both claim one.
            views += [v for v in map(view_from_dict, share["views"])
                      if projection.partition_of(v.stream_id) in fresh]
    if covered != set(range(projection.partitions)):
        raise NotReadyError("the replays are spread over every partition and some partition does not serve right "
                            "now (a rebalance or a worker catching up); retry in a moment")
    return views
