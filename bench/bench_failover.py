"""Broker failover under load, measured: the scenario of tests/workers/test_broker_failover.py.

Starts the embedded 3-node KRaft cluster (RF 3, min ISR 2) and the stack on it (stream-actor
workers and a projection), publishes `--streams` x `--msgs-per-stream` signed messages through
the Kafka command transport (`--publishers` clients, `--rate` msg/s offered, `--inflight`
unanswered at most), kills -9 the broker leading the most partitions and restarts it after
`--down-s`, waits until every partition is fully replicated again, then does the same to the
broker that leads the most partitions by then (one broker away at a time; see tests/cluster_stack.py).

Reports:
- acknowledged vs present (archive and projection), refusals by spec code, unanswered publishes;
- per kill: time from the kill to the first answer and to the first acknowledgement of a publish
  sent after the kill, and the longest stall (longest time without any answer) while the broker
  was away or catching up; how long the restarted broker took to answer and to be back in sync;
- acknowledged publishes per second before, during and after the failovers, and submit -> ack
  latency in each of those phases;
- whether every stream is gapless with valid signatures, and the projection digest vs the rebuild.

    .venv/bin/python bench/bench_failover.py [--json out.json]

A script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cluster_stack import FailoverRun, Publish, check_run, cluster_stack


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def latency_ms(items: list[Publish]) -> dict[str, float]:
    ms = [((p.answered or 0.0) - p.submitted) * 1000 for p in items if p.acked]
    return {"n": len(ms), "p50": pct(ms, 50), "p99": pct(ms, 99), "max": max(ms) if ms else math.nan}


def failover_figures(run: FailoverRun) -> list[dict[str, Any]]:
    """Per kill: first answer / first new ack after it, the longest stall, the broker's return."""
    answers = sorted(p.answered for p in run.items if p.answered is not None)
    tl = run.timeline
    out = []
    for i, (t_kill, what) in enumerate(tl):
        if not what.startswith("kill -9"):
            continue
        after = tl[i + 1:]
        restart = next(t for t, w in after if w.startswith("restart"))
        back = next(t for t, w in after if w.endswith("answers again"))
        synced = next(t for t, w in after if w.startswith("every partition"))
        window = [a for a in answers if t_kill <= a <= synced]
        gaps = [(b - a, a) for a, b in zip([t_kill, *window], [*window, synced], strict=True)]
        stall, stall_from = max(gaps)
        new_acks = [p.answered for p in run.items if p.acked and p.submitted >= t_kill and p.answered is not None]
        first_any = next((a for a in answers if a >= t_kill), math.nan)
        out.append({"broker": int(what.split()[-1]), "at_s": t_kill - tl[0][0],
                    "first_answer_after_kill_s": first_any - t_kill,
                    "first_ack_of_a_publish_sent_after_kill_s": min(new_acks, default=math.nan) - t_kill,
                    "longest_stall_s": stall, "longest_stall_starts_after_kill_s": stall_from - t_kill,
                    "down_s": restart - t_kill, "broker_answers_after_restart_s": back - restart,
                    "fully_replicated_after_restart_s": synced - restart,
                    "answers_while_away_or_catching_up": len(window)})
    return out


