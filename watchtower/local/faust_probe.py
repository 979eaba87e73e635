"""A minimal Faust worker used by the client-compatibility check.

Run as ``python -m watchtower.local.faust_probe BOOTSTRAP SOURCE SINK APP_ID``. With
``processing_guarantee="exactly_once"`` Faust reads ``SOURCE`` read_committed and forwards
each record to ``SINK`` inside an aiokafka transaction, so one run exercises aiokafka's
consumer, producer and transactional APIs against the broker.
"""

from __future__ import annotations

import sys

import faust
from faust.types import StreamT

from watchtower.topics.faust_settings import faust_broker_settings


def build_app(bootstrap: str, source: str, sink: str, app_id: str) -> faust.App:
    """A Faust app whose one agent forwards ``value`` as ``value + b" via faust"``."""
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        **faust_broker_settings(),
        store="memory://",
        processing_guarantee="exactly_once",
        web_enabled=False,
        topic_partitions=1,
        topic_replication_factor=1,
        broker_commit_every=1,
    )
    src = app.topic(source, value_type=bytes, value_serializer="raw", key_serializer="raw")
    dst = app.topic(sink, value_type=bytes, value_serializer="raw", key_serializer="raw")

    @app.agent(src)
    async def forward(stream: StreamT[bytes]) -> None:
        async for value in stream:
            await dst.send(value=value + b" via faust")

    return app


def main(argv: list[str]) -> None:
    bootstrap, source, sink, app_id = argv
    app = build_app(bootstrap, source, sink, app_id)
    # App.main() parses sys.argv like the `faust` command does.
    sys.argv = ["faust", "worker", "--loglevel", "warn", "--without-web"]
    app.main()


if __name__ == "__main__":
    main(sys.argv[1:])
