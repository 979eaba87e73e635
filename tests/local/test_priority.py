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
    with `lowered`, each lowers itself by 19 first."""
    code = ("import sys\nfrom watchtower.local.priority import lower_priority\n"
            "if sys.argv[1] == '1':\n    lower_priority(19)\nwhile True:\n    pass\n")
    return [subprocess.Popen([sys.executable, "-c", code, "1" if lowered else "0"], start_new_session=True)
            for _ in range(n)]


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
def test_a_process_lowers_its_session_group_only_when_it_leads_the_session() -> None:
    code = ("import os; from watchtower.local import priority; before = priority.group_niceness(os.getpid()); "
            "_, lowered = priority.lower_priority(5); print(before, lowered, priority.group_niceness(os.getpid()))")

    def run(**kw: bool) -> list[int | None]:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, **kw)
        return [None if v == "None" else int(v) for v in out.stdout.split()]

    if not priority.autogroup_enabled():
        assert run(start_new_session=True)[1] is None, "no session groups: nothing to lower"
        return
    before, lowered, after = run(start_new_session=True)
    assert before is not None
    assert lowered == after == min(19, before + 5)
    # Not a session leader: its group is this test's session, which it must leave alone.
    ours = priority.group_niceness(os.getpid())
    before, lowered, after = run()
    assert lowered is None
    assert before == after == ours
