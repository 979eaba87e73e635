"""Prometheus metrics of every Watchtower process (docs/operations.md).

- `exposition`: the ``/metrics`` endpoint each long-running process serves on a port of its own
  (prometheus_client's HTTP server; ``WATCHTOWER_METRICS_PORT``), build info, and the standard
  process metrics (CPU, RSS, open fds) from prometheus_client's default collectors;
- one module per service with its metric definitions: `worker` (the stream worker), `projection`,
  `side_workers` (push delivery and replay), `keymgr`, `sse`, and `http` (request counts and latency
  of the aiohttp servers, by route pattern); `common` (quarantines, fences, starts over of every
  Kafka worker), `consumer_lag` (each Kafka worker's own consumer lag) and `group_lag` (every
  worker group's lag read from Kafka, exported by the stream worker on a thread of its own);
- `lag`: consumer-group lag read from Kafka, and a service's metrics read back over HTTP, for
  `watchtower status`; `targets`: a local stack's metrics ports as Prometheus file discovery.

No module here holds a Kafka client: `lag` and `group_lag` read the groups' lag through
`topics.group_lag`; the rest only counts what the services hand it. `exposition`
also installs the process's tracer when ``WATCHTOWER_TRACES`` asks for one (`watchtower.tracing`).

Labels are low-cardinality by construction: a method, a spec error code, a topic role, a route
pattern, a partition number; never a stream id, an address or a free-text reason. No process forks
a serving child, so the single-process registry is the right one (no multiprocess collector).
"""
