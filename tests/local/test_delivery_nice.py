"""The push delivery worker runs at a lower CPU priority than the rest of the stack (its fan-out
must not take the CPU from publishes), by ``WATCHTOWER_DELIVERY_NICE`` (default 10, 0 = off).

No broker is needed: the processes are started against an address nobody listens on, their
priority is read from the kernel, and they are killed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import wait_until

from watchtower.local import priority
from watchtower.local.stack import DELIVERY_MODULE, WORKER_MODULE, ServiceSet, delivery_nice


@pytest.fixture
def services(tmp_path: Path) -> Iterator[ServiceSet]:
    s = ServiceSet("127.0.0.1:1", "nicetest", tmp_path / "logs")
    try:
        yield s
    finally:
        for proc in s.procs.values():
            proc.kill()
            proc.wait(30)


def priority_once_running(services: ServiceSet, name: str, module: str) -> int:
    """The niceness of process `name` once it runs Python with `module` (a `nice` wrapper execs into it)."""
    pid = services.procs[name].pid

    def runs_module() -> bool:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return module.encode() in argv and not any(a.endswith(b"/nice") or a == b"nice" for a in argv)

    wait_until(f"{name} to run {module}", runs_module, timeout_s=60, every_s=0.05)
    return os.getpriority(os.PRIO_PROCESS, pid) - os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.no_broker
def test_the_delivery_worker_runs_niced_by_default_and_other_services_do_not(
        services: ServiceSet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHTOWER_DELIVERY_NICE", raising=False)
    services.start_worker("w1")
    name = services.start_delivery("d1")
    assert priority_once_running(services, name, DELIVERY_MODULE) == min(10, 19 - os.getpriority(os.PRIO_PROCESS, 0))
    assert priority_once_running(services, "worker-w1", WORKER_MODULE) == 0
    if priority.autogroup_enabled():  # each leads a session: the delivery worker's group is lowered too
        worker_group = priority.group_niceness(services.procs["worker-w1"].pid)
        assert worker_group is not None
        assert priority.group_niceness(services.procs[name].pid) == min(19, worker_group + 10)


@pytest.mark.no_broker
def test_the_delivery_nice_is_configurable_and_zero_turns_it_off(
        services: ServiceSet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_DELIVERY_NICE", "0")
    off = services.start_delivery("d1")
    assert priority_once_running(services, off, DELIVERY_MODULE) == 0
    on = services.start_delivery("d2", extra_env={"WATCHTOWER_DELIVERY_NICE": "3"})  # extra_env wins
    assert priority_once_running(services, on, DELIVERY_MODULE) == min(3, 19 - os.getpriority(os.PRIO_PROCESS, 0))


def test_the_delivery_nice_setting_is_read_with_bounds() -> None:
    assert delivery_nice({}) == 10
    assert delivery_nice({"WATCHTOWER_DELIVERY_NICE": "0"}) == 0
    assert delivery_nice({"WATCHTOWER_DELIVERY_NICE": "-5"}) == 0  # raising priority needs privileges
    assert delivery_nice({"WATCHTOWER_DELIVERY_NICE": "40"}) == 19
    assert delivery_nice({"WATCHTOWER_DELIVERY_NICE": "soon"}) == 10
