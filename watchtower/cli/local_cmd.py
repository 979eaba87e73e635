"""`watchtower local up|down|status|logs`: the embedded Apache Kafka."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import click

from watchtower.local.broker import LocalKafka
from watchtower.local.config import DEFAULT_CONTROLLER_PORT, DEFAULT_PORT, ClusterSpec
from watchtower.local.paths import default_data_dir


def _spec(port: int, controller_port: int, data_dir: Path | None, nodes: int) -> ClusterSpec:
    heap = 768 if nodes == 1 else 512
    return ClusterSpec(data_dir or default_data_dir(port), port, controller_port, nodes, heap)


_port = click.option("--port", default=DEFAULT_PORT, show_default=True, envvar="WATCHTOWER_LOCAL_PORT",
                     help="Client port of node 1 (node i uses port+i-1).")
_cport = click.option("--controller-port", default=DEFAULT_CONTROLLER_PORT, show_default=True,
                      envvar="WATCHTOWER_LOCAL_CONTROLLER_PORT", help="KRaft controller port of node 1.")
_data = click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                     envvar="WATCHTOWER_LOCAL_DATA_DIR",
                     help="Broker data directory [default: ~/.watchtower/local/kafka-PORT].")
_nodes = click.option("--nodes", type=click.IntRange(1, 5), default=1, show_default=True,
                      help="1 for the embedded default; 3 for a replicated KRaft cluster (RF 3, min ISR 2).")


@click.group("local")
def local() -> None:
    """Run a real Apache Kafka (KRaft) broker on this machine."""


@local.command("up")
@_port
@_cport
@_data
@_nodes
def up(port: int, controller_port: int, data_dir: Path | None, nodes: int) -> None:
    """Format storage once, start the broker(s) and wait until they answer metadata."""
    lk = LocalKafka(_spec(port, controller_port, data_dir, nodes))
    waited = lk.up()
    st = lk.status()
    if waited == 0.0:
        click.echo(f"already running: {st['bootstrap']} (data {st['data_dir']})")
    else:
        click.echo(f"kafka {st['kafka_version']} up in {waited:.1f}s: {st['bootstrap']} (data {st['data_dir']})")


@local.command("down")
@_port
@_cport
@_data
@_nodes
@click.option("--purge", is_flag=True, help="Also delete the data directory.")
def down(port: int, controller_port: int, data_dir: Path | None, nodes: int, purge: bool) -> None:
    """Stop the broker(s) cleanly; leaves no process behind."""
    spec = _spec(port, controller_port, data_dir, nodes)
    LocalKafka(spec).down()
    if purge and spec.data_dir.exists():
        shutil.rmtree(spec.data_dir)
        click.echo(f"stopped; removed {spec.data_dir}")
    else:
        click.echo("stopped")


@local.command("status")
@_port
@_cport
@_data
@_nodes
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def status(port: int, controller_port: int, data_dir: Path | None, nodes: int, as_json: bool) -> None:
    """Report state, bootstrap address and data directory."""
    st = LocalKafka(_spec(port, controller_port, data_dir, nodes)).status()
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(f"state:     {st['state']}")
    click.echo(f"bootstrap: {st['bootstrap']}")
    click.echo(f"data dir:  {st['data_dir']}")
    click.echo(f"kafka:     {st['kafka_version']}")
    for n in st["nodes"]:
        click.echo(f"node {n['node_id']}:    port {n['port']}  pid {n['pid'] or '-'}  "
                   f"{'alive' if n['alive'] else 'down'}")
    if st["state"] != "running":
        raise SystemExit(3)


@local.command("logs")
@_port
@_cport
@_data
@_nodes
@click.option("--node", "node_id", default=1, show_default=True, help="Which node's log.")
@click.option("-n", "--lines", default=50, show_default=True)
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows.")
def logs(port: int, controller_port: int, data_dir: Path | None, nodes: int, node_id: int,
         lines: int, follow: bool) -> None:
    """Show the broker log."""
    path = LocalKafka(_spec(port, controller_port, data_dir, nodes)).log_path(node_id)
    if not path.exists():
        raise click.ClickException(f"no log at {path}; start the broker with `watchtower local up`")
    args = ["tail", "-n", str(lines)] + (["-F"] if follow else []) + [str(path)]
    subprocess.run(args, check=False)