def phase_figures(run: FailoverRun) -> dict[str, dict[str, Any]]:
    """Acknowledged msg/s and submit -> ack latency before, during and after the failovers."""
    kills = [t for t, w in run.timeline if w.startswith("kill -9")]
    synced = [t for t, w in run.timeline if w.startswith("every partition")]
    acked = [p for p in run.items if p.acked]
    start = min(p.submitted for p in run.items)
    end = max(p.answered or 0.0 for p in acked)
    bounds = {"before": (start, kills[0]), "during": (kills[0], synced[-1]), "after": (synced[-1], end)}
    out = {}
    for name, (lo, hi) in bounds.items():
        inside = [p for p in acked if p.answered is not None and lo <= p.answered < hi]
        out[name] = {"seconds": hi - lo, "acked": len(inside),
                     "acked_msg_per_s": len(inside) / (hi - lo) if hi > lo else math.nan,
                     "ack_latency_ms": latency_ms(inside)}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wt-failover-") as tmp:
        t0 = time.monotonic()
        with cluster_stack(Path(tmp), workers=args.workers, partitions=args.partitions) as (lk, services):
            startup = time.monotonic() - t0
            fo = FailoverRun(lk, services, streams=args.streams, per_stream=args.msgs_per_stream,
                             publishers=args.publishers, rate=args.rate, inflight=args.inflight, down_s=args.down_s)
            fo.run()
            t_check = time.monotonic()
            report = check_run(fo)
            check_s = time.monotonic() - t_check
            t_start = fo.timeline[0][0]
            problems = {where: {sid: {k: v for k, v in r.items() if k != "count" and v not in ([], True)}
                                for sid, r in report[where].items()} for where in ("archive", "projection")}
            return {
                "config": vars(args) | {"startup_s": startup},
                "timeline": [{"t_s": t - t_start, "event": w} for t, w in fo.timeline],
                "publishes": len(fo.items), "acked": report["acked"], "present": report["present"],
                "present_in_projection": sum(r["count"] for r in report["projection"].values()),
                "acked_missing": sum(len(r["acked_missing"]) for w in ("archive", "projection")
                                     for r in report[w].values()),
                "refused": dict(report["errors"]), "unanswered": report["unanswered"],
                "problems": {w: {s: p for s, p in v.items() if p} for w, v in problems.items()},
                "digest_equal": report["digest"]["live"] == report["digest"]["rebuild"],
                "digest": report["digest"], "check_s": check_s,
                "failovers": failover_figures(fo), "phases": phase_figures(fo),
            }


def tables(r: dict[str, Any]) -> str:
    c = r["config"]
    out = [f"Broker failover: {r['publishes']:,} publishes over {c['streams']} streams, {c['publishers']} publishers, "
           f"{c['rate']:g} msg/s offered, {c['inflight']} in flight; 3 brokers (RF 3, min ISR 2), "
           f"{c['workers']} workers, 1 projection, {c['partitions']} partitions", ""]
    out += [f"acknowledged {r['acked']:,}   present in the archive {r['present']:,}   present in the projection "
            f"{r['present_in_projection']:,}   acknowledged but missing {r['acked_missing']}",
            f"refused {r['refused'] or 0}   unanswered {r['unanswered']}   gaps/bad signatures "
            f"{r['problems'] or 'none'}   projection digest == rebuild: {r['digest_equal']}", ""]
    head = (f"{'kill -9':<10} {'at s':>6} {'1st answer s':>12} {'1st new ack s':>13} {'longest stall s':>15} "
            f"{'down s':>7} {'answers s':>9} {'in sync s':>9}")
    out += [head, "-" * len(head)]
    for f in r["failovers"]:
        out.append(f"broker {f['broker']:<3} {f['at_s']:>6.1f} {f['first_answer_after_kill_s']:>12.2f} "
                   f"{f['first_ack_of_a_publish_sent_after_kill_s']:>13.2f} {f['longest_stall_s']:>15.2f} "
                   f"{f['down_s']:>7.1f} {f['broker_answers_after_restart_s']:>9.1f} "
                   f"{f['fully_replicated_after_restart_s']:>9.1f}")
    head = (f"{'phase':<8} {'seconds':>8} {'acked':>7} {'acked/s':>8} {'ack p50 ms':>11} {'ack p99 ms':>11} "
            f"{'max ms':>8}")
    out += ["", head, "-" * len(head)]
    for name, p in r["phases"].items():
        lat = p["ack_latency_ms"]
        out.append(f"{name:<8} {p['seconds']:>8.1f} {p['acked']:>7,} {p['acked_msg_per_s']:>8.0f} "
                   f"{lat['p50']:>11.0f} {lat['p99']:>11.0f} {lat['max']:>8.0f}")
    out += ["", "timeline:"] + [f"  {e['t_s']:7.1f}s  {e['event']}" for e in r["timeline"]]
    out.append(f"stack start-up {c['startup_s']:.1f}s; reading back and checking took {r['check_s']:.1f}s")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--msgs-per-stream", type=int, default=2_000)
    parser.add_argument("--publishers", type=int, default=2, help="command clients, each on its own thread")
    parser.add_argument("--rate", type=float, default=250.0, help="offered publishes per second, all publishers")
    parser.add_argument("--inflight", type=int, default=200, help="unanswered publishes at most, all publishers")
    parser.add_argument("--down-s", type=float, default=5.0, help="seconds each killed broker stays down")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="write every result as JSON to PATH")
    args = parser.parse_args(argv)
    report = run(args)
    print(tables(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
