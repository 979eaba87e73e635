"""A lowered process yields the CPU to every other process on the host, not only among its own
threads: where the kernel groups the CPU by session (autogroup), lowering a process that leads its
session lowers its session's group too (`watchtower.local.priority`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from watchtower.local import priority

#: Busy for this long in each spinner: long enough for the kernel's shares to show in CPU time.
SPIN_S = 3.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _spinners(lowered: bool, n: int) -> list[subprocess.Popen[bytes]]:
    """`n` busy processes, each leading a session of its own (as `watchtower up` starts services);
    with `lowered`, each niced 19 with its session's group lowered as the supervisor does."""
    procs = []
    for _ in range(n):
        p = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        if lowered:
            os.setpriority(os.PRIO_PROCESS, p.pid, 19)
            priority.lower_group(p.pid, 19)
        procs.append(p)
    return procs


@pytest.mark.no_broker
def test_lowered_processes_in_sessions_of_their_own_yield_the_cpu_to_the_others() -> None:
    """As many normal as lowered busy processes, each twice as many as the cores: each side
    alone could use every core. The lowered ones get a small share (before the session group
    was lowered too, each side got half on a kernel that groups by session)."""
    n = 2 * (os.cpu_count() or 1)
    procs = _spinners(False, n) + _spinners(True, n)
    try:
        time.sleep(SPIN_S)
        used = [_cpu_seconds(p.pid) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
    normal, lowered = sum(used[:n]), sum(used[n:])
    assert lowered < normal / 4, f"the lowered processes used {lowered:.2f} s of CPU against {normal:.2f} s"


@pytest.mark.no_broker
def test_a_session_group_is_lowered_only_for_the_leader_of_its_session() -> None:
    def child(**kw: bool) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], **kw)

    own, other = child(start_new_session=True), child()
    try:
        if not priority.autogroup_enabled():
            assert priority.lower_group(own.pid, 5) is None, "no session groups: nothing to lower"
            return
        before = priority.group_niceness(own.pid)
        assert before is not None
        assert priority.lower_group(own.pid, 5) == priority.group_niceness(own.pid) == min(19, before + 5)
        # Not a session leader: its group is this test's session, which must be left alone.
        ours = priority.group_niceness(os.getpid())
        assert priority.lower_group(other.pid, 5) is None
        assert priority.group_niceness(os.getpid()) == ours
    finally:
        for p in (own, other):
            p.kill()
            p.wait(10)
