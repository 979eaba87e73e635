"""The projection's Faust app: no per-message statistics on the fold's hot path."""

from __future__ import annotations

from watchtower.projections.consumer import ProjectionApp


def test_the_app_starts_without_fausts_monitor_sensor() -> None:
    app = ProjectionApp("wt-test-sensors", broker="kafka://127.0.0.1:9", web_enabled=False)
    app.on_init_dependencies()  # what Faust calls while it starts the app
    assert app.monitor not in set(app.sensors)
    assert list(app.sensors) == []  # every per-event sensor call is an empty loop


def test_the_consumer_never_fetches_the_topics_the_reader_folds() -> None:
    from faust.types import TP

    app = ProjectionApp("wt-test-active", broker="kafka://127.0.0.1:9", web_enabled=False,
                        folded_elsewhere=frozenset({"wt.events", "wt.messages"}))
    consumer = app.consumer
    assigned = {TP("wt.events", 0), TP("wt.messages", 0), TP("other", 0)}
    assert consumer._set_active_tps(assigned) == {TP("other", 0)}  # what Faust's getmany asks for
    consumer.resume_partitions(assigned)  # Faust resumes every partition after a rebalance
    assert consumer._get_active_partitions() == {TP("other", 0)}
    assert consumer.verify_event_path(0.0, TP("wt.events", 0)) is None  # no stalled-stream report
