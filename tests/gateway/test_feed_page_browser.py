"""The feed pages in a real browser: Debian's Chromium, headless, driven by selenium.

On a real stack, the page of a feed follows it live: a message published through the SDK appears
with its sequence, its tags, its JSON payload decoded and "verified" (the browser rebuilt the
signing bytes and checked hash and signature with WebCrypto). The listing page shows the feed. A
small fake API then serves the same page a tampered message, which the browser marks INVALID, and
a confidential feed built with the SDK's keyload functions: its masked messages show "encrypted"
until a member's X25519 key is loaded into the page, then their plaintext (a stranger's key, or a
keyload the member is not in, still shows "encrypted"; an altered ciphertext "decryption failed").

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

import nacl.public
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
from watchtower.protocol.confidential.keyload import Recipient, build_keyload, decode_part
from watchtower.protocol.confidential.reseal import build_reseals
from watchtower.protocol.confidential.session_key import mask
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


PUBLISHER = nacl.signing.SigningKey(bytes(range(32)))


class FakeApi:
    """Serves the real feed page against canned data (by default one honest and one tampered
    message), signed by `PUBLISHER`; records every request it answers."""

    def __init__(self, messages: list[dict[str, Any]] | None = None) -> None:
        key = PUBLISHER
        self.public_key = bytes(key.verify_key).hex()
        self.requests: list[str] = []
        if messages is None:
            good = sign_message(stream_id="fake", sequence=1, timestamp_unix_ms=1_767_225_600_000, kind="quote",
                                payload=b'{"price": 1}', tags={"symbol": "BTC"}, signing_key=key)
            forged = sign_message(stream_id="fake", sequence=2, timestamp_unix_ms=1_767_225_600_001, kind="quote",
                                  payload=b'{"price": 2}', tags={"symbol": "BTC"}, signing_key=key).to_json_dict()
            forged["tags"] = {"symbol": "ETH"}  # changed after signing
            messages = [good.to_json_dict(), forged]
        self.messages = messages
        self.port = free_ports(1)[0]
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True)

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.read() if request.can_read_body else b""
        self.requests.append(f"{request.method} {request.path_qs} {dict(request.headers)} {body!r}")
        return await handler(request)

    async def _serve(self) -> None:
        app = web.Application(middlewares=[self._record])
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


# --- A confidential feed ------------------------------------------------------------------------


def person(seed: int) -> tuple[str, bytes]:
    """A test account from a public seed: its address and its X25519 private key."""
    address = "0x" + bytes(nacl.signing.SigningKey(bytes([seed]) * 32).verify_key).hex()
    return address, bytes([seed + 50]) * 32


ALICE, BOB, CAROL, DAVE = person(1), person(2), person(3), person(4)


def recipient(who: tuple[str, bytes], key_id: int = 1) -> Recipient:
    return Recipient(who[0], key_id, bytes(nacl.public.PrivateKey(who[1]).public_key))


def flip(hex_text: str, at: int) -> str:
    raw = bytearray(bytes.fromhex(hex_text))
    raw[at] ^= 0x01
    return raw.hex()


def confidential_feed() -> list[dict[str, Any]]:
    """Seven messages of stream "fake", built and signed as ConfidentialPublisher does: keyload 1
    (Alice, Bob) and three messages masked under it (one altered after signing, one before), a
    reseal of keyload 1 to Dave, keyload 2 (Bob, Dave) and one message masked under it."""
    messages: list[dict[str, Any]] = []

    def publish(kind: str, payload: bytes, tags: dict[str, Any], content_type: str) -> dict[str, Any]:
        msg = sign_message(stream_id="fake", sequence=len(messages) + 1,
                           timestamp_unix_ms=1_767_225_600_000 + len(messages), kind=kind, payload=payload,
                           tags=tags, content_type=content_type, signing_key=PUBLISHER).to_json_dict()
        messages.append(msg)
        return msg

    def rekey(*members: Recipient) -> Any:
        keyload = build_keyload("fake", members)
        for raw in keyload.parts:
            part = decode_part(raw)
            publish("wt.keyload", raw, {"wt.keyload": keyload.keyload_id.hex(), "wt.branch": "main",
                                        "wt.part": float(part.part), "wt.parts": float(part.parts),
                                        "wt.first": part.first, "wt.last": part.last}, "application/cbor")
        return keyload

    def masked(keyload: Any, plaintext: bytes, *, alter_before_signing: bool = False) -> dict[str, Any]:
        payload = mask(keyload.session_key, keyload_id=keyload.keyload_id, stream_id="fake",
                       sequence=len(messages) + 1, branch="main", kind="quote", content_type="application/json",
                       plaintext=plaintext)
        if alter_before_signing:
            payload = bytes.fromhex(flip(payload.hex(), 30))
        return publish("quote", payload, {"symbol": "BTC", "wt.keyload": keyload.keyload_id.hex(),
                                          "wt.branch": "main"}, "application/json")

    first = rekey(recipient(ALICE), recipient(BOB, 2))
    masked(first, b'{"price": 1, "pair": "BTC/USD"}')
    tampered = masked(first, b'{"price": 2}')
    tampered["payload_inline_hex"] = flip(tampered["payload_inline_hex"], 30)  # altered after signing
    masked(first, b'{"price": 3}', alter_before_signing=True)
    for raw in build_reseals("fake", [recipient(DAVE)], branch="main", keyload_id=first.keyload_id,
                             session_key=first.session_key):
        publish("wt.reseal", raw, {"wt.keyload": first.keyload_id.hex(), "wt.branch": "main"}, "application/cbor")
    second = rekey(recipient(BOB, 2), recipient(DAVE))
    masked(second, b'{"price": 7}')
    assert len(messages) == 7
    return messages


def payload(driver: webdriver.Chrome, sequence: int) -> tuple[str, str, str | None]:
    """(state, text, badge) of the payload cell of `sequence`."""
    td = driver.find_element(By.CSS_SELECTOR, f'#messages tr[data-sequence="{sequence}"] td.payload')
    badges = td.find_elements(By.CSS_SELECTOR, ".badge")
    return (td.get_attribute("data-state") or "", td.find_element(By.CSS_SELECTOR, ".content").text,
            badges[0].text if badges else None)


def load_key(driver: webdriver.Chrome, who: tuple[str, bytes]) -> None:
    address = driver.find_element(By.ID, "member-address")
    address.clear()
    address.send_keys(who[0].upper().replace("0X", "0x"))  # typed in capitals: still the address
    driver.find_element(By.ID, "member-key").send_keys(who[1].hex())
    driver.find_element(By.ID, "member-load").click()
    wait_until(driver, lambda d: f"key loaded for {who[0]}" in d.find_element(By.ID, "member-status").text,
               "the key to load")


def test_a_member_reads_a_confidential_feed_with_its_key_loaded_in_the_page(
        browser: webdriver.Chrome, tmp_path: Path) -> None:
    messages = confidential_feed()
    kid1, kid2 = messages[0]["tags"]["wt.keyload"], messages[5]["tags"]["wt.keyload"]
    api = FakeApi(messages)
    with api as url:
        browser.get(f"{url}/feeds/1")
        verdicts = {seq: wait_until(browser, lambda d, s=seq: row(d, s), f"row {seq}")["verdict"]
                    for seq in range(1, 8)}
        assert verdicts == {1: "verified", 2: "verified", 3: "INVALID", 4: "verified", 5: "verified", 6: "verified",
                            7: "verified"}
        # No key: the masked messages are "encrypted"; keyloads and the reseal are described.
        assert {seq: payload(browser, seq)[:2] for seq in (2, 3, 4, 7)} == dict.fromkeys(
            (2, 3, 4, 7), ("encrypted", "encrypted"))
        assert payload(browser, 1)[1] == f"keyload {kid1[:8]}… part 1/1, 2 members"
        assert payload(browser, 5)[1] == f"reseal of keyload {kid1[:8]}…, 1 members"
        assert payload(browser, 6)[1] == f"keyload {kid2[:8]}… part 1/1, 2 members"
        assert "never sent to any server" in browser.find_element(By.ID, "member").text

        load_key(browser, CAROL)  # in no keyload: nothing opens
        assert {seq: payload(browser, seq)[:2] for seq in (2, 3, 4, 7)} == dict.fromkeys(
            (2, 3, 4, 7), ("encrypted", "encrypted"))
        assert payload(browser, 1)[1].endswith("; you are not in it")
        assert browser.find_element(By.ID, "member-key").get_attribute("value") == ""  # not left in the input

        load_key(browser, ALICE)  # rows already shown are rendered again
        state, text, badge = payload(browser, 2)
        assert (state, badge) == ("decrypted", "decrypted")
        assert json.loads(text) == {"price": 1, "pair": "BTC/USD"}
        assert payload(browser, 3)[:2] == ("failed", "decryption failed")  # altered after signing: INVALID too
        assert payload(browser, 4)[:2] == ("failed", "decryption failed")  # altered before: signed, does not open
        assert payload(browser, 7)[:2] == ("encrypted", "encrypted")  # keyload 2 does not hold Alice
        assert payload(browser, 1)[1].endswith("; your key opens it")
        assert payload(browser, 6)[1].endswith("; you are not in it")

        # Dave picks his key file; the reseal gives him keyload 1, and keyload 2 holds him.
        key_file = tmp_path / f"{DAVE[0]}.1.x25519"
        key_file.write_text(DAVE[1].hex() + "\n")
        browser.find_element(By.ID, "member-address").clear()
        browser.find_element(By.ID, "member-file").send_keys(str(key_file))
        wait_until(browser, lambda d: d.find_element(By.ID, "member-address").get_attribute("value") == DAVE[0],
                   "the address from the file name")
        browser.find_element(By.ID, "member-load").click()
        wait_until(browser, lambda d: f"key loaded for {DAVE[0]}" in d.find_element(By.ID, "member-status").text,
                   "Dave's key to load")
        assert json.loads(payload(browser, 2)[1]) == {"price": 1, "pair": "BTC/USD"}
        assert payload(browser, 7)[0] == "decrypted"
        assert json.loads(payload(browser, 7)[1]) == {"price": 7}

        browser.find_element(By.ID, "member-forget").click()
        wait_until(browser, lambda d: payload(d, 7)[0] == "encrypted", "the page to forget the key")
        stored = browser.execute_script("return [localStorage.length, sessionStorage.length, document.cookie]")
        browser.get("about:blank")  # close the event stream before the fake stops
    assert stored == [0, 0, ""]  # nothing stored in the browser
    assert api.requests  # the page's own requests: none carries a key, in any form
    sent = "\n".join(api.requests).lower()
    for _address, secret in (ALICE, CAROL, DAVE):
        assert secret.hex() not in sent
