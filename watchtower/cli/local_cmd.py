"""`watchtower local up|down|status|logs`: the embedded Apache Kafka."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import click

from watchtower.cli.json_output import echo_json
from watchtower.local.broker import LocalKafka
from watchtower.local.config import DEFAULT_CONTROLLER_PORT, DEFAULT_PORT, ClusterSpec
from watchtower.local.data_dir import recorded_secure
from watchtower.local.paths import default_data_dir
from watchtower.local.security import CLIENT_PRINCIPAL, credentials_file


def _spec(port: int, controller_port: int, data_dir: Path | None, nodes: int,
          secure: bool | None = None) -> ClusterSpec:
    """The cluster spec; ``secure`` None: as the data directory was formatted (plaintext when new)."""
    heap = 768 if nodes == 1 else 512
    data_dir = data_dir or default_data_dir(port)
    secure = recorded_secure(data_dir) if secure is None else secure
    return ClusterSpec(data_dir, port, controller_port, nodes, heap, secure=secure)


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
@click.option("--secure", is_flag=True, help="SASL/SCRAM-SHA-512 for clients and brokers, the standard ACL "
              "authorizer and ACLs for the topic prefix; credentials go to a 0600 file (docs/security.md).")
def up(port: int, controller_port: int, data_dir: Path | None, nodes: int, secure: bool) -> None:
    """Format storage once, start the broker(s) and wait until they answer metadata.

    Plaintext by default, bound to 127.0.0.1; --secure adds authentication and ACLs.
    """
    lk = LocalKafka(_spec(port, controller_port, data_dir, nodes, secure))
    waited = lk.up()
    st = lk.status()
    mode = ("secure: SASL/SCRAM-SHA-512 and ACLs, loopback only" if secure
            else "plaintext, loopback only; use --secure for SASL/SCRAM and ACLs")
    if waited == 0.0:
        click.echo(f"already running: {st['bootstrap']} (data {st['data_dir']}; {mode})")
    else:
        click.echo(f"kafka {st['kafka_version']} up in {waited:.1f}s: {st['bootstrap']} "
                   f"(data {st['data_dir']}; {mode})")
    if secure:
        path = credentials_file(lk.spec, CLIENT_PRINCIPAL)
        click.echo(f"client credentials: {path} (export WATCHTOWER_KAFKA_CREDENTIALS={path}); "
                   f"every principal: {credentials_file(lk.spec)}")


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
        echo_json(st)
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
