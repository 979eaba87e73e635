"""Route a read to the worker that owns its key's partition, or answer NOT_READY.

The key's partition is the one its writers use (Kafka's murmur2, `topics.partitioning`), and the
owner is the worker the group's latest assignment gave that events partition to (Faust's assignor
publishes every member's URL with the assignment). A worker serves a read itself when it serves
the partition; otherwise it forwards the request once, marked, and the receiver never forwards it
again: during a rebalance two workers' views of the assignment can disagree, and a marked request
cannot bounce between them. The receiver then answers from its own state or NOT_READY.

An owner that cannot be reached (stopped, killed, restarting, not listening yet) makes the read
NOT_READY with ``Retry-After``, never a 500 and never a hang: the owner comes back under its name, or
the group moves its partitions within the session timeout. Meanwhile a worker that holds the
partition as a caught-up standby answers the read itself (`partitions`), as it does when the owner
answers NOT_READY (still folding a partition it just got) or does not answer within
`STANDBY_HEDGE_S` (stopping, hung); and so does a worker that a rebalance made the owner while its
forward waited (the group hands a departed owner's partitions to their standby).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from yarl import URL

from watchtower.http.errors import error_body, http_status
from watchtower.http.server import retry_after
from watchtower.projections.partitions import standing_in
from watchtower.protocol.errors import NotReadyError

log = logging.getLogger("watchtower.projections")

ROUTED_HEADER = "X-Watchtower-Routed"
# A forwarded long poll may wait as long as the owner lets it (`wait_ms`, at most 30 s), any other
# read a few seconds: past that the owner is hung (stopping, paused), and the read answers NOT_READY
# with Retry-After instead of hanging. A worker that is gone (its address unreachable) is given up
# on after `FORWARD_CONNECT_S`.
FORWARD_CONNECT_S = 1.0
FORWARD_READ_S = 10.0
#: When this worker is a caught-up standby of the partition, the owner gets this long instead of
#: `FORWARD_READ_S` before the standby answers: a stopping owner can hold a read for seconds
#: (seen while an API worker restarted: reads waited past their clients' own timeouts), and a
#: healthy one answers a read in milliseconds.
STANDBY_HEDGE_S = 1.0
SHARE_TIMEOUT = aiohttp.ClientTimeout(total=FORWARD_READ_S, sock_connect=FORWARD_CONNECT_S)
_HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})

Handler = Callable[..., Awaitable[Any]]


def owner_url(app: Any, topic: str, partition: int) -> str | None:
    """The URL of the worker the latest assignment gave `topic[partition]` to, if any."""
    for url, topics in app.assignor.external_topics_metadata().items():
        if partition in topics.get(topic, ()):
            return str(url)
    return None


def _same_worker(a: str, b: str) -> bool:
    ua, ub = URL(a), URL(b)
    return (ua.host, ua.port) == (ub.host, ub.port)


def route_to_owner(app: Any, topic: str, partition_of: Callable[[str], int], serves: Callable[[int], bool], *,
                   match_info: str | None = None, exact_key: str | None = None,
                   stands_by: Callable[[int], bool] | None = None) -> Callable[[Handler], Handler]:
    """Decorate a view method: serve here if this worker `serves` the key's partition, else forward.

    The key is the URL segment `match_info`, or `exact_key`; `partition_of(key)` is its partition
    of `topic`. The decorated handler must itself answer NOT_READY when it runs here without
    serving the partition (a forwarded request, no owner known, or the owner is this worker but
    still catching up). When the owner cannot answer (unreachable, or NOT_READY itself) and this
    worker `stands_by` the partition (a caught-up standby), the handler answers here instead, inside
    `partitions.standing_in`.
    """
    if (match_info is None) == (exact_key is None):
        raise TypeError("give exactly one of match_info and exact_key")

    def decorate(handler: Handler) -> Handler:
        async def here(partition: int, view: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            if stands_by is not None and not serves(partition) and stands_by(partition):
                with standing_in():
                    return await handler(view, request, *args, **kwargs)
            return await handler(view, request, *args, **kwargs)

        @functools.wraps(handler)
        async def routed(view: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            key = exact_key if exact_key is not None else request.match_info[match_info]
            partition = partition_of(key)
            if request.headers.get(ROUTED_HEADER) or serves(partition):
                return await here(partition, view, request, *args, **kwargs)
            url = owner_url(app, topic, partition)
            if url is None or _same_worker(url, str(app.conf.canonical_url)):
                return await here(partition, view, request, *args, **kwargs)
            hedged = stands_by is not None and stands_by(partition)
            answer = await forward(app, view, request, url, hedged=hedged)
            # The owner is away or catching up: a caught-up standby here answers, and so does this
            # worker when a rebalance during the forward made it the owner (an owner that left the
            # group hands its partitions to their standby while a forward to it is waiting).
            if answer.status == 503 and (serves(partition) or (stands_by is not None and stands_by(partition))):
                return await here(partition, view, request, *args, **kwargs)
            return answer
        return routed
    return decorate


async def forward(app: Any, view: Any, request: Any, owner: str, *, hedged: bool = False) -> Any:
    """Send `request` to `owner` once (marked) and pass its answer through; NOT_READY if it is away
    (`hedged`: a standby here answers instead, so the owner gets `STANDBY_HEDGE_S`: `forward_timeout`)."""
    target = URL(owner)
    url = request.url.with_scheme(target.scheme or "http").with_host(target.host or "").with_port(target.port)
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
    headers[ROUTED_HEADER] = "1"
    try:
        # A worker that is stopping closes its HTTP client before its server stops answering; its
        # forwards then fail with RuntimeError("Session is closed"): the owner is as unreachable
        # from here as a stopped one (seen while an API worker restarted: 500s for a second).
        if app.http_client.closed:
            raise aiohttp.ClientConnectionError("this worker's HTTP client is closed (stopping)")
        async with app.http_client.request(method=request.method, url=url, headers=headers,
                                           timeout=forward_timeout(request, hedged=hedged)) as response:
            body = await response.read()
            passed = {"Retry-After": response.headers["Retry-After"]} if "Retry-After" in response.headers else None
            return view.web.bytes(body, content_type=response.content_type, status=response.status, headers=passed)
    except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError) as exc:  # RuntimeError: closed meanwhile
        log.info("owner %s did not answer a routed read: %r", owner, exc)
        err = NotReadyError(f"the worker that owns this key's partition ({owner}) did not answer; it may be "
                            "restarting or leaving the group, which then moves its partitions; retry in a moment")
        return view.web.json(error_body(err), status=http_status(err.code), headers=retry_after(err.code))


def forward_timeout(request: Any, *, hedged: bool = False) -> aiohttp.ClientTimeout:
    """How long a forwarded read may take: a long poll its `wait_ms` and `FORWARD_READ_S` more, any
    other read `FORWARD_READ_S` (`STANDBY_HEDGE_S` instead when a standby here can answer:
    `hedged`); connecting at most `FORWARD_CONNECT_S`."""
    query = request.url.query
    try:
        wait_s = max(0, int(query.get("wait_ms", 0))) / 1000 if "min_head" in query else 0.0
    except ValueError:
        wait_s = 0.0  # the owner refuses it: no wait
    more = STANDBY_HEDGE_S if hedged else FORWARD_READ_S
    return aiohttp.ClientTimeout(total=min(wait_s, 30.0) + more, sock_connect=FORWARD_CONNECT_S)


async def peer_shares(projection: Any, covered: set[int], path: str, what: str) -> list[dict[str, Any]]:
    """Every other worker's share of a read that needs all partitions (e.g. the CBY supply, the replay
    list): ``GET path`` on each worker that the group's assignment says owns an ``events`` partition
    not in `covered`, marked routed so it answers for itself. NOT_READY (retry) when one cannot answer.
    `what` names the share in the error (``"the balances"``)."""
    app = projection.app
    own = URL(str(app.conf.canonical_url))
    urls = [URL(str(url)) for url, topics in app.assignor.external_topics_metadata().items()
            if set(topics.get(projection.t_events, ())) - covered]
    urls = [u for u in urls if (u.host, u.port) != (own.host, own.port)]

    async def one(url: URL) -> dict[str, Any]:
        try:
            async with app.http_client.get(url.with_path(path), headers={ROUTED_HEADER: "1"},
                                           timeout=SHARE_TIMEOUT) as response:
                if response.status != 200:
                    raise NotReadyError(f"worker {url} could not give its share of {what}; retry")
                share: dict[str, Any] = await response.json()
                return share
        except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError) as exc:  # RuntimeError: client closed
            raise NotReadyError(f"worker {url} did not answer for its share of {what} ({type(exc).__name__}); "
                                "retry in a moment") from None
    return list(await asyncio.gather(*(one(u) for u in urls)))
