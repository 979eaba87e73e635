// Canonical CIP-7 signing bytes and message verification, in the browser (and in node for tests).
//
// Mirrors watchtower/protocol/signing.py + protocol/cbor.py exactly: the signing map is the
// deterministic CBOR of the 11 CIP-7 keys, in the order of their encoded bytes; integers use the
// shortest head; tag values are text, CBOR true/false, or float64 (0xfb + 8 bytes) for EVERY
// number (never shortened); key_epoch null is 0xf6. A message is verified as verify_message does:
// payload_hash is recomputed with SHA-256 and must equal the stored one, the bytes are rebuilt with
// the recomputed hash, and the ed25519 signature is checked with WebCrypto.

const utf8 = new TextEncoder();

export function hexToBytes(hex) {
  if (typeof hex !== "string" || hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) {
    throw new Error("not hex");
  }
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.substr(2 * i, 2), 16);
  return out;
}

export function bytesToHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The bytes of `parts` (Uint8Arrays), one after the other. */
export function concat(parts) {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

// The shortest CBOR head of major type `major` with argument `n` (a non-negative integer < 2**64).
export function encodeHead(major, n) {
  const mt = major << 5;
  const big = BigInt(n);
  if (big < 0n || big >= 1n << 64n) throw new Error(`integer ${n} does not fit in a CBOR head`);
  if (big < 24n) return Uint8Array.of(mt | Number(big));
  let size, ai;
  if (big < 0x100n) { size = 1; ai = 24; } else if (big < 0x10000n) { size = 2; ai = 25; }
  else if (big < 0x100000000n) { size = 4; ai = 26; } else { size = 8; ai = 27; }
  const out = new Uint8Array(1 + size);
  out[0] = mt | ai;
  let v = big;
  for (let i = size; i >= 1; i--) { out[i] = Number(v & 0xffn); v >>= 8n; }
  return out;
}

export function encodeText(s) {
  const raw = utf8.encode(s);
  return concat([encodeHead(3, raw.length), raw]);
}

function encodeBytes(b) {
  return concat([encodeHead(2, b.length), b]);
}

function encodeFloat64(x) {
  const out = new Uint8Array(9);
  out[0] = 0xfb;
  new DataView(out.buffer).setFloat64(1, x, false);
  return out;
}

function encodeTagValue(value) {
  if (value === true) return Uint8Array.of(0xf5);
  if (value === false) return Uint8Array.of(0xf4);
  if (typeof value === "string") return encodeText(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error("tag numbers must be finite");
    return encodeFloat64(value);
  }
  throw new Error(`tag values must be text, bool or a number, got ${typeof value}`);
}

function compareBytes(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

// A map from encoded (key, value) pairs, sorted bytewise by encoded key (deterministic CBOR).
function encodeMap(pairs) {
  pairs.sort((x, y) => compareBytes(x[0], y[0]));
  return concat([encodeHead(5, pairs.length), ...pairs.flatMap(([k, v]) => [k, v])]);
}

function encodeUint(n) {
  return encodeHead(0, n);
}

// The canonical signing bytes of a message in its JSON form (StreamMessage.to_json_dict), with
// `payloadHash` (bytes) in place of the stored hash when given.
export function signingBytes(msg, payloadHash) {
  const hash = payloadHash || hexToBytes(msg.payload_hash_hex);
  const tags = Object.entries(msg.tags || {}).map(([k, v]) => [encodeText(k), encodeTagValue(v)]);
  const fields = [
    ["stream_id", encodeText(msg.stream_id)],
    ["version", encodeUint(msg.version)],
    ["sequence", encodeUint(msg.sequence)],
    ["timestamp_unix_ms", encodeUint(msg.timestamp_unix_ms)],
    ["kind", encodeText(msg.kind)],
    ["content_type", encodeText(msg.content_type == null ? "application/json" : msg.content_type)],
    ["tags", encodeMap(tags)],
    ["payload_format", encodeText(msg.payload_format)],
    ["payload_hash", encodeBytes(hash)],
    ["key_epoch", msg.key_epoch == null ? Uint8Array.of(0xf6) : encodeUint(msg.key_epoch)],
    ["signing_key_id", encodeUint(msg.signing_key_id)],
  ];
  return encodeMap(fields.map(([k, v]) => [encodeText(k), v]));
}

// The payload's SHA-256 (WebCrypto: browsers and node alike).
export async function sha256(bytes) {
  return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes));
}

// verify_message: true iff the payload hash matches and the ed25519 signature verifies under
// `publicKeyHex` over the bytes rebuilt from the recomputed hash.
export async function verifyMessage(msg, publicKeyHex) {
  const payload = hexToBytes(msg.payload_inline_hex);
  const hash = await sha256(payload);
  if (bytesToHex(hash) !== String(msg.payload_hash_hex).toLowerCase()) return false;
  const subtle = globalThis.crypto.subtle;
  const key = await subtle.importKey("raw", hexToBytes(publicKeyHex), { name: "Ed25519" }, false, ["verify"]);
  return subtle.verify({ name: "Ed25519" }, key, hexToBytes(msg.publisher_sig_hex), signingBytes(msg, hash));
}
