"""How long `watchtower local up` takes to reach a broker that answers metadata.

Runs N cycles of up/down on a fresh data directory (first up formats storage) and on the
same directory again (restart), and reports the median and spread of each. Not a test.

    .venv/bin/python bench/bench_local_up.py --runs 5 [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kafka_fixture import embedded_spec
from tqdm import tqdm

from watchtower.local.broker import LocalKafka


def _timed_up(lk: LocalKafka) -> float:
    t0 = time.monotonic()
    lk.up()
    elapsed = time.monotonic() - t0
    lk.down()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fresh, restart = [], []
    for _ in tqdm(range(args.runs), desc="up/down cycles", disable=args.json):
        with tempfile.TemporaryDirectory() as tmp:
            lk = LocalKafka(embedded_spec(Path(tmp) / "k"))
            fresh.append(_timed_up(lk))
            restart.append(_timed_up(lk))
    report = {
        "runs": args.runs,
        "fresh_up_s": {"median": statistics.median(fresh), "min": min(fresh), "max": max(fresh)},
        "restart_up_s": {"median": statistics.median(restart), "min": min(restart), "max": max(restart)},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key in ("fresh_up_s", "restart_up_s"):
        r = report[key]
        print(f"{key:14} median {r['median']:.2f}s  min {r['min']:.2f}s  max {r['max']:.2f}s")


if __name__ == "__main__":
    main()
