"""A runner process stops on SIGTERM although a source holds one of its fetches (no broker: the
process runs the runner's task threads and its stop sequence, as `serve` does)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.ingest.test_runner_fetch import BOUND_S, MIB, RUNNER_KEY, SCHEDULER, drip_body, local_source, task_for
from watchtower.protocol.addresses import address_from_public_key
from watchtower.schemas.ingest_records import encode_task

PROCESS = textwrap.dedent("""
    import signal, sys, threading
    sys.path.insert(0, {root!r})
    from watchtower.ingest.fetch import Fetcher, allowed_nets
    from watchtower.ingest.runner import Runner, dispatcher, submit
    from watchtower.schemas.ingest_records import decode_task
    import nacl.signing

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runner = Runner(nacl.signing.SigningKey(bytes.fromhex(sys.argv[1])), sys.argv[2],
                    allow=allowed_nets("127.0.0.1/32"))
    fetcher = Fetcher(runner.allow)
    pool = dispatcher(runner, print, fetcher)
    for record in sys.argv[3:]:
        submit(runner, pool, decode_task(bytes.fromhex(record)), print)
    print("serving", flush=True)
    stop.wait()
    pool.close()  # what serve does when stopped
    fetcher.close()
    sys.exit(0)
""")


def test_sigterm_stops_a_runner_whose_fetch_a_source_holds() -> None:
    root = str(Path(__file__).resolve().parents[2])
    with local_source(drip_body) as source:
        tasks = [encode_task(task_for("wedged", source.url, tick, timeout_ms=30_000, max_bytes=MIB)).hex()
                 for tick in (1, 2, 3)]
        scheduler = address_from_public_key(bytes(SCHEDULER.verify_key))
        proc = subprocess.Popen([sys.executable, "-c", PROCESS.format(root=root), bytes(RUNNER_KEY).hex(),
                                 scheduler, *tasks], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "serving"
            assert source.wait_open()  # the fetch is in flight, held by the source
            proc.send_signal(signal.SIGTERM)
            # The held fetch's own deadline is 30 s away: the process must not wait for it.
            assert proc.wait(BOUND_S / 2) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
