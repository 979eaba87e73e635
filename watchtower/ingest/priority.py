"""Ingestion steps back from the CPU while the host has room, and takes it back when it has none.

A tick has a block to become a message; a client's publish wants milliseconds. On a host that the
ingestion processes share with the stream worker, the projection and the broker, each block's burst
of ticks and a client's publish want the cores at once. Ingestion stepping back lets the publish go
first: beside 500 feeds on two cores, niceness 10 brought the plain path's p99 from 1.47-2.05x of
its own to 1.33-1.57x. Near the host's capacity the same niceness starves ingestion (at 1,000 feeds
its backlog grew by 7,000 ticks a minute): the serving path, busy with ingestion's own output,
keeps the cores.

So by default (``WATCHTOWER_INGEST_YIELD=auto``) each ingestion process steps back only while the
host has room. A `Yielder` thread reads the host's idle CPU (``/proc/stat``) every `SAMPLE_S`. Once
the host has been at least `YIELD_ABOVE` idle in each second of the last `SETTLE_S`, it lowers the
process's session group
(``/proc/self/autogroup``) by ``WATCHTOWER_INGEST_NICE`` (default 10). As soon as the host has been
under `STOP_BELOW` idle over `REACT_S`, it raises the group back to 0. Idle CPU does not move with
ingestion's own priority (a lowered process still takes what no one else wants), so the two states
do not chase each other.

Idle CPU alone does not tell a host near its capacity: there the bursts at each block start fill
the cores while the time between them is idle, and a lowered ingestion falls behind although the
host shows room. So the aggregator also watches its own work: how late after its tick's start each
publish is acknowledged. A publish `LATE_S` late takes the CPU back at once, and the process then
waits twice as long for room before it steps back again (up to `MAX_SETTLE_S`). Runners step back
only with ``always`` (`start`).

This needs the kernel to group the CPU by session (autogroup, which it does for processes in the
root CPU cgroup) and the process to lead its session (what ``watchtower up`` and the benchmarks
start). A group's nice value may be raised back to 0 without privilege; a process's own niceness
may not. Elsewhere (a container, a service with a CPU cgroup of its own, a process started from a
shell) ``auto`` leaves the priority as it is; a container gets its CPU weight from the deployment
(compose's ``cpu_shares``).

``WATCHTOWER_INGEST_YIELD=always`` steps back for good: the process's own niceness and, where it
leads its session, its group's. ``WATCHTOWER_INGEST_NICE=0`` never steps back.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

log = logging.getLogger("watchtower.ingest.priority")

ENV_NICE: Final = "WATCHTOWER_INGEST_NICE"
ENV_YIELD: Final = "WATCHTOWER_INGEST_YIELD"
#: How far ingestion steps back while it yields (a nice value, 0 to 19).
DEFAULT_NICE: Final = 10
MODES: Final = ("auto", "always")

#: How often the host's idle CPU is read.
SAMPLE_S: Final = 1.0
#: Step back once the host has had at least this share of its CPU idle in each second of the last
#: `SETTLE_S` (each, not on average: a host filling up as new feeds start shows room between its
#: busy seconds, and 1,000 feeds on two cores left it 7-17% idle)...
YIELD_ABOVE: Final = 0.20
SETTLE_S: Final = 10
#: ... and take the CPU back once it has had less than this idle over `REACT_S`.
STOP_BELOW: Final = 0.10
REACT_S: Final = 2
#: Work this late after its tick's start (two blocks) takes the CPU back at once; each time it
#: does, stepping back again waits for twice as long a stretch of room, up to `MAX_SETTLE_S`.
LATE_S: Final = 2.0
MAX_SETTLE_S: Final = 320


def niceness_steps(env: Mapping[str, str] | None = None) -> int:
    """How far the ingestion processes step back: ``WATCHTOWER_INGEST_NICE`` (0 to 19; unset:
    `DEFAULT_NICE`; 0 never steps back). Anything else is refused, naming the setting."""
    raw = (env if env is not None else os.environ).get(ENV_NICE, "").strip()
    if not raw:
        return DEFAULT_NICE
    # ASCII and at most two digits: str.isdigit alone passes "²" and 5,000-digit strings, on which
    # int() fails without naming the setting.
    if raw.isascii() and raw.isdigit() and len(raw) <= 2 and int(raw) <= 19:
        return int(raw)
    raise ValueError(f"{ENV_NICE} must be a whole number from 0 to 19, got {raw!r}")


def yield_mode(env: Mapping[str, str] | None = None) -> str:
    """``WATCHTOWER_INGEST_YIELD``: ``auto`` (unset) or ``always``; anything else is refused."""
    raw = (env if env is not None else os.environ).get(ENV_YIELD, "").strip().lower() or "auto"
    if raw not in MODES:
        raise ValueError(f"{ENV_YIELD} must be auto or always, got {raw[:40]!r}")
    return raw


class HostIdle:
    """The share of the host's CPU time that was idle between two calls of `sample` (``/proc/stat``)."""

    def __init__(self, stat: Path = Path("/proc/stat")) -> None:
        self.stat = stat
        self._last = self._read()

    def _read(self) -> tuple[int, int] | None:
        """(idle, total) jiffies over all CPUs, or None when they cannot be read."""
        try:
            fields = self.stat.read_bytes().split(b"\n", 1)[0].split()
            # cpu user nice system idle iowait irq softirq steal (guest time is inside user and nice)
            values = [int(v) for v in fields[1:9]]
        except (OSError, ValueError):
            return None
        if not fields or fields[0] != b"cpu" or len(values) < 4:
            return None
        return values[3] + (values[4] if len(values) > 4 else 0), sum(values)

    def sample(self) -> float | None:
        """The idle share since the last call (0 to 1), or None when unknown."""
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return min(1.0, max(0.0, (now[0] - last[0]) / (now[1] - last[1])))


