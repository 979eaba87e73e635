"""Broker failover under load: kill -9 two brokers of the 3-node cluster during 8,000 publishes
(20,000 in the soak tier).

The stack (two stream-actor workers and a projection) runs on the embedded 3-node KRaft cluster
(RF 3, min ISR 2). Two publisher threads send the signed publishes across 10 streams through
the Kafka command transport, each with a window of publishes in flight. Meanwhile the broker that
leads the most partitions is killed with SIGKILL and started again; once it is back and every
partition is fully replicated, the then busiest broker is killed and started again (one broker
away at a time: two of three KRaft voters down is a lost quorum, an outage by design; see
tests/cluster_stack.py). Afterwards:

- every acknowledged publish is in the messages archive and served by the projection;
- every stream is gapless 1..N in both, every message verifies under the stream's key schedule
  and is the one we signed (a present publish that was never acknowledged is thus in sequence);
- the projection's digest equals the offline rebuild's, and nothing was quarantined;
- every publish was answered (none hangs), and a refusal carries a spec error code;
- the workers and the projection are the processes started at the beginning (nobody restarted them).

The scenario's timeline is printed (run with ``-s``); bench/bench_failover.py measures it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_stack import FailoverRun, check_run, cluster_stack
from tiers import scale

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.soak]

STREAMS = 10
PER_STREAM = scale(800, 2_000)


@pytest.mark.timeout(1500)
def test_acknowledged_publishes_survive_two_broker_kills_gapless_verified_and_rebuildable(tmp_path: Path) -> None:
    with cluster_stack(tmp_path) as (lk, services):
        pids = services.pids()
        run = FailoverRun(lk, services, streams=STREAMS, per_stream=PER_STREAM)
        run.run()
        t0 = run.timeline[0][0]
        print("\n" + "\n".join(f"{t - t0:8.1f}s  {what}" for t, what in run.timeline))

        # Both kills hit a running load: publishes were still unanswered when each broker died.
        kills = [t for t, what in run.timeline if what.startswith("kill -9")]
        assert len(kills) == 2, run.timeline
        assert len(set(run.killed)) == 2, "the same broker was killed twice"
        last_answer = max(p.answered or 0.0 for p in run.items)
        assert all(k < last_answer for k in kills), "a broker was killed after the load ended"

        report = check_run(run)
        print(f"acknowledged {report['acked']}, present {report['present']}, refused {dict(report['errors'])}, "
              f"unanswered {report['unanswered']}")
        assert services.pids() == pids, "a worker or the projection died or was restarted"

        for where in ("archive", "projection"):
            for sid, found in report[where].items():
                assert found["acked_missing"] == [], f"{where} {sid}: acknowledged publishes missing"
                assert found["gapless"], f"{where} {sid}: not 1..N"
                assert found["bad_signatures"] == [], f"{where} {sid}: signatures that do not verify"
                assert found["not_ours"] == [], f"{where} {sid}: messages we did not sign"
                assert found["count"] == report["heads"][sid]
        assert report["acked"] <= report["present"] <= STREAMS * PER_STREAM
        # No publish hangs: each was acknowledged or refused with a spec error code.
        assert report["unanswered"] == 0
        assert all(code.isupper() for code in report["errors"]), report["errors"]
        # The load is not a toy: the great majority of publishes went through the failovers.
        assert report["acked"] >= 0.9 * STREAMS * PER_STREAM, report["errors"]

        digest = report["digest"]
        assert digest["live"] == digest["rebuild"], digest
        assert digest["counts"]["streams"] == STREAMS
        assert digest["live_quarantined"]["count"] == digest["rebuild_quarantined"]["count"] == 0, digest
