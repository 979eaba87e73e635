// One feed, live: GET /v1/feeds/{id}/events through EventSource, every message verified here.
//
// The publisher key for a message is the key-history entry in force at its sequence (the entry
// with the greatest effective_sequence <= sequence), and it must carry the message's
// signing_key_id; the history is re-read when a message names a key not seen yet (a rotation).
//
// A confidential feed (docs/feed-page.md): a member may load its account address and X25519
// private key into the form. The key lives in this module's memory only: it is never sent (no
// request carries it, the inputs belong to no form) and never stored. The page takes in the
// keyload parts and reseals whose signature verified, opens the ones holding the member
// (static/keyload.mjs), and shows a masked message's plaintext, after its own signature verified,
// marked "decrypted". Without the key, or under a keyload the member is not in: "encrypted".
import { bytesToHex, hexToBytes, verifyMessage } from "/ui/signing.mjs";

// Loaded apart, so that the signature checks work even where the decryption library does not.
const keyloadModule = import("/ui/keyload.mjs").catch((err) => {
  console.error("keyload module unavailable", err);
  return null;
});

const feedId = location.pathname.split("/").filter(Boolean).pop();
const statusEl = document.getElementById("status");
const rows = document.querySelector("#messages tbody");
let streamId = null;
let keys = [];
let lastSequence = 0;
let chain = Promise.resolve();

// Runs `step` after every step before it (messages, key loads), in order; a failing step is logged
// and does not stop the ones after it.
function enqueue(step) {
  chain = chain.then(step).catch((err) => console.error(err));
  return chain;
}
const shown = []; // {msg, ok (undefined until verified), td}: re-rendered when a key is loaded
const keyloads = new Map(); // keyload id hex -> {parts: Map(part number -> part), commitment}
const reseals = []; // decoded reseals whose signature verified
let member = null; // {address, secretKey, publicKeyHex}: this page's memory, nowhere else
const sessionKeys = new Map(); // keyload id hex -> {key, branch, commitment}
const refused = new Map(); // keyload id hex -> why the member's entry did not open

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
  return formatPayload(bytes, msg.content_type);
}

