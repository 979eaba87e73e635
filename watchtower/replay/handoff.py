"""Handing a large replay to Spark (``watchtower.spark.replay_job``).

A plan of more than ``WATCHTOWER_SPARK_REPLAY_THRESHOLD`` sequences (default 250,000; 0 = never)
is fulfilled by Spark: the worker first writes ``ReplayProgress(engine="spark")`` (so every reader
sees who fulfils it, and the worker never does it itself), then runs the job as a subprocess with
the same environment. A spark replay found without a terminal record after a restart is launched
again (at-least-once: the job's deliveries carry the replay id, and readers deduplicate by
(stream, sequence)).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Final

from watchtower.protocol.replay.records import REPLAY_RECORD_VERSION, ReplayProgress
from watchtower.protocol.replay.status import ReplayView

log = logging.getLogger("watchtower.replay.handoff")

ENV_THRESHOLD: Final = "WATCHTOWER_SPARK_REPLAY_THRESHOLD"
DEFAULT_THRESHOLD: Final = 250_000
JOB_MODULE: Final = "watchtower.spark.replay_job"


def spark_threshold(env: Mapping[str, str] = os.environ) -> int:
    """The plan size above which Spark fulfils a replay (0: never)."""
    raw = env.get(ENV_THRESHOLD, "").strip()
    if not raw:
        return DEFAULT_THRESHOLD
    if not raw.isdigit():
        raise ValueError(f"{ENV_THRESHOLD} must be a whole number of events (0 = never hand off), got {raw!r}")
    return int(raw)


def wants_spark(view: ReplayView, threshold: int) -> bool:
    """Whether a replay not yet started goes to Spark."""
    return threshold > 0 and view.total > threshold and view.engine == "service" and view.next_offset is None


def spark_progress(view: ReplayView, partition: int, now_ms: int) -> ReplayProgress:
    """The record that marks `view` as Spark's, written before the job starts."""
    return ReplayProgress(v=REPLAY_RECORD_VERSION, replay_id=view.replay_id, stream_id=view.stream_id, engine="spark",
                          partition=partition, next_offset=0, next_sequence=view.next_sequence,
                          delivered=view.delivered, filtered=view.filtered, skipped=view.skipped, at_ms=now_ms)


class SparkLauncher:
    """Starts one job per replay (at most once per process; a restart launches the unfinished again)."""

    def __init__(self, bootstrap: str, prefix: str | None) -> None:
        self.bootstrap, self.prefix = bootstrap, prefix
        self.jobs: dict[int, subprocess.Popen[bytes]] = {}
        self.launched: set[int] = set()

    def launch(self, view: ReplayView) -> None:
        if view.replay_id in self.launched:
            return
        self.launched.add(view.replay_id)
        cmd = [sys.executable, "-m", JOB_MODULE, "--bootstrap", self.bootstrap, "--stream-id", view.stream_id,
               "--replay-id", str(view.replay_id)]
        env = dict(os.environ)
        if self.prefix is not None:
            env["WATCHTOWER_TOPIC_PREFIX"] = self.prefix
        log.info("replay %d (%d events) is handed to Spark: %s", view.replay_id, view.total, " ".join(cmd))
        self.jobs[view.replay_id] = subprocess.Popen(cmd, env=env)  # our own module, fixed arguments

    def reap(self) -> None:
        """Forget finished jobs (a failed one is logged; its replay stays unfinished until a restart)."""
        for rid, proc in list(self.jobs.items()):
            code = proc.poll()
            if code is None:
                continue
            del self.jobs[rid]
            if code != 0:
                log.error("the Spark job of replay %d exited with code %d; it is launched again when the "
                          "worker restarts", rid, code)

    def stop(self) -> None:
        for proc in self.jobs.values():
            if proc.poll() is None:
                proc.terminate()
