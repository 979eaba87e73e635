"""Lowering a process's CPU priority so that it counts against every other process on the host.

``nice`` orders the runnable threads of one scheduling group. Linux with autogroup scheduling
(``/proc/sys/kernel/sched_autogroup_enabled`` is 1, the default of many distributions' kernels)
puts each session in a group of its own and shares the CPU between the groups first, by each
group's own nice value (``/proc/PID/autogroup``). A process niced in a session of its own (what
``watchtower up`` starts, what ``setsid`` starts) then still gets as much CPU as any other session:
its niceness orders only its own threads. Measured on two busy cores, four busy processes each in a
session of its own, two niced 19: each still got 0.50 cores; with their groups niced too, the
niced two got 0.03 each.

So whoever starts a service in a session of its own lowers that session's group by the service's
niceness as well: the supervisor does for every process it starts niced (`stack.ServiceSet`), when
the kernel groups by session. (The ingestion processes set and take back their own group as the
host's load changes: `watchtower.ingest.priority`.) Only a session's leader's group is lowered
(it is then its own and its children's); a shell's group is never touched, which would slow the
whole terminal.

In a container or a systemd unit the process sits in a cgroup and
the autogroup does not apply; its niceness then orders it against the cgroup's other processes,
and a deployment gives the cgroup its CPU weight (compose's ``cpu_shares``). A process started by
hand with ``setsid`` is its starter's to lower (``echo 10 > /proc/PID/autogroup``).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Final

#: 1 when the kernel groups the CPU by session.
AUTOGROUP_SWITCH: Final = Path("/proc/sys/kernel/sched_autogroup_enabled")
_NICE = re.compile(rb"nice\s+(-?\d+)")


def autogroup_enabled() -> bool:
    """True when this kernel shares the CPU between sessions before the processes in each."""
    try:
        return AUTOGROUP_SWITCH.read_bytes().strip() == b"1"
    except OSError:
        return False


def group_niceness(pid: int) -> int | None:
    """The nice value of `pid`'s session group (``/proc/PID/autogroup``), or None without one."""
    try:
        match = _NICE.search(Path(f"/proc/{pid}/autogroup").read_bytes())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def lower_group(pid: int, steps: int) -> int | None:
    """Lower the session group of `pid` by `steps` (at most to 19) when the kernel groups by session
    and `pid` leads its session; the group's nice value then, or None when nothing applied (no
    autogroup, not a session leader, no permission)."""
    if steps <= 0 or not autogroup_enabled():
        return None
    try:
        if os.getsid(pid) != pid:
            return None  # the group is a shell's or a supervisor's: not ours to lower
    except OSError:
        return None
    current = group_niceness(pid)
    if current is None:
        return None
    wanted = min(19, current + steps)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(wanted))
        return group_niceness(pid)
    return None
