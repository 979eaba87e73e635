"""Rebuild every projection table from the log, offline, and digest it.

Reads the events and messages topics from offset 0 (read_committed) and folds them with the same
`fold.Folder` the live Faust agent uses, into plain dicts. It refuses exactly the records the live
worker refuses, so equal digests from this and from a live worker (``GET /v1/admin/digest``)
prove the live projection is exactly what the log says, forged records and all; the quarantine
summaries must be equal too. The key manager's tables are folded in the same pass
(`rebuild_keymgr_digest` against the live ``GET /v1/keymgr/digest``), and so is the ``replay``
topic into the replay table (`rebuild_replay_digest` against the live ``GET /v1/replays/digest``).
"""

from __future__ import annotations

from typing import Any

from watchtower.projections import quarantine
from watchtower.projections.fold import Folder
from watchtower.projections.keymgr_tables import KEYMGR_TABLES, keymgr_digest, keymgr_table_digests, new_keymgr_tables
from watchtower.projections.replay_tables import digest_of, fold_replay
from watchtower.protocol.stream.views import TABLE_NAMES, table_digests, views_digest
from watchtower.topics.catalogue import topic_name
from watchtower.topics.metadata import partition_count
from watchtower.topics.reader import read_committed


def rebuild(bootstrap: str, prefix: str | None = None, timeout_s: float = 300.0) -> tuple[dict[str, dict[str, Any]],
                                                                                          dict[str, Any]]:
    """Every stream table, folded from the committed log up to its current end, and the quarantine table."""
    tables, _keymgr, refused = rebuild_all(bootstrap, prefix, timeout_s)
    return tables, refused


def rebuild_all(bootstrap: str, prefix: str | None = None, timeout_s: float = 300.0, *,
                replays: dict[str, Any] | None = None) -> tuple[
        dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, Any]]:
    """The stream tables, the keymgr tables and the quarantine table, folded from the committed log
    (and the replay table into `replays`, when given; its refusals are in the quarantine either way).

    Partition by partition, the events first, then the messages, then the replay records. Read together, the messages
    topic can run far ahead of the events one (after a broker failover their leaders differ and
    are fetched at different speeds); past `fold.MAX_WAITING` records waiting for their publish
    events the oldest would be dropped unindexed, and the result would depend on fetch timing.
    This order never makes a record wait (the fold's decisions do not depend on the order), and the
    topics are co-partitioned: a stream's events and messages share its partition number.

    `TopicUnavailableError` when the cluster does not serve the events or the messages topic.
    """
    tables: dict[str, dict[str, Any]] = {name: {} for name in TABLE_NAMES}
    keymgr = new_keymgr_tables()
    refused: dict[str, Any] = {}
    t_events, t_messages = topic_name("events", prefix), topic_name("messages", prefix)
    t_replay = topic_name("replay", prefix)
    partitions = partition_count(bootstrap, t_events)
    folder = Folder(tables, refused, t_events=t_events, t_messages=t_messages, partitions=partitions,
                    keymgr=keymgr)
    replay_table: dict[str, Any] = {} if replays is None else replays

    def fold_replay_record(p: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        fold_replay(replay_table, refused, topic=t_replay, partitions=partitions, partition=p, offset=offset,
                    key=key, value=value)

    folds = [(t_events, folder.fold_event), (t_messages, folder.fold_message), (t_replay, fold_replay_record)]
    for p in range(max(partitions, partition_count(bootstrap, t_messages))):
        for topic, fold in folds:
            for record in read_committed(bootstrap, [topic], partition=p, timeout_s=timeout_s):
                fold(p, int(record.offset() or 0), record.key(), record.value())
    return tables, keymgr, refused


def rebuild_digest(bootstrap: str, prefix: str | None = None) -> dict[str, Any]:
    """``{"digest", "counts", "tables", "quarantined", "keymgr"}`` of a full rebuild: the stream
    views as the live ``GET /v1/admin/digest``, and under ``keymgr`` the key manager's tables as the
    live ``GET /v1/keymgr/digest``."""
    tables, keymgr, refused = rebuild_all(bootstrap, prefix)
    snapshot = {k: list(v.items()) for k, v in tables.items()}
    return {"digest": views_digest(snapshot), "counts": {k: len(v) for k, v in tables.items()},
            "tables": table_digests(snapshot), "quarantined": quarantine.summary(refused.items()),
            "keymgr": _keymgr_summary(keymgr, refused)}


def rebuild_replay_digest(bootstrap: str, prefix: str | None = None) -> dict[str, Any]:
    """``{"digest", "replays", "quarantined"}`` of the replay table of a full rebuild: ``digest`` and
    ``replays`` as the live ``GET /v1/replays/digest``."""
    replays: dict[str, Any] = {}
    _tables, _keymgr, refused = rebuild_all(bootstrap, prefix, replays=replays)
    return {**digest_of(replays.values()), "quarantined": quarantine.summary(refused.items())}


def rebuild_keymgr_digest(bootstrap: str, prefix: str | None = None) -> dict[str, Any]:
    """``{"digest", "counts", "tables", "quarantined"}`` of the keymgr tables of a full rebuild (as the
    live worker's ``GET /v1/keymgr/digest``)."""
    _tables, keymgr, refused = rebuild_all(bootstrap, prefix)
    return _keymgr_summary(keymgr, refused)


def _keymgr_summary(keymgr: dict[str, dict[str, Any]], refused: dict[str, Any]) -> dict[str, Any]:
    snapshot = {k: list(keymgr[k].items()) for k in KEYMGR_TABLES}
    return {"digest": keymgr_digest(snapshot), "counts": {k: len(v) for k, v in snapshot.items()},
            "tables": keymgr_table_digests(snapshot), "quarantined": quarantine.summary(refused.items())}
