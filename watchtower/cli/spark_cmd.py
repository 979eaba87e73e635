"""``watchtower spark replay|verify|export``: the Spark batch jobs over the Kafka archive.

Every command takes ``--master`` (default ``local[n]``, n = the cores, at most 2; or a cluster such
as ``spark://127.0.0.1:7077``, the master in compose.yaml) and ``--bootstrap`` (flag, env
WATCHTOWER_BOOTSTRAP, then the file ``init`` wrote); topics use WATCHTOWER_TOPIC_PREFIX like the
other commands. Progress lines go to stderr (and Spark's console progress bar, on a terminal);
``--json`` prints the result as JSON on stdout. ``verify`` exits 1 when the archive does not verify.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from watchtower.cli import settings
from watchtower.cli.json_output import echo_json
from watchtower.client.http import DEFAULT_API_URL, ENV_API, ApiClient

F = TypeVar("F", bound=Callable[..., Any])


def _job_options(func: F) -> F:
    func = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(func)
    func = click.option("--bootstrap", default=None, help="Kafka bootstrap servers [env WATCHTOWER_BOOTSTRAP].")(func)
    return click.option("--master", default=None, metavar="URL",
                        help="Spark master, e.g. spark://127.0.0.1:7077 [default: local, at most 2 cores].")(func)


def _target_options(func: F) -> F:
    func = click.option("--api", "api_url", default=None, metavar="URL",
                        help=f"Watchtower HTTP API, for the key schedule [env {ENV_API}; "
                             f"default {DEFAULT_API_URL}].")(func)
    func = click.option("--stream", "stream_id", default=None, help="Stream id.")(func)
    return click.option("--feed", "feed_id", default=None, type=int, help="Feed id (the registry resolves it).")(func)


def _progress(as_json: bool) -> Callable[[str], None]:
    def say(line: str) -> None:
        click.echo(line, err=True)

    return (lambda _line: None) if as_json and not sys.stderr.isatty() else say


@contextmanager
def _session(name: str, master: str | None, as_json: bool) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from watchtower.local.jars import spark_jars
    from watchtower.spark.session import default_master, local_session

    running = SparkSession.getActiveSession()  # an embedding program's session: use it, leave it running
    if running is not None:
        yield running
        return
    bar = "true" if sys.stderr.isatty() and not as_json else "false"
    spark = local_session(name, master=master or default_master(), extra={"spark.ui.showConsoleProgress": bar},
                          jars=spark_jars())
    try:
        yield spark
    finally:
        spark.stop()


def _resolve(api: ApiClient, feed_id: int | None, stream_id: str | None) -> tuple[str, str | None]:
    """(stream id, the owner the registry names or None)."""
    if (feed_id is None) == (stream_id is None):
        raise click.UsageError("give exactly one of --feed ID or --stream ID")
    if feed_id is not None:
        entry = api.feed(feed_id)
        return str(entry["stream_id"]), (str(entry["owner"]) if entry.get("owner") else None)
    return str(stream_id), None


def _emit(data: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        echo_json(data, line=True, sort_keys=True)
    else:
        click.echo(human)


@click.group()
def spark() -> None:
    """Bulk replay, verification and export of the archive with Spark."""


@spark.command("replay")
@click.argument("replay_id", type=int)
@click.option("--stream", "stream_id", required=True, help="The replay's stream id.")
@_job_options
def replay(replay_id: int, stream_id: str, master: str | None, bootstrap: str | None, as_json: bool) -> None:
    """Run registered replay REPLAY_ID as a Spark batch job (deliveries with replay headers)."""
    from watchtower.spark.replay_job import run_replay

    with _session("watchtower-spark-replay", master, as_json) as session:
        result = run_replay(session, settings.bootstrap(bootstrap), stream_id, replay_id, report=_progress(as_json))
    _emit(result.as_json(), as_json, f"replay {replay_id}: {result.status}, {result.delivered} delivered, "
                                     f"{result.filtered} filtered, {result.skipped} skipped"
                                     + (f" ({result.reason})" if result.reason else ""))
    if result.status == "errored":
        sys.exit(1)


@spark.command("verify")
@_target_options
@_job_options
def verify(feed_id: int | None, stream_id: str | None, api_url: str | None, master: str | None,
           bootstrap: str | None, as_json: bool) -> None:
    """Verify a stream's whole archive: signatures against the key schedule, payload hashes, gaps."""
    from watchtower.spark.verify import verified_schedule, verify_stream

    api = ApiClient(api_url)
    sid, owner = _resolve(api, feed_id, stream_id)
    schedule = verified_schedule(api, sid, owner)
    with _session("watchtower-spark-verify", master, as_json) as session:
        result = verify_stream(session, settings.bootstrap(bootstrap), sid, schedule, report=_progress(as_json))
    keys = ", ".join(f"key {k}: {v['verified']}/{v['messages']}" for k, v in result.per_key.items())
    _emit(result.as_json(), as_json,
          f"{'OK' if result.ok else 'FAILED'} {sid}: {result.messages} messages, {result.verified} verified, "
          f"{result.bad_signatures} bad signatures, {result.bad_hashes} bad hashes, {result.malformed} malformed, "
          f"{result.missing} missing, {result.duplicates} duplicates; head {result.head}; "
          f"first bad sequence {result.first_bad_sequence}; {keys}")
    if not result.ok:
        sys.exit(1)


@spark.command("export")
@_target_options
@click.option("--to", "to", required=True, type=click.Path(file_okay=False), help="Output directory (Parquet).")
@_job_options
def export(feed_id: int | None, stream_id: str | None, api_url: str | None, to: str, master: str | None,
           bootstrap: str | None, as_json: bool) -> None:
    """Export a stream's archive to Parquet, partitioned by stream and date, with key id and verification."""
    from watchtower.spark.export import export_stream
    from watchtower.spark.verify import verified_schedule

    api = ApiClient(api_url)
    sid, owner = _resolve(api, feed_id, stream_id)
    schedule = verified_schedule(api, sid, owner)
    with _session("watchtower-spark-export", master, as_json) as session:
        result = export_stream(session, settings.bootstrap(bootstrap), sid, schedule, to, report=_progress(as_json))
    _emit(result.as_json(), as_json, f"exported {result.rows} rows of {sid} ({result.verified} verified) "
                                     f"to {result.path} in {result.dates} date partitions")