class SessionGroup:
    """This process's session group (``/proc/self/autogroup``): settable when the kernel groups the
    CPU by session and this process leads its session (the group is then its own and its children's)."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.switch = proc / "sys/kernel/sched_autogroup_enabled"
        self.file = proc / "self/autogroup"
        self.cgroup = proc / "self/cgroup"

    def available(self) -> bool:
        try:
            return (self.switch.read_bytes().strip() == b"1" and os.getsid(0) == os.getpid()
                    and self.file.exists() and self._in_root_cpu_cgroup())
        except OSError:
            return False

    def _in_root_cpu_cgroup(self) -> bool:
        """The kernel applies session groups only to processes in the root CPU cgroup: not in a
        container or a service with a CPU cgroup of its own, where the cgroup's weight decides. A
        process in any other cgroup counts as outside (it may be, and then nothing would apply)."""
        entries = [line.split(":", 2) for line in self.cgroup.read_text().splitlines()]
        entries = [e for e in entries if len(e) == 3]  # hierarchy id : controllers : path
        v1 = [path for _id, controllers, path in entries if "cpu" in controllers.split(",")]
        paths = v1 or [path for hid, controllers, path in entries if hid == "0" and not controllers]
        return bool(paths) and all(path == "/" for path in paths)

    def set(self, nice: int) -> bool:
        """Set the group's nice value (0 to 19); False when the kernel refused (e.g. EAGAIN: it
        takes one change every 100 ms from an unprivileged process)."""
        try:
            with self.file.open("w") as out:  # closed here: a refused write raises at the close
                out.write(str(nice))
        except OSError as exc:
            log.debug("the session group's nice value stays: %s", exc)
            return False
        return True


class Yielder:
    """Steps the process's session group back by `steps` while the host has room (module docstring)."""

    def __init__(self, steps: int, *, idle: Callable[[], float | None] | None = None,
                 group: SessionGroup | None = None) -> None:
        self.steps = steps
        self.idle = idle if idle is not None else HostIdle().sample
        self.group = group if group is not None else SessionGroup()
        self.samples: deque[float] = deque(maxlen=MAX_SETTLE_S)
        self.yielding = False
        self.changes = 0
        self.settle_s = SETTLE_S
        self._late_owed = 0.0
        self.late: Callable[[], float | None] = lambda: None
        """How late (s) the process's work was since the last call, at most; None: no work seen.
        Set by the process once its work exists (`watch`)."""

    def watch(self, late: Callable[[], float | None]) -> None:
        """Take the CPU back whenever `late` reports work `LATE_S` late (module docstring)."""
        self.late = late

    def step(self) -> None:
        """Read how late the process's work was and the host's idle share, once, and step back or
        take the CPU back if they say so."""
        late = max(self.late() or 0.0, self._late_owed)  # a take-back the kernel refused is still owed
        self._late_owed = 0.0
        if self.yielding and late >= LATE_S:
            if not self.group.set(0):
                self._late_owed = late
            else:
                self.yielding = False
                self.changes += 1
                self.settle_s = min(MAX_SETTLE_S, 2 * self.settle_s)
                self.samples.clear()
                log.info("work %.1f s late: ingestion takes the CPU back (session group niceness 0); it waits "
                         "for %d s of room before it steps back again", late, self.settle_s)
            return
        if late >= LATE_S:
            self.samples.clear()  # room seen while work runs late is not room for stepping back
        idle = self.idle()
        if idle is None:
            return
        self.samples.append(idle)
        want = self._wants_to_yield()
        if want != self.yielding and self.group.set(self.steps if want else 0):
            self.yielding = want
            self.changes += 1
            if want:
                log.info("host at least %.0f%% idle in each of the last %d s: ingestion steps back (session group "
                         "niceness %d)", 100 * min(list(self.samples)[-self.settle_s:]), self.settle_s, self.steps)
            else:
                log.info("host %.0f%% idle over the last %d s: ingestion takes the CPU back (session group "
                         "niceness 0)", 100 * self._mean(REACT_S), REACT_S)
                self.samples.clear()  # it steps back again only on room seen since

    def _mean(self, last: int) -> float:
        recent = list(self.samples)[-last:]
        return sum(recent) / len(recent) if recent else 0.0

    def _wants_to_yield(self) -> bool:
        if self.yielding:
            return not (len(self.samples) >= REACT_S and self._mean(REACT_S) < STOP_BELOW)
        return len(self.samples) >= self.settle_s and min(list(self.samples)[-self.settle_s:]) >= YIELD_ABOVE

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(SAMPLE_S):
            try:
                self.step()
            except Exception:  # the priority is an optimisation: never the process's end
                log.exception("the ingestion priority was not adjusted")

    def describe(self) -> dict[str, Any]:
        return {"mode": "auto", "nice": self.steps, "yielding": self.yielding, "changes": self.changes,
                "settle_s": self.settle_s, "host_idle": round(self._mean(REACT_S), 3) if self.samples else None}


