"""Routing a read to its partition's owner: serve here, forward once, or NOT_READY — never a 500.

The owner is a real aiohttp server; the Faust app is reduced to what the router reads from it
(the assignor's owner map, the canonical URL, an HTTP client).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp import web
from kafka_fixture import free_ports
from yarl import URL

from watchtower.projections import partitions
from watchtower.projections.routing import FORWARD_READ_S, ROUTED_HEADER, route_to_owner

TOPIC = "t.events"


class _Web:
    def bytes(self, body: bytes, *, content_type: str, status: int, headers: Any = None) -> web.Response:
        return web.Response(body=body, content_type=content_type, status=status, headers=headers)

    def json(self, value: Any, *, status: int, headers: Any = None) -> web.Response:
        return web.json_response(value, status=status, headers=headers)


def _app(session: aiohttp.ClientSession, owners: dict[str, dict[str, list[int]]], me: str) -> Any:
    return SimpleNamespace(assignor=SimpleNamespace(external_topics_metadata=lambda: owners),
                           conf=SimpleNamespace(canonical_url=URL(me)), http_client=session)


def _request(path: str, key: str, *, marked: bool = False) -> Any:
    headers = {ROUTED_HEADER: "1"} if marked else {}
    return SimpleNamespace(match_info={"stream_id": key}, headers=headers, method="GET",
                           url=URL(f"http://127.0.0.1:1{path}"))


async def _scenario() -> dict[str, Any]:
    seen: list[dict[str, str]] = []
    release = asyncio.Event()

    async def owner_handler(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        if request.match_info["stream_id"] == "stuck":  # the owner is stopping: it holds the read a while
            # then answers, within the bound a forward without a standby waits
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), FORWARD_READ_S - 2)
        if request.match_info["stream_id"] == "moving":  # the owner is still folding its partition
            return web.json_response({"error": {"code": "NOT_READY", "message": "retry"}}, status=503,
                                     headers={"Retry-After": "1"})
        return web.json_response({"served_by": "owner", "path": request.path})

    owner_port, dead_port, my_port = free_ports(3)
    server = web.Application()
    server.router.add_get("/v1/streams/{stream_id}", owner_handler)
    runner = web.AppRunner(server)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", owner_port).start()
    me, owner, dead = (f"http://127.0.0.1:{p}" for p in (my_port, owner_port, dead_port))
    owners = {me: {TOPIC: [0]}, owner: {TOPIC: [1, 4]}, dead: {TOPIC: [2]}}
    partition_of = {"here": 0, "there": 1, "gone": 2, "nobody": 3, "moving": 4, "stuck": 1}.__getitem__

    async def local(_view: Any, request: Any, **_kw: Any) -> web.Response:
        return web.json_response({"served_by": "me", "key": request.match_info["stream_id"]})

    async def local_standing_in(_view: Any, request: Any, **_kw: Any) -> web.Response:
        return web.json_response({"served_by": "me", "standing_in": partitions._STANDING_IN.get()})

    results: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        handler = route_to_owner(_app(session, owners, me), TOPIC, partition_of, lambda p: p == 0,
                                 match_info="stream_id")(local)
        view = SimpleNamespace(web=_Web())
        for name, key, marked in (("here", "here", False), ("there", "there", False), ("gone", "gone", False),
                                  ("nobody", "nobody", False), ("marked", "there", True),
                                  ("moving", "moving", False)):
            response = await handler(view, _request(f"/v1/streams/{key}", key, marked=marked))
            results[name] = (response.status, json.loads(response.body))
            results[f"{name} retry-after"] = response.headers.get("Retry-After")
        # A caught-up standby of the partition answers for an owner that is away or catching up.
        standby = route_to_owner(_app(session, owners, me), TOPIC, partition_of, lambda p: p == 0,
                                 match_info="stream_id", stands_by=lambda p: p in (2, 4))(local_standing_in)
        for name, key in (("standby gone", "gone"), ("standby moving", "moving"), ("standby there", "there")):
            response = await standby(view, _request(f"/v1/streams/{key}", key))
            results[name] = (response.status, json.loads(response.body))
        # An owner that holds the read (stopping): a standby of its partition answers after the hedge
        # (the owner would answer within the bound a forward without a standby waits).
        hedging = route_to_owner(_app(session, owners, me), TOPIC, partition_of, lambda p: p == 0,
                                 match_info="stream_id", stands_by=lambda p: p == 1)(local_standing_in)
        response = await hedging(view, _request("/v1/streams/stuck", "stuck"))
        results["standby stuck"] = (response.status, json.loads(response.body))
        release.set()
    # A worker that is stopping has closed its HTTP client while its server still answers: a read it
    # would forward is NOT_READY (a standby here stands in), never a 500.
    closed = aiohttp.ClientSession()
    await closed.close()
    stopping = route_to_owner(_app(closed, owners, me), TOPIC, partition_of, lambda p: p == 0,
                              match_info="stream_id")(local)
    response = await stopping(view, _request("/v1/streams/there", "there"))
    results["stopping"] = (response.status, json.loads(response.body), response.headers.get("Retry-After"))
    stopping_standby = route_to_owner(_app(closed, owners, me), TOPIC, partition_of, lambda p: p == 0,
                                      match_info="stream_id", stands_by=lambda p: p == 1)(local_standing_in)
    response = await stopping_standby(view, _request("/v1/streams/there", "there"))
    results["stopping standby"] = (response.status, json.loads(response.body))
    await runner.cleanup()
    results["owner saw"] = seen
    return results


async def _promoted_during_the_forward() -> tuple[int, dict[str, Any]]:
    """This worker holds partition 1 as a caught-up standby. Its owner is going away: it takes the
    forwarded read and drops the connection, and meanwhile the group's rebalance has made this
    worker the owner (no longer a standby)."""
    state = {"owned": {0}, "standby": {1}}

    async def leaving_owner(request: web.Request) -> web.Response:
        state["owned"], state["standby"] = {0, 1}, set()  # the new assignment arrives meanwhile
        assert request.transport is not None
        request.transport.close()  # the owner's process exits before it answers
        return web.Response()

    owner_port, my_port = free_ports(2)
    server = web.Application()
    server.router.add_get("/v1/streams/{stream_id}", leaving_owner)
    runner = web.AppRunner(server)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", owner_port).start()
    me, owner = f"http://127.0.0.1:{my_port}", f"http://127.0.0.1:{owner_port}"
    owners = {me: {TOPIC: [0]}, owner: {TOPIC: [1]}}

    async def local(_view: Any, request: Any, **_kw: Any) -> web.Response:
        return web.json_response({"served_by": "me", "standing_in": partitions._STANDING_IN.get()})

    try:
        async with aiohttp.ClientSession() as session:
            handler = route_to_owner(_app(session, owners, me), TOPIC, {"k": 1}.__getitem__,
                                     lambda p: p in state["owned"], match_info="stream_id",
                                     stands_by=lambda p: p in state["standby"])(local)
            response = await handler(SimpleNamespace(web=_Web()), _request("/v1/streams/k", "k"))
    finally:
        await runner.cleanup()
    return response.status, json.loads(response.body)


def test_a_standby_made_owner_while_its_forward_waits_answers_the_read_itself() -> None:
    """Seen in the deploy tier's rolling restart: the survivor forwarded a read to the stopped owner
    as its standby, the group handed it the partition during the forward, and it answered NOT_READY
    because it was no longer a standby (and neither worker answered that read)."""
    status, body = asyncio.run(_promoted_during_the_forward())
    assert (status, body) == (200, {"served_by": "me", "standing_in": False})


def test_reads_are_served_here_forwarded_once_to_the_owner_or_answered_not_ready() -> None:
    results = asyncio.run(_scenario())
    assert results["here"] == (200, {"served_by": "me", "key": "here"})
    assert results["there"] == (200, {"served_by": "owner", "path": "/v1/streams/there"})
    # The owner got the request marked, so it would never forward it again.
    # "there" and "moving", then both again by the router with a standby: marked every time.
    # ("stuck" too: it is held, and the standby answers meanwhile.)
    assert [h.get(ROUTED_HEADER) for h in results["owner saw"]] == ["1"] * 5
    status, body = results["gone"]  # the owner is not listening (killed, restarting)
    assert (status, body["error"]["code"]) == (503, "NOT_READY")
    assert "retry" in body["error"]["message"]
    assert results["gone retry-after"] == "1"  # and says when to ask again
    # The owner's own NOT_READY (still folding the partition) reaches the client with its Retry-After.
    assert (results["moving"][0], results["moving"][1]["error"]["code"]) == (503, "NOT_READY")
    assert results["moving retry-after"] == "1"
    assert results["here retry-after"] is None
    assert results["standby gone"] == (200, {"served_by": "me", "standing_in": True})
    assert results["standby moving"] == (200, {"served_by": "me", "standing_in": True})
    assert results["standby there"][1] == {"served_by": "owner", "path": "/v1/streams/there"}  # the owner answers
    # Waiting out the owner's bound would have given the owner's late answer instead.
    assert results["standby stuck"] == (200, {"served_by": "me", "standing_in": True})
    assert results["there retry-after"] is None
    # No owner known, or a request already forwarded once: the local handler answers (NOT_READY
    # from its own partition check when it does not serve the key).
    assert results["nobody"] == (200, {"served_by": "me", "key": "nobody"})
    assert results["marked"] == (200, {"served_by": "me", "key": "there"})
    status, body, retry = results["stopping"]
    assert (status, body["error"]["code"], retry) == (503, "NOT_READY", "1")
    assert results["stopping standby"] == (200, {"served_by": "me", "standing_in": True})
