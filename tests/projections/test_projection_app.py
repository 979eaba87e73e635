"""The projection's Faust app: no per-message statistics on the fold's hot path."""

from __future__ import annotations

from watchtower.projections.consumer import ProjectionApp


def test_the_app_starts_without_fausts_monitor_sensor() -> None:
    app = ProjectionApp("wt-test-sensors", broker="kafka://127.0.0.1:9", web_enabled=False)
    app.on_init_dependencies()  # what Faust calls while it starts the app
    assert app.monitor not in set(app.sensors)
    assert list(app.sensors) == []  # every per-event sensor call is an empty loop
