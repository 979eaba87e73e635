"""Throughput of the HTTP command path: ``POST /v1/commands`` through the command gateway.

Starts an embedded broker, one stream-actor worker, one projection worker that hosts the gateway
(the shared process `watchtower up` runs) and one gateway process of its own, then publishes the
same kind of load three ways, each on fresh streams:

1. ``shared``: HTTP to the projection process's mounted gateway;
2. ``own process``: HTTP to the standalone gateway;
3. ``CommandClient``: the gateway's Kafka transport called directly (no HTTP), the ceiling.

Load: `--streams` streams, each publishing `--per-stream` signed 512 B messages in order (one
publish in flight per stream, since each is signed for head + 1), so `--streams` requests are in
flight at once. Commands are signed before the timed part.

    .venv/bin/python bench/bench_gateway.py [--streams 64] [--per-stream 40]

A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import aiohttp
import nacl.signing
from kafka_fixture import embedded_spec, free_ports

from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue


def presign(owner: nacl.signing.SigningKey, key: nacl.signing.SigningKey, streams: list[str], per_stream: int,
            nonce0: int) -> tuple[list[Command], dict[str, list[Command]]]:
    creates = [sign_command(owner, "create_stream", sid, nonce0 + i, {
        "publisher_key_hex": bytes(key.verify_key).hex(), "ring_buffer_capacity": max(per_stream, 1)})
        for i, sid in enumerate(streams)]
    nonce = nonce0 + len(streams)
    publishes: dict[str, list[Command]] = {}
    for sid in streams:
        cmds = []
        for seq in range(1, per_stream + 1):
            msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=int(time.time() * 1000), kind="b",
                               payload=os.urandom(256).hex().encode(), signing_key=key)
            cmds.append(sign_command(owner, "publish", sid, nonce, msg.to_json_dict()))
            nonce += 1
        publishes[sid] = cmds
    return creates, publishes


async def over_http(url: str, creates: list[Command], publishes: dict[str, list[Command]]) -> float:
    """Messages per second acknowledged through ``POST {url}/v1/commands``."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def post(cmd: Command) -> None:
            async with session.post(f"{url}/v1/commands", json={"command": cmd.to_dict()}) as resp:
                body = await resp.json()
                if resp.status != 200:
                    raise RuntimeError(json.dumps(body))

        await asyncio.gather(*(post(c) for c in creates))

        async def stream(cmds: list[Command]) -> None:
            for cmd in cmds:
                await post(cmd)

        t0 = time.perf_counter()
        await asyncio.gather(*(stream(c) for c in publishes.values()))
        return sum(map(len, publishes.values())) / (time.perf_counter() - t0)


def direct(client: CommandClient, creates: list[Command], publishes: dict[str, list[Command]]) -> float:
    """The same load through the gateway's transport, no HTTP (each stream's next sent on its reply)."""
    for fut in [client.submit(c) for c in creates]:
        fut.result(60)
    pending: dict[str, int] = dict.fromkeys(publishes, 0)
    remaining = [sum(map(len, publishes.values()))]
    finished: Future[None] = Future()

    def send(sid: str) -> None:
        cmd = publishes[sid][pending[sid]]
        client.submit(cmd).add_done_callback(lambda f, sid=sid: on_reply(sid, f))

    def on_reply(sid: str, fut: Future[dict[str, Any]]) -> None:
        fut.result()
        pending[sid] += 1
        remaining[0] -= 1
        if remaining[0] == 0:
            finished.set_result(None)
        elif pending[sid] < len(publishes[sid]):
            send(sid)

    t0 = time.perf_counter()
    for sid in publishes:
        send(sid)
    finished.result(300)
    return sum(map(len, publishes.values())) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--per-stream", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-gw-"))
    lk = LocalKafka(embedded_spec(tmp / "kafka"))
    services: ServiceSet | None = None
    client: CommandClient | None = None
    owner, key = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    try:
        lk.up()
        bootstrap = lk.spec.bootstrap
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=3))
        api_port, gw_port = free_ports(2)
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=api_port)
        services.start_worker("w1")
        services.start_projection("p1")
        gateway_url = services.start_gateway("g1", gw_port)
        services.wait_ready()
        client = CommandClient(bootstrap, prefix=prefix)
        nonce = 1
        results: dict[str, list[float]] = {"shared": [], "own process": [], "CommandClient": []}
        for rnd in range(args.rounds + 1):  # round 0 warms every path up and is not reported
            for name in results:
                streams = [f"bench.{name.replace(' ', '')}.{rnd}.{uuid.uuid4().hex[:6]}.{i}"
                           for i in range(args.streams)]
                creates, publishes = presign(owner, key, streams, args.per_stream, nonce)
                nonce += args.streams * (args.per_stream + 1)
                if name == "shared":
                    rate = asyncio.run(over_http(services.api_url, creates, publishes))
                elif name == "own process":
                    rate = asyncio.run(over_http(gateway_url, creates, publishes))
                else:
                    rate = direct(client, creates, publishes)
                if rnd:
                    results[name].append(rate)
                print(f"round {rnd} {name:>13}: {rate:8.0f} msg/s", flush=True)
        print(json.dumps({name: [round(r) for r in rates] for name, rates in results.items()}))
    finally:
        if client is not None:
            client.close()
        if services is not None:
            services.stop()
        lk.down()


if __name__ == "__main__":
    main()
