"""Ingestion steps back from the CPU while the host has room and takes it back when it has none
(`watchtower.ingest.priority`): the settings, the decision on the host's idle CPU, and the kernel's
session group that a process sets and raises back without privilege."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from watchtower.ingest import priority
from watchtower.ingest.priority import (
    ENV_NICE,
    ENV_YIELD,
    LATE_S,
    MAX_SETTLE_S,
    REACT_S,
    SETTLE_S,
    HostIdle,
    Yielder,
    niceness_steps,
    yield_mode,
)

pytestmark = pytest.mark.no_broker


def test_the_settings_are_checked_and_name_themselves() -> None:
    assert niceness_steps({}) == priority.DEFAULT_NICE == 10
    assert niceness_steps({ENV_NICE: " 0 "}) == 0
    assert niceness_steps({ENV_NICE: "19"}) == 19
    for bad in ("20", "-5", "ten", "1.5", "²", "٣", "9" * 5000):
        with pytest.raises(ValueError, match=ENV_NICE):
            niceness_steps({ENV_NICE: bad})
    assert yield_mode({}) == "auto"
    assert yield_mode({ENV_YIELD: " Always "}) == "always"
    for bad in ("never", "1", "x" * 5000):
        with pytest.raises(ValueError, match=ENV_YIELD) as refused:
            yield_mode({ENV_YIELD: bad})
        assert len(str(refused.value)) < 200, "a hostile value is not echoed whole"


class FakeGroup(priority.SessionGroup):
    """Records what was asked; refuses while `refuse` (as the kernel's rate limit does)."""

    def __init__(self) -> None:
        self.set_to: list[int] = []
        self.refuse = False

    def available(self) -> bool:
        return True

    def set(self, nice: int) -> bool:
        if self.refuse:
            return False
        self.set_to.append(nice)
        return True


def _yielder(idle: list[float]) -> tuple[Yielder, FakeGroup]:
    group = FakeGroup()
    readings = iter(idle)
    return Yielder(10, idle=lambda: next(readings), group=group), group


def _run(yielder: Yielder, steps: int) -> None:
    for _ in range(steps):
        yielder.step()


def test_it_steps_back_only_after_the_host_has_had_room_for_a_while_and_takes_the_cpu_back_soon() -> None:
    yielder, group = _yielder([0.5] * (SETTLE_S - 1) + [0.5] + [0.05] * REACT_S + [0.5] * SETTLE_S)
    _run(yielder, SETTLE_S - 1)
    assert (yielder.yielding, group.set_to) == (False, []), "it starts at full priority: no room seen yet"
    _run(yielder, 1)
    assert (yielder.yielding, group.set_to) == (True, [10])
    _run(yielder, REACT_S - 1)
    assert yielder.yielding, "a short busy spell is not enough"
    _run(yielder, 1)
    assert (yielder.yielding, group.set_to) == (False, [10, 0]), "a host with no room gets ingestion back at once"
    _run(yielder, SETTLE_S - 1)
    assert not yielder.yielding, "the room seen before it took the CPU back does not count again"
    _run(yielder, 1)
    assert (yielder.yielding, group.set_to) == (True, [10, 0, 10])
    assert yielder.describe() == {"mode": "auto", "nice": 10, "yielding": True, "changes": 3, "settle_s": SETTLE_S,
                                  "host_idle": 0.5}


def test_a_host_near_its_capacity_never_sees_ingestion_step_back() -> None:
    # 1,000 feeds on two cores: the host is never idle enough.
    yielder, group = _yielder([0.12, 0.18, 0.15, 0.19, 0.02] * 20)
    _run(yielder, 100)
    assert (yielder.yielding, group.set_to) == (False, [])
    # A host filling up (new feeds starting) is idle on average but not in every second.
    yielder, group = _yielder([0.9, 0.9, 0.1, 0.9, 0.9] * 20)
    _run(yielder, 100)
    assert (yielder.yielding, group.set_to) == (False, [])


def test_late_work_takes_the_cpu_back_at_once_and_each_time_doubles_the_wait_for_room() -> None:
    """A host near its capacity can show room between the bursts at each block start while a
    lowered ingestion falls behind: its own late work takes the CPU back."""
    group = FakeGroup()
    lateness: list[float | None] = []
    yielder = Yielder(10, idle=lambda: 0.5, group=group)  # always room
    yielder.watch(lambda: lateness.pop(0) if lateness else None)
    _run(yielder, SETTLE_S)
    assert yielder.yielding
    lateness += [0.8, LATE_S - 0.1]  # on time, and late but within bounds
    _run(yielder, 2)
    assert yielder.yielding
    lateness.append(LATE_S)
    _run(yielder, 1)
    assert (yielder.yielding, group.set_to, yielder.settle_s) == (False, [10, 0], 2 * SETTLE_S)
    _run(yielder, 2 * SETTLE_S - 1)
    assert not yielder.yielding, "it waits twice as long for room"
    lateness.append(LATE_S + 5)  # late again at full priority: the room seen so far does not count
    _run(yielder, 1)
    assert (yielder.yielding, len(yielder.samples)) == (False, 1)
    _run(yielder, 2 * SETTLE_S - 2)
    assert not yielder.yielding
    _run(yielder, 1)
    assert yielder.yielding
    for _ in range(12):  # each time late: the wait doubles, up to its bound
        lateness.append(LATE_S)
        _run(yielder, 1 + yielder.settle_s * 2)
    assert yielder.settle_s == MAX_SETTLE_S


def test_a_take_back_the_kernel_refuses_is_tried_again_though_the_late_work_was_told_once() -> None:
    group = FakeGroup()
    lateness: list[float | None] = []
    yielder = Yielder(10, idle=lambda: 0.5, group=group)
    yielder.watch(lambda: lateness.pop(0) if lateness else None)
    _run(yielder, SETTLE_S)
    assert yielder.yielding
    group.refuse = True
    lateness.append(LATE_S + 1)
    _run(yielder, 2)
    assert yielder.yielding, "refused twice"
    group.refuse = False
    _run(yielder, 1)
    assert (yielder.yielding, group.set_to) == (False, [10, 0])


def test_a_refused_change_is_tried_again_and_an_unknown_reading_changes_nothing() -> None:
    yielder, group = _yielder([None] * 5 + [0.9] * (SETTLE_S + 2))  # type: ignore[list-item]
    group.refuse = True
    _run(yielder, 5 + SETTLE_S)
    assert (yielder.yielding, len(yielder.samples)) == (False, SETTLE_S)
    group.refuse = False
    _run(yielder, 1)
    assert (yielder.yielding, group.set_to) == (True, [10])


def test_the_host_idle_share_is_read_from_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    host = HostIdle(stat)
    stat.write_text("cpu  200 0 200 800 100 0 0 0 0 0\ncpu0 1 2 3\n")  # 300 jiffies, 100 idle
    assert host.sample() == pytest.approx(1 / 3)
    assert host.sample() is None, "no time passed"
    stat.write_text("garbage\n")
    assert host.sample() is None
    assert HostIdle().sample() is None or 0 <= (HostIdle().sample() or 0) <= 1


@pytest.mark.parametrize(("cgroup", "root"), [
    ("0::/\n", True),  # cgroup v2, the root
    ("0::/user.slice/user-1000.slice/session-2.scope\n", False),
    ("4:memory:/some/limit\n3:cpuset:/\n1:cpu,cpuacct:/\n0::/\n", True),  # v1: the cpu hierarchy decides
    ("1:cpu,cpuacct:/docker/0123abcd\n0::/\n", False),  # a container's CPU cgroup
    ("garbage\n", False),
    ("", False),
])
def test_session_groups_apply_only_in_the_root_cpu_cgroup(tmp_path: Path, cgroup: str, root: bool) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "self/cgroup").write_text(cgroup)
    assert priority.SessionGroup(tmp_path)._in_root_cpu_cgroup() is root


