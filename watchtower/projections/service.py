"""The projection worker: tables folded from the events and messages topics, and the HTTP API.

One Faust agent consumes ``events`` and ``messages`` (co-partitioned, read_committed) and folds
each record into four tables with the pure `watchtower.protocol.views` functions. Workers split the
partitions between them; each keeps its partitions' share of the tables with the offsets folded
(`partitions`), and brings a partition up to date from the log itself when it is assigned
(`catch_up`). Every GET about a stream is routed to the worker that owns the stream's partition,
and registry reads to the owner of the registry key (`routing`); a worker answers them only for a
partition it serves, else NOT_READY. Commands need no routing: the API produces them to the
commands topic, keyed by stream, and waits for the committed reply.

A record the agent cannot fold is logged and skipped, so a poison record never stops a partition.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from confluent_kafka.admin import AdminClient
from faust.web import Request, Response, View

from watchtower.agents.wire import H_CAPACITY, decode_event
from watchtower.client.transport import CommandClient
from watchtower.projections.catch_up import CatchUp
from watchtower.projections.consumer import ProjectionApp
from watchtower.projections.http_errors import error_body, http_status
from watchtower.projections.log_reader import LogReader, PayloadCache
from watchtower.projections.openapi import OPENAPI
from watchtower.projections.partitions import OwnedPartitions
from watchtower.projections.routing import route_to_owner
from watchtower.protocol.constants import DEFAULT_RING_BUFFER_CAPACITY
from watchtower.protocol.errors import (
    FeedNotFoundError,
    InvalidArgumentError,
    InvalidFilterError,
    RequestTimeoutError,
    WatchtowerError,
)
from watchtower.protocol.filters import compile_filter, parse_filter
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.signed_command import Command
from watchtower.protocol.views import (
    TABLE_NAMES,
    OffsetIndex,
    apply_event,
    apply_message,
    feeds,
    head_view,
    key_at,
    key_page,
    parse_feed_id,
    require_stream,
    since_range,
    stream_subscribers,
    table_digests,
    views_digest,
)
from watchtower.schemas.records import decode_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partitioning import partition_for_key

log = logging.getLogger("watchtower.projections")

DEFAULT_API_PORT = 8470
Handler = Callable[..., Awaitable[Response]]


class Projection:
    """The Faust app plus the in-process state next to its tables (offset indexes, payload cache)."""

    def __init__(self, bootstrap: str, worker_id: str, *, prefix: str | None = None,
                 port: int = DEFAULT_API_PORT, datadir: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.worker_id = worker_id
        self.prefix = prefix
        self.t_events = topic_name("events", prefix)
        self.t_messages = topic_name("messages", prefix)
        self.partitions, replication = _topic_layout(bootstrap, self.t_events)
        # A new generation is a new consumer group: its workers fold the log from scratch.
        generation = os.environ.get("WATCHTOWER_PROJECTION_GENERATION", "1")
        self.app = ProjectionApp(
            f"wt-projections-{topic_name('events', prefix).rsplit('.', 1)[0]}-g{generation}",
            broker=f"kafka://{bootstrap}",
            # With no Faust tables, a standby count above 0 keeps Faust's own assignor, which puts
            # partition p of events and messages on the same worker and publishes the owners' URLs.
            table_standby_replicas=1,
            web_enabled=True,
            # In a container the API listens on all interfaces and other workers reach it by its
            # service name; the defaults suit one machine.
            web_host=os.environ.get("WATCHTOWER_WEB_HOST", "127.0.0.1"),
            web_port=port,
            canonical_url=os.environ.get("WATCHTOWER_CANONICAL_URL", f"http://127.0.0.1:{port}"),
            datadir=datadir or f"/tmp/wt-projections-{worker_id}",  # noqa: S108
            topic_partitions=self.partitions,
            topic_replication_factor=replication,
            consumer_auto_offset_reset="earliest",
            broker_commit_interval=1.0,
            # A killed projection worker's partitions move on after 10 s, not Faust's default 60 s.
            broker_session_timeout=10.0,
            broker_heartbeat_interval=1.0,
            stream_wait_empty=False,
        )
        self.owned = OwnedPartitions((*TABLE_NAMES, "indexes"))
        self.streams = self.owned.table("streams")
        self.heads = self.owned.table("heads")
        self.subscriptions = self.owned.table("subscriptions")
        self.registry = self.owned.table("registry")
        self.tables = {"streams": self.streams, "heads": self.heads,
                       "subscriptions": self.subscriptions, "registry": self.registry}
        self.indexes = self.owned.table("indexes")  # stream -> OffsetIndex of its window
        self._head_waiters: dict[str, list[tuple[int, asyncio.Future[None]]]] = {}
        self.cache = PayloadCache()
        self.reader = LogReader(bootstrap, self.t_messages)
        self.source = self.app.topic(self.t_events, self.t_messages, key_type=bytes, value_type=bytes,
                                     key_serializer="raw", value_serializer="raw")
        self.skipped = 0
        self._client: CommandClient | None = None
        self._client_lock = threading.Lock()
        self.app.agent(self.source, name="project")(self._project)
        self.catch_up = CatchUp(bootstrap, (self.t_events, self.t_messages), self.owned, self._fold)
        self.catch_up.attach(self.app)
        self._routes()

    # ------------------------------------------------------------------ folding the log
    async def _project(self, stream: Any) -> None:
        async for event in stream.events():
            record = event.message
            if not await self.owned.admit(record.topic, record.partition, record.offset):
                continue  # folded already (a redelivery), or no longer this worker's partition
            with self.owned.folding(record.topic, record.partition, record.offset):
                self._fold(record)

    def _fold(self, record: Any) -> None:
        """Fold one committed record, live or while its partition catches up (inside `owned.folding`)."""
        try:
            if record.topic == self.t_messages:
                self._fold_message(record)
            else:
                apply_event(self.tables, decode_event(record.value))
        except Exception as exc:  # a poison record is skipped, never fatal
            self.skipped += 1
            log.error("skipping %s[%s]@%s: %s", record.topic, record.partition, record.offset, exc)

    def _fold_message(self, record: Any) -> None:
        stream_id = bytes(record.key).decode()
        headers = dict(record.headers or [])
        sequence = int(headers["sequence"])
        capacity = int(headers.get(H_CAPACITY) or DEFAULT_RING_BUFFER_CAPACITY)
        index = self.indexes.setdefault(stream_id, OffsetIndex())
        if apply_message(self.heads, index, stream_id, sequence, int(record.offset), capacity):
            self.cache.put(stream_id, sequence, bytes(record.value))
            self._wake(stream_id, sequence)

    def ready(self) -> bool:
        """True once every partition assigned to this worker serves and no rebalance is under way.

        Before that a partition's state may be empty or behind, so reads of its keys answer
        NOT_READY instead (`OwnedPartitions.reading`).
        """
        return not self.app.rebalancing and self.owned.ready()

    def partition_of(self, key: str) -> int:
        """The events partition of a stream id or the registry key (the writers' murmur2)."""
        return partition_for_key(key.encode(), self.partitions)

    # ------------------------------------------------------------------ queries
    def stream_view(self, stream_id: str) -> Mapping[str, Any]:
        return require_stream(self.streams.get(stream_id), stream_id)

    async def wait_for_head(self, stream_id: str, min_head: int, wait_ms: int) -> None:
        """Return once the stream's projected head reaches `min_head`, or after `wait_ms`.

        Waiters sleep on a future that `_fold_message` resolves, so a thousand long polls cost
        nothing until their message arrives.
        """
        head = self.heads.get(stream_id)
        if head is not None and int(head["head"]) >= min_head:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._head_waiters.setdefault(stream_id, [])
        waiters.append((min_head, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), wait_ms / 1000)
        except TimeoutError:
            pass
        finally:
            if not future.done():
                future.cancel()
            remaining = [w for w in self._head_waiters.get(stream_id, []) if w[1] is not future]
            if remaining:
                self._head_waiters[stream_id] = remaining
            else:
                self._head_waiters.pop(stream_id, None)

    def _wake(self, stream_id: str, head: int) -> None:
        waiters = self._head_waiters.get(stream_id)
        if not waiters:
            return
        for target, future in waiters:
            if target <= head and not future.done():
                future.set_result(None)

    async def get_since(self, stream_id: str, cursor: int, limit: int, filter_spec: object) -> dict[str, Any]:
        view = self.stream_view(stream_id)
        match = compile_filter(parse_filter(filter_spec))
        head = self.heads.get(stream_id)
        wanted = since_range(view, head, cursor, limit)
        raws: dict[int, bytes] = {}
        for seq in wanted:
            raw = self.cache.get(stream_id, seq)
            if raw is not None:
                raws[seq] = raw
        missing = [seq for seq in wanted if seq not in raws]
        if missing and head is not None:
            raws.update(await asyncio.get_running_loop().run_in_executor(
                None, self._read_missing, stream_id, missing, head))
        messages = []
        for seq in wanted:
            raw = raws.get(seq)
            if raw is None:
                raise WatchtowerError(f"sequence {seq} of {stream_id!r} could not be read from the log; retry")
            message = decode_message(raw)
            if match(message.headers()):
                messages.append(message.to_json_dict())
        head_seq = 0 if head is None else int(head["head"])
        return {"stream_id": stream_id, "messages": messages, "head": head_seq,
                "floor": head_view(view, head)["floor"],
                "next_cursor": wanted[-1] if len(wanted) else cursor}

    def _read_missing(self, stream_id: str, missing: list[int], head: Mapping[str, Any]) -> dict[int, bytes]:
        partition = partition_for_key(stream_id.encode(), self.partitions)
        index = self.indexes.get(stream_id)
        offsets = [None if index is None else index.offset_of(s) for s in missing]
        if all(o is not None for o in offsets):
            first, last = min(o for o in offsets if o is not None), max(o for o in offsets if o is not None)
        else:
            first, last = int(head["floor_offset"]), int(head["head_offset"])
        found = self.reader.scan(partition, first, last, stream_id, wanted=missing)
        return {seq: raw for seq, (_offset, raw) in found.items()}

    def digest(self) -> dict[str, Any]:
        snapshot = {name: list(self.tables[name].items()) for name in TABLE_NAMES}
        return {"digest": views_digest(snapshot), "counts": {k: len(v) for k, v in snapshot.items()},
                "tables": table_digests(snapshot), "skipped": self.skipped}

    # ------------------------------------------------------------------ commands
    def _command_client(self) -> CommandClient:
        with self._client_lock:
            if self._client is None:
                self._client = CommandClient(self.bootstrap, prefix=self.prefix)
            return self._client

    async def submit(self, cmd: Command, timeout_s: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        client = await loop.run_in_executor(None, self._command_client)
        future = client.submit(cmd)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except TimeoutError:
            raise RequestTimeoutError(
                f"no worker answered within {timeout_s:g}s; check `watchtower status` and retry the same "
                "signed command (a retry is idempotent)") from None

    # ------------------------------------------------------------------ HTTP
    def _routes(self) -> None:
        app = self.app
        projection = self

        def page(path: str, *, key: str | None = None, exact: str | None = None) -> Callable[[Handler], Any]:
            def wrap(fun: Handler) -> Any:
                async def guarded(web: Any, request: Request, **kw: Any) -> Response:
                    try:
                        routing_key = kw[key] if key is not None else exact
                        if routing_key is not None:
                            # Only from a partition that serves here for the whole read.
                            async with projection.owned.reading(projection.partition_of(routing_key)):
                                return await fun(web, request, **kw)
                        return await fun(web, request, **kw)
                    except WatchtowerError as err:
                        return web.json(error_body(err), status=http_status(err.code))
                guarded.__name__ = fun.__name__
                routed: Any = guarded
                if key is not None or exact is not None:
                    routed = route_to_owner(app, projection.t_events, projection.partition_of, projection.owned.serves,
                                            match_info=key, exact_key=exact)(guarded)
                return app.page(path, name=fun.__name__)(routed)
            return wrap

        @page("/v1/health")
        async def health(web: Any, _request: Request) -> Response:
            app_: Any = projection.app
            return web.json({"ok": True, "ready": projection.ready(), "worker": projection.worker_id,
                             "rebalancing": bool(app_.rebalancing),
                             **projection.owned.health()})

        @page("/openapi.json")
        async def openapi(web: Any, _request: Request) -> Response:
            return web.json(OPENAPI)

        @page("/v1/streams/{stream_id}/head", key="stream_id")
        async def get_head(web: Any, _request: Request, stream_id: str) -> Response:
            return web.json(head_view(projection.stream_view(stream_id), projection.heads.get(stream_id)))

        @page("/v1/streams/{stream_id}", key="stream_id")
        async def info(web: Any, _request: Request, stream_id: str) -> Response:
            view = projection.stream_view(stream_id)
            body = head_view(view, projection.heads.get(stream_id))
            body.update(config=view["config"], allowlist=view["allowlist"], subscribers=view["subscribers"],
                        created_at_block=view["created_at_block"], key_epoch=view["last_key_epoch"])
            return web.json(body)

        @page("/v1/streams/{stream_id}/messages", key="stream_id")
        async def get_since(web: Any, request: Request, stream_id: str) -> Response:
            q = request.query
            cursor = _int_param(q, "cursor", 0)
            limit = _int_param(q, "limit", 100)
            filter_spec = _json_param(q, "filter")
            min_head = _int_param(q, "min_head", 0)
            if min_head:
                await projection.wait_for_head(stream_id, min_head, _int_param(q, "wait_ms", 2000))
            return web.json(await projection.get_since(stream_id, cursor, limit, filter_spec))

        @page("/v1/streams/{stream_id}/keys/at/{sequence}", key="stream_id")
        async def key_at_sequence(web: Any, _request: Request, stream_id: str, sequence: str) -> Response:
            seq = _int_text(sequence, "sequence")
            return web.json(key_at(projection.stream_view(stream_id), seq).to_dict())

        @page("/v1/streams/{stream_id}/keys", key="stream_id")
        async def key_history(web: Any, request: Request, stream_id: str) -> Response:
            page_ = key_page(projection.stream_view(stream_id), _int_param(request.query, "from", 1),
                             _int_param(request.query, "limit", 100))
            return web.json({"entries": [e.to_dict() for e in page_.entries],
                             "next_from": page_.next_from_signing_key_id})

        @page("/v1/streams/{stream_id}/subscribers", key="stream_id")
        async def subscribers(web: Any, request: Request, stream_id: str) -> Response:
            projection.stream_view(stream_id)
            active = request.query.get("active_only", "false").lower() in ("1", "true", "yes")
            subs = stream_subscribers(projection.subscriptions.items(), stream_id, active_only=active)
            return web.json({"stream_id": stream_id, "subscribers": subs})

        @page("/v1/feeds", exact=REGISTRY_KEY)
        async def list_feeds(web: Any, request: Request) -> Response:
            return web.json({"feeds": feeds(projection.registry.items(), request.query.get("owner"))})

        @page("/v1/feeds/{feed_id}", exact=REGISTRY_KEY)
        async def get_feed(web: Any, _request: Request, feed_id: str) -> Response:
            entry = projection.registry.get(str(parse_feed_id(feed_id)))
            if entry is None:
                raise FeedNotFoundError(f"no feed has id {feed_id}; run `watchtower list` to see the feeds")
            return web.json(entry)

        @page("/v1/admin/digest")
        async def digest(web: Any, _request: Request) -> Response:
            return web.json(projection.digest())

        @app.page("/v1/commands", name="commands")
        class Commands(View):
            async def post(self, request: Request) -> Response:
                try:
                    try:
                        body = await request.json()
                    except (ValueError, UnicodeDecodeError):
                        raise InvalidArgumentError("the request body is not JSON; send "
                                                   '{"command": <signed command>}') from None
                    if not isinstance(body, dict) or "command" not in body:
                        raise InvalidArgumentError('send {"command": <signed command>, "timeout_s": 30}')
                    cmd = Command.from_dict(body["command"])
                    timeout = float(body.get("timeout_s", 30))
                    return self.json({"result": await projection.submit(cmd, timeout)})
                except WatchtowerError as err:
                    return self.json(error_body(err), status=http_status(err.code))


def _int_text(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"{name} must be an integer, got {text!r}") from None


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    text = query.get(name)
    return default if text is None or text == "" else _int_text(text, name)


def _json_param(query: Mapping[str, str], name: str) -> object:
    text = query.get(name)
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise InvalidFilterError(f"{name} is not JSON; pass the filter DSL as JSON text") from None


def _topic_layout(bootstrap: str, topic: str) -> tuple[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise InvalidArgumentError(f"topic {topic} does not exist; run `watchtower init` first")
    replicas = len(next(iter(meta.partitions.values())).replicas)
    return len(meta.partitions), replicas
