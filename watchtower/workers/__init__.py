"""The stream worker (`worker_main`, `command_processor`): it consumes `commands`, `internal` and
the ingestion lane `ingest.commands` (served after the others), decides with the core's aggregates
(`aggregates/`) and writes events, messages, replies and forwards in one Kafka transaction;
partition rebuilds and snapshots; and the one transactional serving loop (`loop`) the stream worker
and the side workers (push delivery, replay: `tx_worker`) are processors of. Plain confluent-kafka
processes: no Faust agent runs here (docs/worker.md)."""