def _child(env: dict[str, str], code: str, *, session: bool) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         start_new_session=session, timeout=60)
    return dict(json.loads(out.stdout))


READ = ("import json, os, re; from pathlib import Path\n"
        "def group():\n"
        "    m = re.search(r'nice (-?\\d+)', Path('/proc/self/autogroup').read_text())\n"
        "    return int(m.group(1)) if m else None\n")


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no session groups on this kernel")
def test_a_session_leader_sets_its_own_group_and_takes_it_back() -> None:
    """The kernel lets a process raise its session group's nice value back to 0 without privilege,
    which `auto` relies on; a process that does not lead its session leaves the group (its shell's) alone."""
    env = dict(os.environ)
    code = READ + ("from watchtower.ingest.priority import SessionGroup\n"
                   "g = SessionGroup(); ok = g.available(); seen = []\n"
                   "for n in (10, 0):\n"
                   "    import time; time.sleep(0.15)  # the kernel takes one change every 100 ms\n"
                   "    seen.append((g.set(n), group()))\n"
                   "print(json.dumps({'available': ok, 'seen': seen}))\n")
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    led = _child(env, code, session=True)
    assert led["available"] is enabled
    if enabled:
        assert led["seen"] == [[True, 10], [True, 0]]
    unled = _child(env, READ + "from watchtower.ingest.priority import SessionGroup\n"
                   "print(json.dumps({'available': SessionGroup().available()}))\n", session=False)
    assert unled == {"available": False}


@pytest.mark.parametrize(("settings", "runner", "mode"), [
    ({}, False, "auto"),
    ({}, True, "never"),  # a runner keeps its priority unless told `always`
    ({ENV_YIELD: "always"}, False, "always"),
    ({ENV_YIELD: "always"}, True, "always"),
    ({ENV_NICE: "0"}, False, "never"),
])
def test_an_ingestion_process_applies_the_settings_as_it_starts(settings: dict[str, str], runner: bool,
                                                                mode: str) -> None:
    """In a process of its own, leading its session: lowering this test's priority would slow the run."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_NICE, ENV_YIELD)} | settings
    code = READ + ("from watchtower.ingest import priority\n"
                   f"before = os.nice(0); how = priority.start(runner={runner})\n"
                   "print(json.dumps({'how': {k: v for k, v in how.items() if k != 'why'}, 'before': before,\n"
                   "                  'nice': os.nice(0), 'group': group()}))\n")
    seen = _child(env, code, session=True)
    grouped = priority.SessionGroup().switch.exists() and Path(
        "/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    before = int(seen["before"])  # type: ignore[call-overload]
    if mode == "always":
        assert seen["nice"] == min(19, before + 10), "always: the process's own niceness"
        assert seen["group"] == (10 if grouped else seen["group"])
        assert seen["how"]["mode"] == "always"  # type: ignore[index]
    elif mode == "auto" and grouped:
        # Full priority at the start: it steps back only once the host has shown room.
        assert seen["how"] == {"mode": "auto", "nice": 10, "yielding": False, "changes": 0, "settle_s": SETTLE_S,
                               "host_idle": None}
        assert (seen["nice"], seen["group"]) == (before, 0)
    else:
        assert (seen["how"]["mode"], seen["nice"]) == ("never", before)  # type: ignore[index]
