"""The projection worker: tables folded from the events and messages topics, and the HTTP API.

One Faust agent consumes ``events`` and ``messages`` (co-partitioned, read_committed) and folds
each record into four tables with the pure `watchtower.protocol.stream.views` functions. Workers split the
partitions between them; each keeps its partitions' share of the tables with the offsets folded
(`partitions`), and brings a partition up to date from the log itself when it is assigned
(`catch_up`). Every GET about a stream is routed to the worker that owns the stream's partition,
and registry reads to the owner of the registry key (`routing`); a worker answers them only for a
partition it serves, or, when the owner cannot answer, for one it holds as a caught-up standby,
else NOT_READY with ``Retry-After``. A worker is a static member of its group under its name
(`group_instance_id`), so a restart within the session timeout moves no partition.

Projections only answer reads. The API process (`watchtower.api.main`) also mounts the command
gateway and the live feeds (`watchtower.gateway`) on this worker's HTTP server (`web_app`).

Records are checked before they are folded (`fold`): one that breaks a rule is quarantined
(logged with its position, counted in /v1/health and the digest, skipped), so a forged or poison
record never stops a partition and never changes the views.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from faust.web import Request, Response

from watchtower import tracing
from watchtower.http import server as web_server
from watchtower.http.broker_probe import BrokerProbe
from watchtower.http.errors import error_body, http_status
from watchtower.http.openapi import OPENAPI
from watchtower.http.server import SafeJsonWeb
from watchtower.projections import keymgr_routes, quarantine, replay_routes, stream_routes
from watchtower.projections.catch_up import CatchUp
from watchtower.projections.consumer import ProjectionApp
from watchtower.projections.filter_cache import compiled_filter
from watchtower.projections.fold import Folder, publishes_first, verified_sequence
from watchtower.projections.keymgr_tables import KEYMGR_TABLES, KEYMGR_VIEW, keymgr_digest, keymgr_table_digests
from watchtower.projections.log_reader import LogReader, PayloadCache
from watchtower.projections.longpoll import HeadWaiters
from watchtower.projections.partitions import OwnedPartitions
from watchtower.projections.replay_tables import REPLAY_TABLE, fold_replay, replay_price_of
from watchtower.projections.routing import route_to_owner
from watchtower.protocol.errors import (
    InvalidArgumentError,
    NotReadyError,
    WatchtowerError,
)
from watchtower.protocol.json_ints import json_safe_ints
from watchtower.protocol.page.proof import entry_json, proof_of
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.ring_window import floor_for, get_since_range
from watchtower.protocol.stream.views import (
    TABLE_NAMES,
    require_stream,
    table_digests,
    views_digest,
)
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import GroupTimeouts
from watchtower.topics.errors import TopicUnavailableError
from watchtower.topics.faust_settings import faust_broker_settings
from watchtower.topics.groups import projection_fold_group
from watchtower.topics.metadata import topic_layout
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.records import Record

log = logging.getLogger("watchtower.projections")

DEFAULT_API_PORT = 8470
Handler = Callable[..., Awaitable[Response]]


class Projection:
    """The Faust app plus the in-process state next to its tables (offset indexes, payload cache).
    Its HTTP server answers the read routes; `web_app` is that server's aiohttp application, for
    the API process to mount more routes on."""

    def __init__(self, bootstrap: str, worker_id: str, *, prefix: str | None = None,
                 port: int = DEFAULT_API_PORT, datadir: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.worker_id = worker_id
        self.prefix = prefix
        self.t_events = topic_name("events", prefix)
        self.t_messages = topic_name("messages", prefix)
        self.t_replay = topic_name("replay", prefix)  # co-partitioned too: a replay sits on its stream's partition
        self.partitions, replication = _topic_layout(bootstrap, self.t_events)
        # A new generation is a new consumer group: its workers fold the log from scratch.
        generation = os.environ.get("WATCHTOWER_PROJECTION_GENERATION", "1")
        timeouts = GroupTimeouts.from_env()
        self.app = ProjectionApp(
            f"wt-projections-{topic_name('events', prefix).rsplit('.', 1)[0]}-g{generation}",
            broker=f"kafka://{bootstrap}",
            **faust_broker_settings(),
            # With no Faust tables, a standby count above 0 keeps Faust's own assignor, which puts
            # partition p of events and messages on the same worker and publishes the owners' URLs;
            # it also names a standby worker for every partition, which folds it too (`catch_up`).
            table_standby_replicas=1,
            web_enabled=True,
            # Listen on loopback unless told otherwise: the API accepts commands, and a stack on a
            # laptop must not serve the network. Containers set WATCHTOWER_WEB_BIND=0.0.0.0.
            web_bind=os.environ.get("WATCHTOWER_WEB_BIND", "127.0.0.1"),
            # Other workers reach this one at its canonical URL (in a container: its service name).
            web_host=os.environ.get("WATCHTOWER_WEB_HOST", "127.0.0.1"),
            web_port=port,
            web_application_options=web_server.application_options(),
            canonical_url=os.environ.get("WATCHTOWER_CANONICAL_URL", f"http://127.0.0.1:{port}"),
            datadir=datadir or f"/tmp/wt-projections-{worker_id}",  # noqa: S108
            topic_partitions=self.partitions,
            topic_replication_factor=replication,
            consumer_auto_offset_reset="earliest",
            broker_commit_interval=1.0,
            # A killed projection worker's partitions move on after the group session timeout
            # (10 s by default, WATCHTOWER_SESSION_TIMEOUT_MS), not Faust's default 60 s.
            broker_session_timeout=timeouts.session_ms / 1000,
            broker_heartbeat_interval=timeouts.heartbeat_ms / 1000,
            # Static membership: a worker restarted under its name within the session timeout takes
            # its own partitions back, with no rebalance of the group (`group_instance_id`).
            consumer_group_instance_id=group_instance_id(worker_id),
            stream_wait_empty=False,
            folded_elsewhere=frozenset((self.t_events, self.t_messages, self.t_replay)),
        )
        # Each worker keeps its partitions' share of every table, with the offsets folded
        # (`partitions`); the quarantine counts and the offset indexes are per partition too, so a
        # partition that moves is folded, refused and indexed from the log alike by its new owner.
        self.owned = OwnedPartitions((*TABLE_NAMES, *KEYMGR_TABLES, KEYMGR_VIEW, REPLAY_TABLE, "indexes",
                                      "quarantine"))
        self.tables = {name: self.owned.table(name) for name in TABLE_NAMES}
        self.keymgr = {name: self.owned.table(name) for name in (*KEYMGR_TABLES, KEYMGR_VIEW)}
        self.streams, self.heads, self.offsets = self.tables["streams"], self.tables["heads"], self.tables["offsets"]
        self.subscriptions, self.registry = self.tables["subscriptions"], self.tables["registry"]
        self.refused = self.owned.table("quarantine")
        self.replays = self.owned.table(REPLAY_TABLE)
        self.waiters = HeadWaiters()
        self.cache = PayloadCache()
        self.folder = Folder(self.tables, self.refused, t_events=self.t_events, t_messages=self.t_messages,
                             partitions=self.partitions, cache=self.cache, on_head=self.waiters.wake,
                             indexes=self.owned.table("indexes"), keymgr=self.keymgr)
        self.reader = LogReader(bootstrap, self.t_messages)
        self.broker = BrokerProbe(bootstrap, self.t_events)
        self.source = self.app.topic(self.t_events, self.t_messages, self.t_replay, key_type=bytes,
                                     value_type=bytes, key_serializer="raw", value_serializer="raw")
        self.app.agent(self.source, name="project")(self._project)
        # Each worker also folds the partitions the assignor makes it standby for, so it answers their
        # reads while their owner restarts (WATCHTOWER_PROJECTION_STANDBY=0: only its own partitions).
        self.catch_up = CatchUp(bootstrap, (self.t_events, self.t_messages, self.t_replay), self.owned, self._fold,
                                fold_group=projection_fold_group(prefix),
                                standbys=os.environ.get("WATCHTOWER_PROJECTION_STANDBY", "1").strip() != "0",
                                answers_due=lambda: self.waiters.answers_due, first=self._fold_first,
                                waiting=lambda: bool(self.waiters.waited_keys()))
        self.catch_up.attach(self.app)
        web_server.install(self.app.web, on_shutdown=self.waiters.release_all)
        self._routes()

    @property
    def web_app(self) -> Any:
        """The aiohttp application of this worker's HTTP server (Faust's aiohttp driver holds it)."""
        driver: Any = self.app.web
        return driver.web_app

    # ------------------------------------------------------------------ folding the log
    async def _project(self, stream: Any) -> None:
        """The Faust agent of the source topics. It subscribes them, so the group assigns them, but
        receives no record: `catch_up` folds them (ProjectionApp's consumer never fetches them).
        Should one arrive anyway, it is dropped: that reader folds every record, in log order."""
        async for _event in stream.events():
            pass

    def _fold_first(self, records: list[Record]) -> list[Record]:
        """The publishes in `records` of the streams a long poll waits on (`fold.publishes_first`)."""
        return publishes_first(records, self.waiters.waited_keys(), t_events=self.t_events,
                               t_messages=self.t_messages)

    def _fold(self, record: Any) -> None:
        """Fold one committed record, live or while its partition catches up (inside `owned.folding`).

        The folder quarantines what breaks a rule; this is the last guard, so nothing is fatal.
        """
        partition, offset = int(record.partition), int(record.offset)
        span = tracing.span("projection fold", record.headers, partition=partition)
        if span is None:
            self._fold_record(record, partition, offset)
        else:
            with span:
                self._fold_record(record, partition, offset)

    def _fold_record(self, record: Any, partition: int, offset: int) -> None:
        key = None if record.key is None else bytes(record.key)
        value = None if record.value is None else bytes(record.value)
        try:
            if record.topic == self.t_messages:
                self.folder.fold_message(partition, offset, key, value)
            elif record.topic == self.t_replay:
                fold_replay(self.replays, self.refused, topic=self.t_replay, partitions=self.partitions,
                            partition=partition, offset=offset, key=key, value=value)
            else:
                self.folder.fold_event(partition, offset, key, value)
        except Exception as exc:
            log.exception("could not fold %s[%s]@%s", record.topic, partition, offset)
            self.folder.quarantined(record.topic, partition, offset, f"cannot be folded ({type(exc).__name__})")

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

    def key_schedule_of(self, stream_id: str) -> KeySchedule | None:
        """The stream's typed key schedule, as the fold holds it (None when this worker holds no index of it)."""
        index = self.folder.indexes.get(stream_id)
        return None if index is None else index.state.key_schedule

    def head_of(self, stream_id: str) -> int:
        head = self.heads.get(stream_id)
        return 0 if head is None else int(head["head"])

    async def get_since_bytes(self, stream_id: str, cursor: int, limit: int, filter_spec: object,
                              proof: bool = False) -> bytes:
        """A get_since page as the JSON body the route writes (with `proof`, also the completeness
        proof of what the filter skipped, `page_proof`): the cached messages' JSON bytes joined
        (signed documents, written as signed) around the envelope, which takes the integer rule."""
        envelope, messages = await self._page(stream_id, cursor, limit, filter_spec, proof)
        head = json.dumps(json_safe_ints({"stream_id": stream_id, **envelope}), separators=(",", ":")).encode()
        return b"".join((head[:-1], b',"messages":[', b",".join(messages), b"]}"))

    async def _page(self, stream_id: str, cursor: int, limit: int, filter_spec: object,
                    proof: bool) -> tuple[dict[str, Any], list[bytes]]:
        """The page's envelope (window, next cursor, proof) and its messages' JSON bytes."""
        match = compiled_filter(filter_spec, proof)
        view = self.stream_view(stream_id)
        head = self.heads.get(stream_id)
        head_seq, capacity = 0 if head is None else int(head["head"]), int(view["config"]["ring_buffer_capacity"])
        # A cursor below the window gets CURSOR_TOO_OLD with the ready replay request of the gap.
        wanted = get_since_range(head_seq, capacity, cursor, limit, stream_id=stream_id,
                                 replay_price_per_event_cby=replay_price_of(view))
        raws: dict[int, bytes] = {}
        missing = []
        for seq in wanted:
            raw = self.cache.get(stream_id, seq)
            if raw is None:
                missing.append(seq)
            else:
                raws[seq] = raw
        if missing:
            raws.update(await asyncio.get_running_loop().run_in_executor(
                None, self._read_missing, stream_id, view, missing))
        messages: list[bytes] = []
        skipped = []
        for seq in wanted:
            raw = raws.get(seq)
            if raw is None:
                raise NotReadyError(f"sequence {seq} of {stream_id!r} could not be read from the log yet; retry")
            headers, encoded = self.cache.encoded(stream_id, seq, raw)
            if match is None or match(headers):
                messages.append(encoded)
            elif proof:
                skipped.append(entry_json(self.cache.served(stream_id, seq, raw)[1]))
        floor_seq = floor_for(head_seq, capacity)  # as head_view, without its key-schedule parse
        envelope: dict[str, Any] = {
            "head_sequence": head_seq, "floor_sequence": floor_seq,
            "head": head_seq, "floor": floor_seq,  # deprecated names
            "next_cursor": wanted[-1] if len(wanted) else cursor}
        if proof:
            envelope["proof"] = proof_of(skipped)
        return envelope, messages

    def _read_missing(self, stream_id: str, view: Mapping[str, Any], missing: list[int]) -> dict[int, bytes]:
        """Payloads the cache lacks, from the messages topic: by indexed offset, else by a verifying scan."""
        partition = partition_for_key(stream_id.encode(), self.partitions)
        index = self.folder.indexes.get(stream_id)
        offsets = [None if index is None else index.offset_of(s) for s in missing]
        known = [o for o in offsets if o is not None]
        if len(known) == len(missing):
            at = dict(zip(known, missing, strict=True))
            found = self.reader.scan(partition, min(known), max(known), stream_id,
                                     lambda offset, _raw: at.get(offset), wanted=missing)
        else:  # not indexed in this process (yet): scan from the window's first known offset
            located = self.offsets.get(stream_id)
            first = 0 if located is None else int(located["floor_offset"])
            decoded: dict[int, StreamMessage] = {}
            found = self.reader.scan(partition, first, None, stream_id, verified_sequence(stream_id, view, decoded),
                                     wanted=missing)
            for seq, (_offset, raw) in found.items():
                # The scan decoded and verified it: the page is served from that, not a second decode.
                self.cache.put(stream_id, seq, raw, decoded.get(seq))
        return {seq: raw for seq, (_offset, raw) in found.items()}

    def quarantined(self, partitions: list[int] | None = None) -> dict[str, Any]:
        return quarantine.summary(self.refused.items(), partitions)

    def digest(self) -> dict[str, Any]:
        snapshot = {name: list(self.tables[name].items()) for name in TABLE_NAMES}
        return {"digest": views_digest(snapshot), "counts": {k: len(v) for k, v in snapshot.items()},
                "tables": table_digests(snapshot), "quarantined": self.quarantined()}

    def keymgr_digest(self) -> dict[str, Any]:
        """The keymgr tables' digest (`keymgr_tables.keymgr_digest`), as `digest` for the stream views."""
        snapshot = {name: list(self.keymgr[name].items()) for name in KEYMGR_TABLES}
        return {"digest": keymgr_digest(snapshot), "counts": {k: len(v) for k, v in snapshot.items()},
                "tables": keymgr_table_digests(snapshot), "quarantined": self.quarantined()}

    # ------------------------------------------------------------------ HTTP
    def _routes(self) -> None:
        app = self.app
        projection = self

        def page(path: str, *, key: str | None = None, exact: str | None = None,
                 prefix: str = "") -> Callable[[Handler], Any]:
            # `prefix` + the `key` segment is the routing key (keymgr instances: "acct:<address>").
            def wrap(fun: Handler) -> Any:
                async def guarded(web: Any, request: Request, **kw: Any) -> Response:
                    try:
                        routing_key = prefix + kw[key] if key is not None else exact
                        if routing_key is not None:
                            # Only from a partition that serves here for the whole read.
                            async with projection.owned.reading(projection.partition_of(routing_key)):
                                return await fun(SafeJsonWeb(web), request, **kw)
                        return await fun(SafeJsonWeb(web), request, **kw)
                    except WatchtowerError as err:
                        return web.json(error_body(err), status=http_status(err.code),
                                        headers=web_server.retry_after(err.code))
                guarded.__name__ = fun.__name__
                routed: Any = guarded
                if key is not None or exact is not None:
                    routed = route_to_owner(app, projection.t_events,
                                            lambda k: projection.partition_of(prefix + k if key else k),
                                            projection.owned.serves, match_info=key, exact_key=exact,
                                            stands_by=projection.owned.stands_by)(guarded)
                return app.page(path, name=fun.__name__, base=web_server.JsonView)(routed)
            return wrap

        @page("/v1/health")
        async def health(web: Any, _request: Request) -> Response:
            app_: Any = projection.app
            broker = await projection.broker.status()
            owned = projection.owned.health()
            mine = owned["partitions"]
            return web.json({"ok": True, "ready": projection.ready() and bool(broker["reachable"]),
                             "worker": projection.worker_id, "broker": broker,
                             "rebalancing": bool(app_.rebalancing),
                             "long_polls": len(projection.waiters),
                             "quarantined": projection.quarantined(mine), **owned})

        @page("/openapi.json")
        async def openapi(web: Any, _request: Request) -> Response:
            return web.schema_json(OPENAPI)  # a schema, not data: its bounds are written as they are

        stream_routes.install(projection, page)
        keymgr_routes.install(projection, page)
        replay_routes.install(projection, page)


def group_instance_id(worker_id: str) -> str | None:
    """The projection worker's static member id in its group: its worker name (None: dynamic membership).

    With it, a worker that stops (a rolling restart, a container restarted) does not leave the
    group: its partitions stay its own for the session timeout (``WATCHTOWER_SESSION_TIMEOUT_MS``),
    and a worker that comes back under the same name within it rejoins with them, so the other
    workers see no rebalance at all. One that does not come back loses them after the session
    timeout, as a killed worker does. Every worker of a group needs its own name: a second process
    under a name already in the group fences the first. ``WATCHTOWER_STATIC_MEMBERSHIP=0`` turns
    it off (a stopped worker then leaves the group at once, and every restart rebalances it twice).
    """
    if os.environ.get("WATCHTOWER_STATIC_MEMBERSHIP", "1").strip() == "0":
        return None
    return f"projection-{worker_id}"


def _topic_layout(bootstrap: str, topic: str) -> tuple[int, int]:
    """(partitions, replication factor) of `topic`; INVALID_ARGUMENT when the cluster does not serve it."""
    try:
        layout = topic_layout(bootstrap, topic)
    except TopicUnavailableError:
        raise InvalidArgumentError(f"topic {topic} does not exist; run `watchtower init` first") from None
    return layout.partitions, layout.replication_factor
