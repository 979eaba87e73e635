"""``watchtower gateway``: run the command gateway (``POST /v1/commands``) as a process of its own."""

from __future__ import annotations

import asyncio

import click

from watchtower.cli import settings


@click.command()
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers [env WATCHTOWER_BOOTSTRAP].")
@click.option("--port", default=8480, show_default=True, envvar="WATCHTOWER_GATEWAY_PORT",
              type=click.IntRange(1, 65535))
@click.option("--bind", default="127.0.0.1", show_default=True, envvar="WATCHTOWER_WEB_BIND",
              help="Address to listen on (a gateway accepts commands: keep loopback unless behind a proxy).")
@click.option("--prefix", default=None, help="Topic prefix [env WATCHTOWER_TOPIC_PREFIX, default wt].")
def gateway(bootstrap: str | None, port: int, bind: str, prefix: str | None) -> None:
    """Serve POST /v1/commands: produce signed commands, answer their committed replies.

    Reads are served by the projection workers (`watchtower up`); this process serves no read.
    Stop it with Ctrl-C or SIGTERM.
    """
    from watchtower.gateway.server import serve

    click.echo(f"command gateway on http://{bind}:{port} (Ctrl-C stops it)", err=True)
    asyncio.run(serve(settings.bootstrap(bootstrap), port, prefix=prefix, bind=bind))
