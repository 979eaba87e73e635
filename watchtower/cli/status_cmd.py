"""`watchtower status`: every part of the local stack checked, and how far each consumer lags.

It reads the stack's record (`local.supervisor`: what `watchtower up` started), asks the broker,
each service's health file or ``/v1/health`` and the lag metrics, and prints one line a part (or
``--json``). The exit code says what it found: 0 all parts alive and the broker answers, 1 some
part dead or the broker silent (`watchtower up` restarts it), 3 the stack is not up, 4 everything
runs but a lag is past ``--max-lag`` / ``--max-lag-seconds``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from watchtower.cli.json_output import echo_json
from watchtower.cli.up_cmd import use_credentials
from watchtower.local.supervisor import EXIT_NOT_UP, StackRecord, not_up_report, stack_report
from watchtower.metrics import lag as lag_metrics

EXIT_LAGGING = 4  # `status --max-lag`: every part runs, but something lags past the threshold


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--max-lag", type=click.IntRange(0), default=None,
              help="Exit 4 when a consumer group or a projection lags more than this many records.")
@click.option("--max-lag-seconds", type=click.FloatRange(0), default=None,
              help="Exit 4 when a projection's fold lags more than this many seconds.")
def status(as_json: bool, max_lag: int | None, max_lag_seconds: float | None) -> None:
    """Check every part of the local stack, and how far each consumer lags.

    Exit code 0: all parts alive and the broker answers; 1: some part is dead or the broker does
    not answer (`watchtower up` restarts it); 3: the stack is not up; 4: everything runs, but a lag
    is past --max-lag / --max-lag-seconds.
    """
    record = StackRecord.load()
    body, code = (not_up_report(), EXIT_NOT_UP) if record is None else stack_report(record)
    if record is not None and body["kafka"]["reachable"]:
        use_credentials(record)  # a secure stack's group offsets are read as its admin
        logs = Path(record.log_dir)
        for name, s in body["services"].items():
            s["metrics_url"] = lag_metrics.metrics_url(logs / f"{name}.metrics.json") if s["running"] else None
        body["lag"] = lag_metrics.stack_lag(record.bootstrap, record.prefix, {
            name: s["metrics_url"] for name, s in body["services"].items() if s["kind"] == "projection"})
        body["lagging"] = lag_metrics.over(body["lag"], max_lag, max_lag_seconds)
        if code == 0 and body["lagging"]:
            code = EXIT_LAGGING
    if as_json:
        echo_json(body)
    elif record is None:
        click.echo("not up; start the stack with `watchtower up`")
    else:
        _print_status(body)
    raise SystemExit(code)


def _ingest_line(health: dict[str, Any]) -> str:
    """The ingestion service's progress and send window, on one line."""
    w = health["window"]
    failed_by_reason = health.get("failed")
    # The file is the service's own, but a status read never fails on what it finds there.
    failed = sum(n for n in failed_by_reason.values() if isinstance(n, int)) \
        if isinstance(failed_by_reason, dict) else "?"
    return (f"published {health.get('published', '?')}, pending {health.get('pending', '?')}, failed {failed}; "
            f"send window {w.get('in_flight', '?')}/{w.get('limit', '?')} in flight, {w.get('held', '?')} held, "
            f"base round trip {w.get('base_rtt_ms') if w.get('base_rtt_ms') is not None else '-'} ms")


def _print_status(body: dict[str, Any]) -> None:
    kafka = body["kafka"]
    if kafka["reachable"]:
        broker = "running, answers metadata"
    elif kafka["alive"]:
        broker = f"process alive but NOT ANSWERING ({kafka['error']})"
    else:
        broker = "DEAD"
    pids = ",".join(str(n["pid"]) for n in kafka["nodes"] if n["pid"]) or "-"
    click.echo(f"stack    {body['state']}")
    click.echo(f"kafka    {kafka['bootstrap']}  pid {pids}  {broker}")
    click.echo(f"api      {body['api_url']}")
    for name, s in sorted(body["services"].items()):
        line = f"  {name:16} pid {s['pid'] or '-':>7}  {s['state'].upper() if s['state'] == 'dead' else s['state']}"
        if "url" in s:  # an HTTP service (projection, gateway, key manager): its URL and what /v1/health says
            ready = {True: "ready", False: "not ready", None: "no answer"}[s.get("ready")]
            line += f"  {s['url']}  {ready if s['running'] else ''}".rstrip()
        elif s.get("health") is not None:  # a Kafka worker: what its health file says
            health = s["health"]
            if "error" in health:
                line += f"  health: {health['error']}"
            else:
                line += (f"  state {health.get('state', '?')}, quarantined {health.get('quarantined', '?')}"
                         f"{' (stale: written by an earlier process)' if health.get('stale') else ''}")
        click.echo(line)
        if s.get("health") and isinstance(s["health"].get("window"), dict):
            click.echo(f"  {'':16} {_ingest_line(s['health'])}")
        if s.get("metrics_url"):
            click.echo(f"  {'':16} metrics {s['metrics_url']}")
    for g in body.get("lag", {}).get("groups", []):
        lag = g["error"] if "error" in g else f"{g['lag']} records{'' if g['exact'] else ' (at most)'}"
        click.echo(f"lag      {g['group']}: {lag}")
    for name, p in body.get("lag", {}).get("projections", {}).items():
        lag = p["error"] if "error" in p else f"{p['records']} records, {p['seconds']:g} s"
        click.echo(f"lag      {name} fold: {lag}")
    for line in body.get("lagging", []):
        click.echo(f"LAGGING  {line}")
    if body["state"] != "running":
        click.echo("some parts are down; `watchtower up` restarts them")
