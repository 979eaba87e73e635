"""A side worker's rebalance callbacks never break the consume() that serves them.

confluent-kafka keeps a per-thread call state while a consume() runs; a call that enters librdkafka
through it (``list_topics`` among others) from inside a rebalance callback clears it, and the next
callback that consume() serves aborts the process (``CallState_get: Assertion 'cs != NULL'
failed``). After a broker restart revocations and assignments queue up, which is how the delivery
worker died. Here every worker's consumer also gets statistics events every 20 ms, so events are
always queued behind the assignment callback: a worker that calls such a method in it aborts at
once, deterministically.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from waiting import wait_until

from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue

pytestmark = pytest.mark.integration

PARTITIONS = 2

SCRIPT = textwrap.dedent("""
    import signal, sys
    from confluent_kafka import Consumer
    from watchtower.workers.tx_worker import tx_consumer_config
    from watchtower.delivery.worker import DeliveryWorker
    from watchtower.replay.worker import ReplayWorker

    bootstrap, prefix, kind = sys.argv[1:4]
    worker = (DeliveryWorker if kind == "delivery" else ReplayWorker)(bootstrap, "callbacks", prefix=prefix)
    worker.consumer.close()
    worker.consumer = Consumer({**tx_consumer_config(bootstrap, worker.group, "wt-callbacks"),
                                "statistics.interval.ms": 20, "stats_cb": lambda _stats: None})
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()
""")


def read_health(path: Path) -> dict[str, object] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("kind", ["delivery", "replay"])
def test_the_assignment_callback_leaves_consume_able_to_serve_the_next_callback(
        kafka_bootstrap: str, tmp_path: Path, kind: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, catalogue(prefix, partitions=PARTITIONS))
    health = tmp_path / "health.json"
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, str(script), kafka_bootstrap, prefix, kind], stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, "WATCHTOWER_HEALTH_FILE": str(health)})
    try:
        # Serving its partitions, then written again at least once more (writes come at most once a
        # second): the consume() that ran the assignment callback went on serving callbacks.
        assigned_at: int | None = None

        def served_then_written_again() -> bool:
            nonlocal assigned_at
            h = read_health(health)
            if proc.poll() is not None:
                pytest.fail(f"the {kind} worker exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
            if h is not None and h.get("partitions") == list(range(PARTITIONS)):
                if assigned_at is None:
                    assigned_at = int(h["updated_ms"])  # type: ignore[call-overload]
                elif int(h["updated_ms"]) > assigned_at:  # type: ignore[call-overload]
                    return True
            return False

        # The timeout is a safety net: a rebalance on a loaded machine takes seconds.
        wait_until(lambda: f"the {kind} worker to serve its partitions:\n{log.read_text()}", served_then_written_again,
                   timeout_s=120, every_s=0.1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, f"the {kind} worker exited with {code}:\n{log.read_text()[-2000:]}"
