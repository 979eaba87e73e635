"""The ICRC-77 replay worker: re-emits historical ranges of ``messages`` to ``deliveries``.

See `worker` for the loop and its guarantees, `fulfil` for one slice, `archive` for reading
``messages``, `handoff` for Spark, `main` for the entry point, and docs/replay-worker.md.
"""
