"""The feed pages in a real browser: Debian's Chromium, headless, driven by selenium.

On a real stack, the page of a feed follows it live: a message published through the SDK appears
with its sequence, its tags, its JSON payload decoded and "verified" (the browser rebuilt the
signing bytes and checked hash and signature with WebCrypto). The listing page shows the feed. A
small fake API then serves the same page a tampered message, which the browser marks INVALID.

Chromium and chromedriver come from Debian (``./run test`` installs them); selenium is pointed
at them and never downloads a browser. Without them the test fails with that advice, unless
``WATCHTOWER_NO_BROWSER=1`` says this machine has no browser on purpose.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from aiohttp import web
from aiohttp_sse import sse_response
from kafka_fixture import free_ports
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from sse_stack import Feed

from watchtower.gateway import page
from watchtower.local.stack import ServiceSet
from watchtower.protocol.signing import sign_message

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    if os.environ.get("WATCHTOWER_NO_BROWSER") == "1":
        pytest.skip("WATCHTOWER_NO_BROWSER=1: no browser on this machine")
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: run `./run test` (it installs Debian's chromium and "
                    "chromedriver), or set WATCHTOWER_NO_BROWSER=1 to skip the browser test")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(driver: webdriver.Chrome, condition: Any, what: str, timeout_s: float = 120) -> Any:
    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(condition)
    except TimeoutException:
        status = driver.find_elements(By.ID, "status")
        raise AssertionError(f"timed out waiting for {what}; page status: "
                             f"{status[0].text if status else '?'}; log: {console(driver)}") from None


def console(driver: webdriver.Chrome) -> str:
    try:
        return json.dumps(driver.get_log("browser"))[:2000]
    except Exception:
        return "(no browser log)"


def row(driver: webdriver.Chrome, sequence: int) -> dict[str, str] | None:
    """The cells of the message row of `sequence`, once its verdict is in."""
    found = driver.find_elements(By.CSS_SELECTOR, f'#messages tr[data-sequence="{sequence}"]')
    if not found:
        return None
    cells = {c: found[0].find_element(By.CSS_SELECTOR, f"td.{c}").text for c in ("sequence", "kind", "tags",
                                                                              "payload", "verdict")}
    return None if cells["verdict"] == "checking…" else cells


def test_a_published_message_appears_live_decoded_and_verified(sse_stack: ServiceSet, browser: webdriver.Chrome,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    feed = Feed(sse_stack, tmp_path_factory.mktemp("browser-home"), name="browser-feed")
    feed.publish(2)
    browser.get(f"{sse_stack.api_url}/feeds")
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'#feeds tr[data-feed-id="{feed.feed_id}"]'),
               "the feed in the listing")
    listed = browser.find_element(By.CSS_SELECTOR, f'#feeds tr[data-feed-id="{feed.feed_id}"]')
    assert listed.find_element(By.CSS_SELECTOR, "td.name").text == "browser-feed"
    assert listed.find_element(By.CSS_SELECTOR, "td.stream").text == feed.stream_id

    browser.get(f"{sse_stack.api_url}/feeds/{feed.feed_id}")
    wait_until(browser, lambda d: d.find_element(By.ID, "status").text == "live", "the live connection")
    reply = feed.publisher.publish("quote", json.dumps({"price": 97123.5, "pair": "BTC/USD"}).encode(),
                                   {"symbol": "BTC", "venue": "coinbase", "size": 2.5, "firm": True})
    seq = int(reply["sequence"])
    cells = wait_until(browser, lambda d: row(d, seq), f"the row of sequence {seq}")
    assert cells["sequence"] == str(seq) == "3"
    assert cells["kind"] == "quote"
    assert json.loads(cells["tags"]) == {"symbol": "BTC", "venue": "coinbase", "size": 2.5, "firm": True}
    assert json.loads(cells["payload"]) == {"price": 97123.5, "pair": "BTC/USD"}
    assert cells["verdict"] == "verified"
    assert not browser.find_elements(By.CSS_SELECTOR, '#messages tr[data-sequence="2"]')  # live: new messages only
    assert not browser.find_element(By.ID, "ingestion").is_displayed()  # this feed is not ingested


class FakeApi:
    """Serves the real feed page against canned data: one honest and one tampered message."""

    def __init__(self) -> None:
        key = nacl.signing.SigningKey(bytes(range(32)))
        self.public_key = bytes(key.verify_key).hex()
        good = sign_message(stream_id="fake", sequence=1, timestamp_unix_ms=1_767_225_600_000, kind="quote",
                            payload=b'{"price": 1}', tags={"symbol": "BTC"}, signing_key=key)
        forged = sign_message(stream_id="fake", sequence=2, timestamp_unix_ms=1_767_225_600_001, kind="quote",
                              payload=b'{"price": 2}', tags={"symbol": "BTC"}, signing_key=key).to_json_dict()
        forged["tags"] = {"symbol": "ETH"}  # changed after signing
        self.messages = [good.to_json_dict(), forged]
        self.port = free_ports(1)[0]
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        app = web.Application()
        page.mount(app)
        app.router.add_get("/v1/feeds/1", self._feed)
        app.router.add_get("/v1/streams/fake/keys", self._keys)
        app.router.add_get("/v1/feeds/1/events", self._events)
        app.router.add_get("/v1/streams/fake", self._info)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self.stop = asyncio.Event()
        self.ready.set()
        await self.stop.wait()
        await runner.cleanup()

    async def _feed(self, _request: web.Request) -> web.Response:
        return web.json_response({"feed_id": 1, "stream_id": "fake", "name": "fake", "description": "",
                                  "owner": "0x" + "0" * 64, "registered_at_block": 1})

    async def _info(self, _request: web.Request) -> web.Response:
        ingestion = {"enabled": True, "interval_blocks": 1, "num_runners": 3, "proof_type": "QUORUM",
                     "task_definition": {}, "result_schema": {}, "transform_method": None}
        return web.json_response({"stream_id": "fake", "config": {"ingestion": ingestion}, "ingest_fail_count": 2})

    async def _keys(self, _request: web.Request) -> web.Response:
        return web.json_response({"entries": [{"signing_key_id": 1, "effective_sequence": 1,
                                               "publisher_key": self.public_key}], "next_from": None})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        async with sse_response(request, sep="\n") as resp:
            for m in self.messages:
                data = {"feed_id": 1, "stream_id": "fake", "sequence": m["sequence"], "message": m}
                await resp.send(json.dumps(data), id=str(m["sequence"]), event="message")
            await asyncio.sleep(3600)
        return resp

    def __enter__(self) -> str:
        self.thread.start()
        assert self.ready.wait(30)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *_exc: object) -> None:
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)
        pending = asyncio.all_tasks(self.loop)  # connection handlers still winding down
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()


def test_a_tampered_message_is_shown_invalid(browser: webdriver.Chrome) -> None:
    with FakeApi() as url:
        browser.get(f"{url}/feeds/1")
        first = wait_until(browser, lambda d: row(d, 1), "the honest message")
        second = wait_until(browser, lambda d: row(d, 2), "the tampered message")
        ingestion = wait_until(browser, lambda d: d.find_element(By.ID, "ingestion").text, "the ingestion line")
        browser.get("about:blank")  # close the event stream before the fake stops
    assert first["verdict"] == "verified"
    assert second["verdict"] == "INVALID"
    assert json.loads(second["tags"]) == {"symbol": "ETH"}
    assert ingestion == "ingestion: every block, 3 runner(s), proof QUORUM; failed ticks: 2"
