"""``watchtower ingest serve``: the ingestion service process — the scheduler (Faust) and the
aggregator (a thread with its own confluent-kafka reader).

The aggregator folds ``events`` from the beginning (`IngestionView`), then reads ``ingest.tasks``
and ``ingest.results`` from `LOOKBACK_MS` before its start (every task whose deadline can still
matter: timeout_blocks is at most 600) and tails all three, read_committed. It keeps no state of
its own between runs: the log and the stream heads are its memory (`aggregator`).

Keys (`keys`): the scheduler key signs tasks; the publisher key is the one owners delegate to.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import nacl.signing
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from watchtower.client.http import ApiClient
from watchtower.client.keymgr import ENV_KEYMGR, KeyManagerClient
from watchtower.ingest.aggregator import Aggregator
from watchtower.ingest.runner import now_height
from watchtower.ingest.sink import ApiSink
from watchtower.ingest.view import IngestionView
from watchtower.metrics.exposition import start_metrics
from watchtower.metrics.ingest import AggregatorCollector
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import BLOCK_INTERVAL_MS
from watchtower.protocol.ingestion import MAX_TIMEOUT_BLOCKS
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

log = logging.getLogger("watchtower.ingest.service")
PUBLISH_THREADS: Final = 8
"""Streams whose ticks are published at once (each stream by one thread at a time, in tick order)."""
LOOKBACK_MS: Final = (MAX_TIMEOUT_BLOCKS + 60) * BLOCK_INTERVAL_MS


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    meta = consumer.list_topics(topic, timeout=30)
    return sorted(meta.topics[topic].partitions)


def run_aggregator(bootstrap: str, prefix: str | None, api: ApiClient, scheduler: str,
                   publisher: nacl.signing.SigningKey, stop: threading.Event, health_file: Path | None = None) -> None:
    """The aggregator loop until `stop` (see the module docstring)."""
    view = IngestionView()
    events, tasks, results = (topic_name(r, prefix) for r in ("events", "ingest-tasks", "ingest-results"))
    next_offset: dict[int, int] = {}
    for msg in read_committed(bootstrap, [events]):
        view.fold(msg.value())
        partition, offset = msg.partition(), msg.offset()
        if partition is not None and offset is not None:
            next_offset[partition] = offset + 1
    keymgr_url = os.environ.get(ENV_KEYMGR)
    keymgr = KeyManagerClient(keymgr_url) if keymgr_url else None
    aggregator = Aggregator(view, scheduler, ApiSink(api, publisher, keymgr))
    start_metrics("ingest", [AggregatorCollector(aggregator)])
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"wt-{prefix or 'wt'}.ingest-aggregator-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest"}))
    since = int(time.time() * 1000) - LOOKBACK_MS
    assignment = [TopicPartition(events, p, next_offset.get(p, OFFSET_BEGINNING))
                  for p in _partitions(consumer, events)]
    for topic in (tasks, results):
        wanted = [TopicPartition(topic, p, since) for p in _partitions(consumer, topic)]
        assignment += consumer.offsets_for_times(wanted, timeout=30)
    consumer.assign(assignment)
    pool = ThreadPoolExecutor(max_workers=PUBLISH_THREADS, thread_name_prefix="ingest-publish")
    last_health = 0.0
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, 0.1):
                error = msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("ingest reader: %s", error)
                    continue
                where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
                if msg.topic() == events:
                    view.fold(msg.value())
                elif msg.topic() == tasks:
                    aggregator.on_task(msg.value(), where)
                else:
                    aggregator.on_result(msg.value(), where)
            aggregator.step(now_height(), pool)
            if health_file is not None and time.monotonic() - last_health > 0.5:
                last_health = time.monotonic()
                doc = {"pid": os.getpid(), **aggregator.health(), "streams": sorted(view.streams),
                       "runners": sorted(view.registered())}
                tmp = health_file.with_suffix(".tmp")
                tmp.write_text(json.dumps(doc))
                tmp.replace(health_file)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        consumer.close()


def serve(bootstrap: str, prefix: str | None, api_url: str, scheduler_key: nacl.signing.SigningKey,
          publisher_key: nacl.signing.SigningKey, health_file: Path | None = None) -> None:
    """Run the aggregator thread and the scheduler (foreground, Faust) until the process stops."""
    from watchtower.ingest import scheduler as scheduler_mod  # Faust is imported only by the serving process

    stop = threading.Event()
    scheduler = address_from_public_key(bytes(scheduler_key.verify_key))
    thread = threading.Thread(target=run_aggregator, name="ingest-aggregator", daemon=True,
                              args=(bootstrap, prefix, ApiClient(api_url), scheduler, publisher_key, stop,
                                    health_file))
    thread.start()
    try:
        scheduler_mod.run(bootstrap, prefix, scheduler_key)
    finally:
        stop.set()
        thread.join(10)
        os._exit(0)