function formatPayload(bytes, contentType) {
  const type = (contentType || "application/json").split(";")[0].trim().toLowerCase();
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (err) {
    return `(binary, ${bytes.length} bytes) ${bytesToHex(bytes.subarray(0, 32))}`;
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

// --- Confidential feeds ---------------------------------------------------------------------------

const KEYLOAD_KIND = "wt.keyload";
const RESEAL_KIND = "wt.reseal";

function keyloadTag(msg) {
  const tag = msg.tags && msg.tags["wt.keyload"];
  return typeof tag === "string" ? tag.toLowerCase() : null;
}

function isMasked(msg) {
  return msg.kind !== KEYLOAD_KIND && msg.kind !== RESEAL_KIND && keyloadTag(msg) !== null;
}

const short = (hex) => `${String(hex).slice(0, 8)}…`;

// A keyload part or reseal of a verified message, taken in (and opened when it holds the member).
async function takeIn(entry) {
  const { msg } = entry;
  if (msg.kind !== KEYLOAD_KIND && msg.kind !== RESEAL_KIND) return;
  if (!entry.ok) {
    entry.note = "not taken in: signature INVALID";
    return;
  }
  const kl = await keyloadModule;
  if (!kl) {
    entry.note = "not read: this browser could not load the decryption library";
    return;
  }
  try {
    const bytes = hexToBytes(msg.payload_inline_hex);
    const item = msg.kind === KEYLOAD_KIND ? kl.decodePart(bytes) : kl.decodeReseal(bytes);
    if (item.streamId !== msg.stream_id) throw new Error(`it belongs to stream ${item.streamId}`);
    entry.item = item;
  } catch (err) {
    entry.note = `unreadable: ${err.message}`;
    return;
  }
  if (msg.kind === KEYLOAD_KIND) {
    const known = keyloads.get(entry.item.keyloadIdHex) || { parts: new Map(), commitment: entry.item.keyCommitment };
    known.parts.set(entry.item.part, entry.item);
    keyloads.set(entry.item.keyloadIdHex, known);
  } else {
    reseals.push(entry.item);
  }
  if (member && await openFor(entry.item, msg.kind)) await rerender(entry.item.keyloadIdHex);
}

// Opens `item` (a part or a reseal) with the member's key; true when it gave a new session key.
// As ConfidentialReader: a key from a reseal must agree with the keyload's own commitment,
// whichever of the two came first (the keyload wins).
async function openFor(item, kind) {
  const kl = await keyloadModule;
  if (!kl || !member) return false;
  const kid = item.keyloadIdHex;
  const known = keyloads.get(kid);
  const held = sessionKeys.get(kid);
  if (held && known && !kl.equalBytes(held.commitment, known.commitment)) {
    held.key.fill(0);
    sessionKeys.delete(kid);
    refused.set(kid, "DECRYPTION_FAILED: a reseal committed to another key than the keyload");
  } else if (held) {
    return false;
  }
  if (item.first > member.address || member.address > item.last) return false;
  try {
    const key = kind === KEYLOAD_KIND
      ? await kl.openKeyload(item, member.address, member.secretKey)
      : await kl.openReseal(item, member.address, member.secretKey, known ? known.commitment : null);
    const branch = known ? known.parts.values().next().value.branch : item.branch;
    sessionKeys.set(kid, { key, branch, commitment: item.keyCommitment });
    refused.delete(kid);
    return true;
  } catch (err) {
    if (err.code !== "UNAUTHORIZED") refused.set(kid, err.code || "DECRYPTION_FAILED");
    return false;
  }
}

function memberNote(kid, item) {
  if (!member) return "";
  if (sessionKeys.has(kid)) return "; your key opens it";
  if (refused.has(kid)) return `; your entry did not open (${refused.get(kid)})`;
  return item.entries.some((e) => e.address === member.address) ? "" : "; you are not in it";
}

function setPayload(td, cls, text, badge) {
  td.className = `payload ${cls}`;
  td.dataset.state = cls;
  td.replaceChildren();
  if (badge) {
    const mark = document.createElement("span");
    mark.className = `badge ${badge}`;
    mark.textContent = badge;
    td.append(mark);
  }
  const body = document.createElement("span");
  body.className = "content";
  body.textContent = text;
  td.append(body);
}

async function render(entry) {
  const { msg, td } = entry;
  if (msg.kind === KEYLOAD_KIND || msg.kind === RESEAL_KIND) {
    const item = entry.item;
    const kid = item ? item.keyloadIdHex : keyloadTag(msg) || "?";
    const what = msg.kind === KEYLOAD_KIND ? `keyload ${short(kid)}` : `reseal of keyload ${short(kid)}`;
    let text;
    if (!item) text = `${what} ${entry.note || ""}`.trim();
    else if (msg.kind === KEYLOAD_KIND) {
      text = `${what} part ${item.part + 1}/${item.parts}, ${item.members} members${memberNote(kid, item)}`;
    } else text = `${what}, ${item.entries.length} members${memberNote(kid, item)}`;
    setPayload(td, msg.kind === KEYLOAD_KIND ? "keyload" : "reseal", text);
    return;
  }
  if (!isMasked(msg)) {
    setPayload(td, "plain", payloadText(msg));
    return;
  }
  const kid = keyloadTag(msg);
  const held = member && sessionKeys.get(kid);
  const kl = await keyloadModule;
  if (!held && member && refused.has(kid)) {
    setPayload(td, "failed", "decryption failed");
    td.title = `the member's key to keyload ${kid} did not open: ${refused.get(kid)}`;
    return;
  }
  if (!held || !kl) {
    setPayload(td, "encrypted", "encrypted");
    td.title = member ? `masked under keyload ${kid}, which ${member.address} cannot open here` : "masked: load a member's key";
    return;
  }
  td.title = "";
  let plaintext;
  try {
    plaintext = await kl.unmask(held.key, hexToBytes(msg.payload_inline_hex), {
      streamId: msg.stream_id, sequence: msg.sequence, keyloadId: hexToBytes(kid), branch: held.branch,
      kind: msg.kind, contentType: msg.content_type == null ? "application/json" : msg.content_type });
  } catch (err) {
    setPayload(td, "failed", "decryption failed");
    return;
  }
  if (!entry.ok) setPayload(td, "failed", "not shown: signature INVALID");
  else setPayload(td, "decrypted", formatPayload(plaintext, msg.content_type), "decrypted");
}

// Renders again the rows a new session key concerns (all rows when `kid` is null).
async function rerender(kid) {
  for (const entry of shown) {
    if (entry.ok === undefined) continue; // still in the chain: rendered when its verdict is in
    if (kid === null || keyloadTag(entry.msg) === kid) await render(entry);
  }
}

function memberStatus(text, cls) {
  const el = document.getElementById("member-status");
  el.textContent = text;
  el.className = cls || "";
}

function describeMember() {
  if (!member) return "no key loaded";
  return `key loaded for ${member.address} (X25519 public key ${short(member.publicKeyHex)}), in this page ` +
    `only; it opens ${sessionKeys.size} of the ${keyloads.size} keyload(s) seen`;
}

async function loadKey() {
  const addressEl = document.getElementById("member-address");
  const keyEl = document.getElementById("member-key");
  const kl = await keyloadModule;
  if (!kl) {
    memberStatus("this browser could not load the decryption library", "error");
    return;
  }
  let address, secretKey;
  try {
    address = kl.normalizeAddress(addressEl.value);
    secretKey = kl.secretKeyFromHex(keyEl.value);
  } catch (err) {
    memberStatus(err.message, "error");
    return;
  }
  keyEl.value = ""; // the key is not left in the page's inputs
  const publicKeyHex = bytesToHex(await kl.publicKeyOf(secretKey));
  await enqueue(async () => {
    forget();
    member = { address, secretKey, publicKeyHex };
    document.getElementById("member-forget").disabled = false;
    for (const known of keyloads.values()) for (const part of known.parts.values()) await openFor(part, KEYLOAD_KIND);
    for (const reseal of reseals) await openFor(reseal, RESEAL_KIND);
    await rerender(null);
    memberStatus(describeMember(), "loaded");
  });
}

function forget() {
  if (member) member.secretKey.fill(0);
  for (const held of sessionKeys.values()) held.key.fill(0);
  member = null;
  sessionKeys.clear();
  refused.clear();
}

async function pickFile(event) {
  const input = event.target;
  const file = input.files && input.files[0];
  input.value = ""; // the page keeps no handle on the file
  if (!file) return;
  const named = /^(0x[0-9a-fA-F]{64})\.[^.]+\.x25519$/.exec(file.name);
  const addressEl = document.getElementById("member-address");
  if (named && !addressEl.value.trim()) addressEl.value = named[1].toLowerCase();
  if (file.size > 1024) {
    memberStatus("that file is not an X25519 key file (64 hex digits)", "error");
    return;
  }
  document.getElementById("member-key").value = (await file.text()).trim();
  memberStatus(addressEl.value.trim() ? "key read from the file: press \"load key\"" :
    "key read from the file: enter the account's address, then press \"load key\"");
}

document.getElementById("member-load").addEventListener("click", loadKey);
document.getElementById("member-file").addEventListener("change", pickFile);
document.getElementById("member-forget").addEventListener("click", () => {
  enqueue(async () => {
    forget();
    document.getElementById("member-forget").disabled = true;
    await rerender(null);
    memberStatus(describeMember());
  });
});

// --- Rows ----------------------------------------------------------------------------------------

function show(msg) {
  const row = rows.insertRow();
  row.dataset.sequence = msg.sequence;
  cell(row, String(msg.sequence), "sequence");
  cell(row, msg.kind, "kind");
  cell(row, JSON.stringify(msg.tags), "tags");
  const td = cell(row, "", "payload");
  if (msg.kind === KEYLOAD_KIND || msg.kind === RESEAL_KIND) setPayload(td, "checking", "checking…");
  else if (isMasked(msg)) setPayload(td, "encrypted", "encrypted");
  else setPayload(td, "plain", payloadText(msg));
  if (msg.kind === KEYLOAD_KIND || msg.kind === RESEAL_KIND || isMasked(msg)) {
    document.getElementById("member").open = true; // a confidential feed: offer the member's form
  }
  const entry = { msg, ok: undefined, td };
  shown.push(entry);
  const result = cell(row, "checking…", "verdict");
  enqueue(async () => {
    const ok = await verdict(msg);
    result.textContent = ok ? "verified" : "INVALID";
    result.className = `verdict ${ok ? "verified" : "invalid"}`;
    entry.ok = ok;
    await takeIn(entry);
    await render(entry);
    if (member) memberStatus(describeMember(), "loaded");
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
