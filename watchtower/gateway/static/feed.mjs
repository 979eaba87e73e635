// One feed, live: GET /v1/feeds/{id}/events through EventSource, every message verified here.
//
// The publisher key for a message is the key-history entry in force at its sequence (the entry
// with the greatest effective_sequence <= sequence), and it must carry the message's
// signing_key_id; the history is re-read when a message names a key not seen yet (a rotation).
import { hexToBytes, verifyMessage } from "/ui/signing.mjs";

const feedId = location.pathname.split("/").filter(Boolean).pop();
const statusEl = document.getElementById("status");
const rows = document.querySelector("#messages tbody");
let streamId = null;
let keys = [];
let lastSequence = 0;
let chain = Promise.resolve();

function setStatus(text, cls) {
  statusEl.textContent = text;
  statusEl.className = cls || "";
}

async function getJson(path) {
  const resp = await fetch(path);
  const body = await resp.json();
  if (!resp.ok) throw new Error(`${body.error.code}: ${body.error.message}`);
  return body;
}

async function loadKeys() {
  const entries = [];
  let from = 1;
  while (from != null) {
    const page = await getJson(`/v1/streams/${encodeURIComponent(streamId)}/keys?from=${from}&limit=500`);
    entries.push(...page.entries);
    from = page.next_from;
  }
  keys = entries.sort((a, b) => a.effective_sequence - b.effective_sequence);
}

function keyAt(sequence) {
  let found = null;
  for (const entry of keys) if (entry.effective_sequence <= sequence) found = entry;
  return found;
}

async function verdict(msg) {
  if (msg.stream_id !== streamId) return false;
  let entry = keyAt(msg.sequence);
  if (!entry || entry.signing_key_id !== msg.signing_key_id) {
    await loadKeys();
    entry = keyAt(msg.sequence);
  }
  if (!entry || entry.signing_key_id !== msg.signing_key_id) return false;
  try {
    return await verifyMessage(msg, entry.publisher_key);
  } catch (err) {
    return false; // malformed hex, a key WebCrypto refuses: not a valid message
  }
}

function payloadText(msg) {
  const bytes = hexToBytes(msg.payload_inline_hex);
  if (msg.payload_format !== "PLAINTEXT") return `(ciphertext, ${bytes.length} bytes)`;
  const type = (msg.content_type || "application/json").split(";")[0].trim().toLowerCase();
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (err) {
    return `(binary, ${bytes.length} bytes) ${msg.payload_inline_hex.slice(0, 64)}`;
  }
  if (type === "application/json" || type.endsWith("+json")) {
    try {
      return JSON.stringify(JSON.parse(text));
    } catch (err) {
      return `(not JSON) ${text}`;
    }
  }
  return text;
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  td.className = cls;
  return td;
}

function show(msg) {
  const row = rows.insertRow();
  row.dataset.sequence = msg.sequence;
  cell(row, String(msg.sequence), "sequence");
  cell(row, msg.kind, "kind");
  cell(row, JSON.stringify(msg.tags), "tags");
  cell(row, payloadText(msg), "payload");
  const result = cell(row, "checking…", "verdict");
  chain = chain.then(async () => {
    const ok = await verdict(msg);
    result.textContent = ok ? "verified" : "INVALID";
    result.className = `verdict ${ok ? "verified" : "invalid"}`;
  });
}

function onMessage(event) {
  let data;
  try {
    data = JSON.parse(event.data);
  } catch (err) {
    return;
  }
  if (data.sequence <= lastSequence) return; // a resumed connection never repeats, but be sure
  lastSequence = data.sequence;
  show(data.message);
}

// CIP-7 timer-driven ingestion: the feed's schedule and its failed ticks (docs/ingestion.md),
// refreshed now and then. The page works without it: an API that does not answer hides the line.
async function showIngestion() {
  const el = document.getElementById("ingestion");
  try {
    const info = await getJson(`/v1/streams/${encodeURIComponent(streamId)}`);
    const ingestion = info.config && info.config.ingestion;
    if (!ingestion || !ingestion.enabled) {
      el.hidden = true;
      return;
    }
    const every = ingestion.interval_blocks === 1 ? "every block" : `every ${ingestion.interval_blocks} blocks`;
    el.textContent = `ingestion: ${every}, ${ingestion.num_runners} runner(s), proof ${ingestion.proof_type}; ` +
      `failed ticks: ${info.ingest_fail_count || 0}`;
    el.hidden = false;
  } catch (err) {
    el.hidden = true;
  }
}

function connect() {
  const query = new URLSearchParams(location.search);
  const url = `/v1/feeds/${encodeURIComponent(feedId)}/events${query.size ? "?" + query : ""}`;
  const source = new EventSource(url);
  source.onopen = () => setStatus("live", "live");
  source.addEventListener("message", onMessage);
  source.addEventListener("lagged", () => setStatus("catching up (the page fell behind)", "lagged"));
  source.onerror = async () => {
    if (source.readyState === EventSource.CLOSED) {
      // Refused before the stream started: show the API's error and its code.
      try {
        const resp = await fetch(url);
        const body = await resp.json();
        setStatus(`${body.error.code}: ${body.error.message}`, "error");
      } catch (err) {
        setStatus("disconnected", "error");
      }
    } else {
      setStatus("reconnecting", "reconnecting");
    }
  };
}

try {
  const feed = await getJson(`/v1/feeds/${encodeURIComponent(feedId)}`);
  streamId = feed.stream_id;
  document.getElementById("title").textContent = `${feed.name} (feed ${feed.feed_id})`;
  document.getElementById("meta").textContent = `stream ${feed.stream_id}, owner ${feed.owner}. ${feed.description}`;
  await loadKeys();
  connect();
  showIngestion();
  setInterval(showIngestion, 10000);
} catch (err) {
  setStatus(err.message, "error");
}
