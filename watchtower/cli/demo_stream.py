"""The demo's stream-actor part: a worker, a feed, signed publishes, rejections, verification."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import click
import nacl.signing

from watchtower.client.archive import read_committed_messages
from watchtower.client.transport import CommandClient
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.key_schedule import KeySchedule
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message, verify_with_schedule


def run_stream_demo(bootstrap: str) -> None:
    """Start one worker process, drive a feed through it, and stop the worker."""
    worker = subprocess.Popen([sys.executable, "-m", "watchtower.agents.worker_main", bootstrap, "demo"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = CommandClient(bootstrap)
    try:
        owner, publisher, stranger = (nacl.signing.SigningKey.generate() for _ in range(3))
        sid = f"demo.prices.{uuid.uuid4().hex[:6]}"
        cfg = {"stream_id": sid, "owner": address_from_public_key(bytes(owner.verify_key)),
               "publisher_key_hex": bytes(publisher.verify_key).hex()}
        client.call(sign_command(owner, "create_stream", sid, 1, cfg), timeout=120)
        click.echo(f"  created feed {sid} (owner {cfg['owner'][:12]}…)")
        t0 = time.monotonic()
        for seq in range(1, 6):
            msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=int(time.time() * 1000),
                               kind="price_batch", payload=f'{{"p":{97000 + seq}}}'.encode(),
                               signing_key=publisher, tags={"symbol": "BTC", "n": seq})
            reply = client.call(sign_command(owner, "publish", sid, seq + 1, msg.to_json_dict()))
            click.echo(f"  published sequence {reply['sequence']} (head {reply['head']}, floor {reply['floor']})")
        click.echo(f"  5 signed publishes acknowledged in {time.monotonic() - t0:.2f}s")
        stale = sign_message(stream_id=sid, sequence=3, timestamp_unix_ms=int(time.time() * 1000),
                             kind="price_batch", payload=b"{}", signing_key=publisher)
        for label, cmd in (("stale expected sequence", sign_command(owner, "publish", sid, 10, stale.to_json_dict())),
                           ("publish by a stranger", sign_command(stranger, "publish", sid, 1, stale.to_json_dict()))):
            try:
                client.call(cmd)
                click.echo(f"  {label}: unexpectedly accepted")
            except WatchtowerError as err:
                click.echo(f"  {label}: refused [{err.code}] {err.message}")
        schedule = KeySchedule.initial(bytes(publisher.verify_key))
        messages = read_committed_messages(bootstrap, stream_id=sid)
        ok = all(verify_with_schedule(m, schedule) for m in messages)
        seqs = [m.sequence for m in messages]
        click.echo(f"  read back from the log: sequences {seqs}, every signature valid: {ok}")
    finally:
        client.close()
        worker.terminate()
        worker.wait(30)
