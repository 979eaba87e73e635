"""`watchtower up|down|status`: the whole local stack (broker, stream workers, projections + API)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from watchtower.cli import settings
from watchtower.local.broker import LocalKafka
from watchtower.local.config import DEFAULT_CONTROLLER_PORT, DEFAULT_PORT, ClusterSpec
from watchtower.local.errors import LocalStackError
from watchtower.local.paths import default_data_dir, watchtower_home
from watchtower.local.stack import ServiceSet
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import DEFAULT_PARTITIONS, catalogue, topic_prefix

DEFAULT_API_PORT = 8470


def _state_file() -> Path:
    return watchtower_home() / "stack" / "services.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return "watchtower" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return True


def _load_state() -> dict[str, Any]:
    try:
        data = json.loads(_state_file().read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _services_status(state: dict[str, Any]) -> dict[str, Any]:
    pids = state.get("pids", {})
    return {name: {"pid": pid, "running": _alive(int(pid))} for name, pid in pids.items()}


@click.command("up")
@click.option("--port", default=DEFAULT_PORT, show_default=True, envvar="WATCHTOWER_LOCAL_PORT")
@click.option("--controller-port", default=DEFAULT_CONTROLLER_PORT, show_default=True,
              envvar="WATCHTOWER_LOCAL_CONTROLLER_PORT")
@click.option("--api-port", default=DEFAULT_API_PORT, show_default=True, envvar="WATCHTOWER_API_PORT")
@click.option("--workers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Stream-actor workers (they share the command partitions).")
@click.option("--partitions", type=click.IntRange(1, 256), default=DEFAULT_PARTITIONS, show_default=True)
def up(port: int, controller_port: int, api_port: int, workers: int, partitions: int) -> None:
    """Start the embedded Kafka, create the topics, and run the workers and the HTTP API."""
    state = _load_state()
    running = {n: s for n, s in _services_status(state).items() if s["running"]}
    if running:
        click.echo(f"already up: API {state.get('api_url')} (services: {', '.join(sorted(running))}); "
                   "`watchtower down` first to restart")
        return
    broker = LocalKafka(ClusterSpec(default_data_dir(port), port, controller_port))
    waited = broker.up()
    bootstrap = broker.spec.bootstrap
    started = f"started in {waited:.1f}s" if waited else "already running"
    click.echo(f"kafka    {bootstrap} ({started})")
    prefix = topic_prefix()
    ensure_topics(bootstrap, catalogue(prefix, partitions=partitions))
    log_dir = watchtower_home() / "stack" / "logs"
    services = ServiceSet(bootstrap, prefix, log_dir, api_port=api_port)
    for i in range(workers):
        services.start_worker(f"w{i + 1}")
    services.start_projection("p1")
    t0 = time.monotonic()
    try:
        services.wait_ready()
    except LocalStackError:
        services.stop()
        raise
    pids = services.pids()
    _state_file().parent.mkdir(parents=True, exist_ok=True)
    _state_file().write_text(json.dumps({"bootstrap": bootstrap, "port": port, "controller_port": controller_port,
                                         "prefix": prefix, "api_url": services.api_url,
                                         "pids": pids, "logs": str(log_dir)}, indent=2) + "\n")
    settings.save({"bootstrap": bootstrap, "api": services.api_url})
    click.echo(f"workers  {workers} stream-actor worker(s), 1 projection worker "
               f"(ready in {time.monotonic() - t0:.1f}s)")
    click.echo(f"api      {services.api_url}  (OpenAPI: {services.api_url}/openapi.json)")
    click.echo(f"logs     {log_dir}")


@click.command("down")
@click.option("--keep-kafka", is_flag=True, help="Stop the workers and the API but leave the broker running.")
def down(keep_kafka: bool) -> None:
    """Stop the workers, the HTTP API and (unless --keep-kafka) the embedded broker."""
    state = _load_state()
    pids = {name: int(pid) for name, pid in state.get("pids", {}).items() if _alive(int(pid))}
    for pid in pids.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in pids.values():
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    _state_file().unlink(missing_ok=True)
    click.echo(f"stopped {len(pids)} service process(es)")
    if not keep_kafka and state.get("port"):
        port = int(state["port"])
        broker = LocalKafka(ClusterSpec(default_data_dir(port), port, int(state["controller_port"])))
        broker.down()
        click.echo(f"kafka stopped ({state['bootstrap']})")


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Which services of the local stack are running."""
    state = _load_state()
    services = _services_status(state)
    body = {"api_url": state.get("api_url"), "bootstrap": state.get("bootstrap"), "services": services}
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    if not services:
        click.echo("not up; start the stack with `watchtower up`")
        return
    click.echo(f"api {body['api_url']}  kafka {body['bootstrap']}")
    for name, s in sorted(services.items()):
        click.echo(f"  {name:16} pid {s['pid']:>7}  {'running' if s['running'] else 'STOPPED'}")
