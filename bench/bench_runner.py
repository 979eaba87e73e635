"""One ingestion runner alone against a fast local HTTP source: tasks/s and CPU per task.

A local source (its own process, so its CPU is not counted) answers every request with the same
small JSON document over keep-alive HTTP/1.1. The bench signs `--streams` × `--ticks` tasks as the
scheduler would (``NONE`` proof, this runner selected) and feeds their records, as read from
``ingest.tasks``, through the runner's own path: accept (decode + verify the scheduler's
signature), dispatch, fetch, select, sign the result, encode it for ``ingest.results``. Results go
to a counter (no broker: this measures the runner, not Kafka).

    .venv/bin/python bench/bench_runner.py [--streams 1000] [--ticks 5] [--same-url] [--json]

``--same-url``: every stream names the same source (a tick's fetches coalesce); by default each
stream has its own URL (``/p?s=N``), so nothing coalesces. A script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nacl.signing

from watchtower.ingest.fetch import allowed_nets
from watchtower.ingest.runner import Runner, now_height
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion.records import new_task
from watchtower.schemas.ingest_records import encode_result, encode_task

BODY = json.dumps({"data": {"price": 97000, "symbol": "BTC"}}).encode()


def _source(port: int, ready: Any) -> None:
    response = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)

    class Answer(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport, self.buf = transport, b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while b"\r\n\r\n" in self.buf:
                _, self.buf = self.buf.split(b"\r\n\r\n", 1)
                self.transport.write(response)

    async def run() -> None:
        server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", port, backlog=1024)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(run())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--same-url", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    port = free_port()
    ready = multiprocessing.Event()
    source = multiprocessing.Process(target=_source, args=(port, ready), daemon=True)
    source.start()
    ready.wait(10)

    scheduler = nacl.signing.SigningKey(b"\x03" * 32)
    key = nacl.signing.SigningKey(b"\x31" * 32)
    height = now_height()
    records = []
    for tick in range(1, args.ticks + 1):
        for s in range(args.streams):
            url = f"http://127.0.0.1:{port}/p" + ("" if args.same_url else f"?s={s}")
            config = {"num_runners": 1, "proof_type": "NONE", "result_schema": {"type": "object"},
                      "task_definition": {"kind": "http_json", "url": url, "select": {"price": "$.data.price"},
                                          "timeout_ms": 5000}}
            records.append(encode_task(new_task(stream_id=f"bench-{s}", tick=tick, tick_height=height + tick,
                                                timeout_blocks=600, config=config,
                                                runner_keys=(bytes(key.verify_key),), scheduler=scheduler)))
    runner = Runner(key, address_from_public_key(bytes(scheduler.verify_key)),
                    allow=allowed_nets("127.0.0.1/32"))
    done = threading.Event()
    count = {"results": 0, "errors": 0}
    lock = threading.Lock()
    total = len(records)

    def on_result(result: Any) -> None:
        encode_result(result)
        with lock:
            count["results"] += 1
            if result.error is not None:
                count["errors"] += 1
            if count["results"] == total:
                done.set()

    start_wall, start_cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    drive = _driver(runner)
    drive(records, on_result, done)
    wall = time.monotonic() - start_wall
    end_cpu = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (end_cpu.ru_utime - start_cpu.ru_utime) + (end_cpu.ru_stime - start_cpu.ru_stime)
    out = {"tasks": total, "streams": args.streams, "same_url": args.same_url, "results": count["results"],
           "errors": count["errors"], "seconds": round(wall, 2), "tasks_per_s": round(count["results"] / wall, 1),
           "cpu_ms_per_task": round(cpu * 1000 / max(count["results"], 1), 3)}
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    source.terminate()


def _driver(runner: Runner) -> Any:
    """The runner's own path from task records to results (its `serve` loop, without Kafka)."""
    from watchtower.ingest.fetch import Fetcher
    from watchtower.ingest.runner import dispatcher, submit

    def drive(records: list[bytes], on_result: Any, done: threading.Event) -> None:
        fetcher = Fetcher(runner.allow)
        pool = dispatcher(runner, on_result, fetcher)
        try:
            for i, value in enumerate(records):
                task = runner.accept(value, f"bench@{i}")
                if task is not None:
                    submit(runner, pool, task, on_result)
            done.wait(600)
        finally:
            pool.close()
            fetcher.close()

    return drive


if __name__ == "__main__":
    main()