_current: dict[str, Any] = {"mode": "never"}


def watch(late: Callable[[], float | None]) -> None:
    """Let this process's `auto` stepping back watch how late its work is (`Yielder.watch`); a no-op
    in any other mode."""
    yielder = _current.get("yielder")
    if isinstance(yielder, Yielder):
        yielder.watch(late)


def describe() -> dict[str, Any]:
    """How this process steps back (for its health file and metrics): ``mode`` (``auto``,
    ``always`` or ``never``), ``nice``, and for ``auto`` whether it ``yielding`` now."""
    yielder = _current.get("yielder")
    return yielder.describe() if isinstance(yielder, Yielder) else dict(_current)


def start(env: Mapping[str, str] | None = None, stop: threading.Event | None = None, *,
          runner: bool = False) -> dict[str, Any]:
    """Apply ``WATCHTOWER_INGEST_YIELD`` and ``WATCHTOWER_INGEST_NICE`` to this process (module
    docstring); what was done (`describe`). Call it before the process starts a thread: with
    ``always``, threads made later (librdkafka's too) inherit the niceness. A bad setting raises
    ValueError naming it.

    A `runner` steps back only with ``always``: its fetches are the first stage of every tick and
    cost little (0.07 ms of CPU a tick against 0.5 ms in the aggregator), and a runner stepped back
    when a burst of new feeds began left 1,000 feeds a backlog they never worked off (4,179 ticks
    pending after 90 s, against 313 with nothing stepped back)."""
    steps, mode = niceness_steps(env), yield_mode(env)
    group = SessionGroup()
    if steps == 0 or (runner and mode == "auto"):
        _current.clear()
        _current.update(mode="never", nice=0)
    elif mode == "always":
        niceness = os.nice(steps)
        _current.clear()
        _current.update(mode="always", nice=niceness, group=steps if group.available() and group.set(steps) else None)
    elif not group.available():
        _current.clear()
        _current.update(mode="never", nice=0,
                        why="the kernel does not group this process's CPU by session (no autogroup, or a CPU "
                            "cgroup of its own, as in a container), or it does not lead its session: a niceness "
                            "could not be taken back")
    else:
        yielder = Yielder(steps, group=group)
        _current.clear()
        _current.update(mode="auto", yielder=yielder)
        threading.Thread(target=yielder.run, args=(stop or threading.Event(),), name="ingest-priority",
                         daemon=True).start()
    return describe()
