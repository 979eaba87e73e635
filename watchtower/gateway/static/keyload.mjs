// Confidential private feeds in the browser (and in node for tests): keyload parts, reseals and
// masked payloads, read as a member reads them. Mirrors watchtower/protocol/confidential/keyload.py.
//
//   payload_key    = HKDF-SHA256(ikm=session_key, salt="watchtower-keyload-v1", info="payload" ‖ keyload_id)
//   key_commitment = HKDF-SHA256(ikm=session_key, salt="watchtower-keyload-v1", info="commit" ‖ keyload_id)
//   sealed         = crypto_box_seal(session_key, member's X25519 public key)              (80 bytes)
//   masked         = nonce(24) ‖ XChaCha20-Poly1305-IETF(payload_key, nonce, aad, plaintext)
//   aad            = deterministic CBOR of {stream_id, sequence, keyload_id, branch, kind, content_type}
//
// A reseal (kind "wt.reseal") gives a member the session key of a past keyload: deterministic
// CBOR of {v, keyload_id, stream_id, branch, key_commitment, entries: [[address, account_key_id,
// sealed], ...]}. Its key is accepted only if it matches the reseal's commitment and, when the
// reader saw that keyload's parts, the keyload's own.
//
// Libsodium (vendored, see vendor/README.md) opens sealed boxes and the AEAD; WebCrypto does HKDF
// and SHA-256. Every decoder is byte-exact: the CBOR is decoded (a strict subset: maps with text
// keys, byte and text strings, integers, arrays), encoded again deterministically and compared, so
// there is one spelling of a part. Errors carry the protocol's codes (INVALID_ARGUMENT,
// UNAUTHORIZED, DECRYPTION_FAILED) and never key material. Nothing here sends or stores a key.
import sodium from "./vendor/libsodium-wrappers.mjs";
import { bytesToHex, concat, encodeHead } from "./signing.mjs";

export const KEYLOAD_KIND = "wt.keyload";
export const RESEAL_KIND = "wt.reseal";
export const KEYLOAD_ID_TAG = "wt.keyload";
export const BRANCH_TAG = "wt.branch";
export const KEYLOAD_VERSION = 1;
export const RESEAL_VERSION = 1;
export const SESSION_KEY_BYTES = 32;
export const KEYLOAD_ID_BYTES = 16;
export const SEALED_KEY_BYTES = 80;
export const MAX_PART_BYTES = 16384;
export const MAX_MEMBERS = 20000;
export const MAX_BRANCH_CHARS = 32;
const NONCE_BYTES = 24;
const TAG_BYTES = 16;
const MAX_UINT64 = (1n << 64n) - 1n;
const utf8 = new TextEncoder();
const SALT = utf8.encode("watchtower-keyload-v1");
const MEMBERS_DOMAIN = utf8.encode("watchtower-keyload-members-v1");
const PART_FIELDS = ["v", "keyload_id", "stream_id", "branch", "part", "parts", "members", "members_digest",
  "key_commitment", "entries"];
const RESEAL_FIELDS = ["v", "keyload_id", "stream_id", "branch", "key_commitment", "entries"];

export class KeyloadError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

const invalid = (message) => new KeyloadError("INVALID_ARGUMENT", message);
const decryptionFailed = (message) => new KeyloadError("DECRYPTION_FAILED", message || "decryption failed");

let sodiumReady = null;
/** Libsodium, once its WebAssembly is instantiated. */
export function ready() {
  if (sodiumReady === null) sodiumReady = sodium.ready.then(() => sodium);
  return sodiumReady;
}

// --- Bytes -------------------------------------------------------------------------------------

function compareBytes(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

export function equalBytes(a, b) {
  if (!(a instanceof Uint8Array) || !(b instanceof Uint8Array) || a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

function u64be(n) {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n), false);
  return out;
}

function lenPrefixed(text) {
  const raw = utf8.encode(text);
  return concat([u64be(raw.length), raw]);
}

// --- Strict deterministic CBOR -----------------------------------------------------------------

/** The value of `bytes`: CBOR of the subset keyloads use (maps with text keys become plain
 * objects without a prototype, byte strings Uint8Array, integers Number or, past 2**53, BigInt).
 * Anything else (floats, tags, simple values, indefinite lengths, trailing bytes) is refused. */
export function decodeCbor(bytes) {
  if (!(bytes instanceof Uint8Array)) throw invalid("CBOR input must be bytes");
  const text = new TextDecoder("utf-8", { fatal: true });
  let at = 0;
  const need = (n) => {
    if (n > bytes.length - at) throw invalid("truncated CBOR");
  };
  const head = () => {
    need(1);
    const first = bytes[at++];
    const major = first >> 5, ai = first & 31;
    if (ai < 24) return [major, BigInt(ai)];
    const size = { 24: 1, 25: 2, 26: 4, 27: 8 }[ai];
    if (size === undefined) throw invalid("CBOR outside the deterministic subset (indefinite or reserved length)");
    need(size);
    let n = 0n;
    for (let i = 0; i < size; i++) n = (n << 8n) | BigInt(bytes[at++]);
    return [major, n];
  };
  const length = (n) => {
    if (n > BigInt(bytes.length - at)) throw invalid("truncated CBOR");
    return Number(n);
  };
  const item = (depth) => {
    if (depth > 16) throw invalid("CBOR nested too deeply");
    const [major, n] = head();
    switch (major) {
      case 0: return n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
      case 1: {
        const v = -1n - n;
        return v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
      }
      case 2: {
        const len = length(n);
        const out = bytes.slice(at, at + len);
        at += len;
        return out;
      }
      case 3: {
        const len = length(n);
        let s;
        try {
          s = text.decode(bytes.subarray(at, at + len));
        } catch (err) {
          throw invalid("CBOR text is not UTF-8");
        }
        at += len;
        return s;
      }
      case 4: {
        const count = length(n); // every item takes at least one byte
        const out = [];
        for (let i = 0; i < count; i++) out.push(item(depth + 1));
        return out;
      }
      case 5: {
        const count = length(n * 2n);
        const out = Object.create(null);
        for (let i = 0; i < count / 2; i++) {
          const key = item(depth + 1);
          if (typeof key !== "string") throw invalid("CBOR map keys must be text here");
          if (Object.prototype.hasOwnProperty.call(out, key)) throw invalid("CBOR map repeats a key");
          out[key] = item(depth + 1);
        }
        return out;
      }
      default:
        throw invalid("CBOR outside the subset keyloads use (a float, tag or simple value)");
    }
  };
  const value = item(0);
  if (at !== bytes.length) throw invalid("trailing bytes after the CBOR item");
  return value;
}

/** Deterministic CBOR (RFC 8949 §4.2.1) of a value of the subset `decodeCbor` returns. */
export function encodeCbor(value) {
  if (typeof value === "number" || typeof value === "bigint") {
    if (typeof value === "number" && !Number.isInteger(value)) throw invalid("only integers are encoded here");
    const n = BigInt(value);
    if (n > MAX_UINT64 || n < -1n - MAX_UINT64) throw invalid("integer out of CBOR range");
    return n >= 0n ? encodeHead(0, n) : encodeHead(1, -1n - n);
  }
  if (typeof value === "string") {
    const raw = utf8.encode(value);
    return concat([encodeHead(3, raw.length), raw]);
  }
  if (value instanceof Uint8Array) return concat([encodeHead(2, value.length), value]);
  if (Array.isArray(value)) return concat([encodeHead(4, value.length), ...value.map(encodeCbor)]);
  if (value !== null && typeof value === "object") {
    const pairs = Object.keys(value).map((k) => [encodeCbor(k), encodeCbor(value[k])]);
    pairs.sort((x, y) => compareBytes(x[0], y[0]));
    return concat([encodeHead(5, pairs.length), ...pairs.flat()]);
  }
  throw invalid(`cannot encode ${typeof value} here`);
}

// --- Field checks (as watchtower/protocol/validation.py) ----------------------------------------

function requireText(value, name) {
  if (typeof value !== "string") throw invalid(`${name} must be a string`);
  if (!value) throw invalid(`${name} must not be empty`);
  return value;
}

function requireInt(value, name, minimum = 0, maximum = MAX_UINT64) {
  if (!(typeof value === "bigint" || (typeof value === "number" && Number.isInteger(value)))) {
    throw invalid(`${name} must be an integer`);
  }
  const n = BigInt(value);
  if (n < BigInt(minimum) || n > BigInt(maximum)) throw invalid(`${name} must be in [${minimum}, ${maximum}]`);
  return value;
}

function requireBytes(value, length, message) {
  if (!(value instanceof Uint8Array) || value.length !== length) throw invalid(message);
  return value;
}

export function requireBranch(branch) {
  const text = requireText(branch, "branch");
  if (text.length > MAX_BRANCH_CHARS || !/^[a-z0-9_-]+$/.test(text)) {
    throw invalid(`branch must be 1-${MAX_BRANCH_CHARS} characters of a-z, 0-9, '-' and '_'`);
  }
  return text;
}

const requireKeyloadId = (kid) => requireBytes(kid, KEYLOAD_ID_BYTES, `a keyload id is exactly ${KEYLOAD_ID_BYTES} bytes`);
const requireSessionKey = (key) => requireBytes(key, SESSION_KEY_BYTES,
  `a session key is exactly ${SESSION_KEY_BYTES} bytes`);

/** An account address: "0x" and 64 lowercase hex digits (a typed one is lowercased first). */
export function normalizeAddress(text) {
  const address = String(text).trim().toLowerCase();
  if (!/^0x[0-9a-f]{64}$/.test(address)) throw invalid("an address is 0x followed by 64 hex digits");
  return address;
}

/** The 32 bytes of an X25519 private key in its file's format: 64 hex digits (whitespace around
 * them ignored). */
export function secretKeyFromHex(text) {
  const hex = String(text).trim();
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) throw invalid("an X25519 private key is 64 hex digits");
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = parseInt(hex.substr(2 * i, 2), 16);
  return out;
}

/** The X25519 public key of a private key (to show which key is loaded). */
export async function publicKeyOf(secretKey) {
  const na = await ready();
  return na.crypto_scalarmult_base(secretKey);
}

// --- Keys ----------------------------------------------------------------------------------------

async function hkdf(ikm, info) {
  const subtle = globalThis.crypto.subtle;
  const key = await subtle.importKey("raw", ikm, "HKDF", false, ["deriveBits"]);
  return new Uint8Array(await subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt: SALT, info }, key, 256));
}

/** The AEAD key of the masked payloads under a keyload. */
export function payloadKey(sessionKey, keyloadId) {
  requireSessionKey(sessionKey);
  return hkdf(sessionKey, concat([utf8.encode("payload"), requireKeyloadId(keyloadId)]));
}

/** What a keyload (or a reseal) publishes about its session key. */
export function keyCommitment(sessionKey, keyloadId) {
  requireSessionKey(sessionKey);
  return hkdf(sessionKey, concat([utf8.encode("commit"), requireKeyloadId(keyloadId)]));
}

/** SHA-256 over the member set in address order (members: [{address, accountKeyId}]). */
export async function membersDigest(streamId, branch, keyloadId, members) {
  const chunks = [MEMBERS_DOMAIN, lenPrefixed(streamId), lenPrefixed(branch), requireKeyloadId(keyloadId)];
  for (const m of members) chunks.push(addressBytes(m.address), u64be(m.accountKeyId));
  return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", concat(chunks)));
}

function addressBytes(address) {
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = parseInt(address.substr(2 + 2 * i, 2), 16);
  return out;
}

// --- Keyload parts and reseals -----------------------------------------------------------------

function decodeEntries(raw, what) {
  if (!Array.isArray(raw) || raw.length === 0) throw invalid(`a ${what} holds at least one entry`);
  const entries = [];
  for (const item of raw) {
    if (!Array.isArray(item) || item.length !== 3 || !(item[0] instanceof Uint8Array) || item[0].length !== 32
        || !(item[2] instanceof Uint8Array) || item[2].length !== SEALED_KEY_BYTES) {
      throw invalid(`a ${what} entry is [address (32 bytes), account_key_id, sealed key (80 bytes)]`);
    }
    const entry = { address: "0x" + bytesToHex(item[0]), accountKeyId: requireInt(item[1], "account_key_id", 1),
      sealed: item[2] };
    if (entries.length && entry.address <= entries[entries.length - 1].address) {
      throw invalid(`a ${what}'s entries are in strictly increasing address order`);
    }
    entries.push(entry);
  }
  return entries;
}

function decodeMap(data, fields, what) {
  if (!(data instanceof Uint8Array) || data.length > MAX_PART_BYTES) {
    throw invalid(`a ${what} is at most ${MAX_PART_BYTES} bytes of CBOR`);
  }
  const doc = decodeCbor(data);
  const keys = doc !== null && typeof doc === "object" && !Array.isArray(doc) && !(doc instanceof Uint8Array)
    ? Object.keys(doc) : null;
  if (keys === null || keys.length !== fields.length || !fields.every((f) => keys.includes(f))) {
    throw invalid(`a ${what} has exactly the fields ${[...fields].sort().join(", ")}`);
  }
  return doc;
}

function requireVersion(doc, version, what) {
  if (doc.v !== version) throw invalid(`${what} version ${String(doc.v)} is not supported (this page reads v${version})`);
}

function checkCanonical(doc, data, what) {
  if (!equalBytes(encodeCbor(doc), data)) throw invalid(`a ${what} must be deterministic CBOR (RFC 8949 §4.2.1)`);
}

function describe(keyloadId, entries) {
  return { keyloadId, keyloadIdHex: bytesToHex(keyloadId), entries, first: entries[0].address,
    last: entries[entries.length - 1].address };
}

/** The keyload part in `data` (bytes), or INVALID_ARGUMENT. Byte-exact, as decode_part. */
export function decodePart(data) {
  const doc = decodeMap(data, PART_FIELDS, "keyload part");
  requireVersion(doc, KEYLOAD_VERSION, "keyload");
  const keyloadId = requireKeyloadId(doc.keyload_id);
  const streamId = requireText(doc.stream_id, "stream_id");
  const branch = requireBranch(doc.branch);
  const parts = requireInt(doc.parts, "parts", 1, MAX_MEMBERS);
  const part = requireInt(doc.part, "part", 0, parts - 1);
  const members = requireInt(doc.members, "members", 1, MAX_MEMBERS);
  for (const name of ["members_digest", "key_commitment"]) requireBytes(doc[name], 32, `${name} is 32 bytes`);
  const entries = decodeEntries(doc.entries, "keyload part");
  checkCanonical(doc, data, "keyload part");
  return { ...describe(keyloadId, entries), streamId, branch, part, parts, members,
    membersDigest: doc.members_digest, keyCommitment: doc.key_commitment };
}

/** The reseal in `data` (bytes), or INVALID_ARGUMENT. Byte-exact. */
export function decodeReseal(data) {
  const doc = decodeMap(data, RESEAL_FIELDS, "reseal");
  requireVersion(doc, RESEAL_VERSION, "reseal");
  const keyloadId = requireKeyloadId(doc.keyload_id);
  const streamId = requireText(doc.stream_id, "stream_id");
  const branch = requireBranch(doc.branch);
  requireBytes(doc.key_commitment, 32, "key_commitment is 32 bytes");
  const entries = decodeEntries(doc.entries, "reseal");
  checkCanonical(doc, data, "reseal");
  return { ...describe(keyloadId, entries), streamId, branch, keyCommitment: doc.key_commitment };
}

/** The entry of `address` in a part or reseal (binary search), or null. */
export function findEntry(holder, address) {
  let lo = 0, hi = holder.entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (holder.entries[mid].address < address) lo = mid + 1; else hi = mid;
  }
  const found = holder.entries[lo];
  return found && found.address === address ? found : null;
}

/** The part whose address range holds `address`, or null. */
export function partFor(parts, address) {
  return parts.find((p) => p.first <= address && address <= p.last) || null;
}

async function openSealed(holder, address, secretKey, what) {
  const found = findEntry(holder, address);
  if (found === null) {
    throw new KeyloadError("UNAUTHORIZED", `${address} is not a member of ${what} ${holder.keyloadIdHex}`);
  }
  if (!(secretKey instanceof Uint8Array) || secretKey.length !== 32) {
    throw decryptionFailed("an X25519 private key is 32 bytes");
  }
  const na = await ready();
  let key;
  try {
    key = na.crypto_box_seal_open(found.sealed, na.crypto_scalarmult_base(secretKey), secretKey);
  } catch (err) {
    throw decryptionFailed(`the sealed key for ${address} did not open with this key (it was sealed to key id ` +
      `${found.accountKeyId})`);
  }
  return { key, found };
}

/** The session key sealed to `address` in `part`, checked against the part's key commitment.
 * UNAUTHORIZED when `address` has no entry; DECRYPTION_FAILED when it does not open or opens to
 * another key than the one committed to. */
export async function openKeyload(part, address, secretKey) {
  const { key } = await openSealed(part, address, secretKey, "keyload");
  if (key.length !== SESSION_KEY_BYTES || !equalBytes(await keyCommitment(key, part.keyloadId), part.keyCommitment)) {
    throw decryptionFailed("the key sealed to you is not the one this keyload commits to");
  }
  return key;
}

/** The session key of a past keyload that a reseal gives `address`. Accepted only if it matches
 * the reseal's key commitment and, when given (the reader saw the keyload's parts), the keyload's
 * own `keyloadCommitment`. Errors as openKeyload. */
export async function openReseal(reseal, address, secretKey, keyloadCommitment = null) {
  if (keyloadCommitment != null && !equalBytes(keyloadCommitment, reseal.keyCommitment)) {
    throw decryptionFailed(`the reseal of keyload ${reseal.keyloadIdHex} commits to another key than the keyload did`);
  }
  const { key } = await openSealed(reseal, address, secretKey, "the reseal of keyload");
  if (key.length !== SESSION_KEY_BYTES || !equalBytes(await keyCommitment(key, reseal.keyloadId), reseal.keyCommitment)) {
    throw decryptionFailed("the resealed key is not the one the keyload commits to");
  }
  return key;
}

/** Every part of one keyload, checked together (as check_keyload): INVALID_ARGUMENT naming the
 * first rule broken, else {keyloadId, streamId, branch, members, membersDigest, keyCommitment}. */
export async function checkKeyload(parts) {
  if (!parts.length) throw invalid("no keyload part given");
  const head = parts[0];
  const ordered = [...parts].sort((a, b) => a.part - b.part);
  if (ordered.length !== head.parts || ordered.some((p, i) => p.part !== i)) {
    throw invalid(`keyload ${head.keyloadIdHex} needs parts 0..${head.parts - 1} once each`);
  }
  for (const p of ordered) {
    if (!equalBytes(p.keyloadId, head.keyloadId) || p.streamId !== head.streamId || p.branch !== head.branch
        || p.parts !== head.parts || p.members !== head.members || !equalBytes(p.membersDigest, head.membersDigest)
        || !equalBytes(p.keyCommitment, head.keyCommitment)) {
      throw invalid(`keyload part ${p.part} does not belong with part ${head.part} (another header)`);
    }
  }
  const members = ordered.flatMap((p) => p.entries.map((e) => ({ address: e.address, accountKeyId: e.accountKeyId })));
  for (let i = 1; i < members.length; i++) {
    if (members[i - 1].address >= members[i].address) {
      throw invalid("the keyload's members are not in strictly increasing address order across parts");
    }
  }
  if (members.length !== Number(head.members)) {
    throw invalid(`the keyload claims ${head.members} members and holds ${members.length}`);
  }
  const digest = await membersDigest(head.streamId, head.branch, head.keyloadId, members);
  if (!equalBytes(digest, head.membersDigest)) throw invalid("the keyload's members do not match its members digest");
  return { keyloadId: head.keyloadId, streamId: head.streamId, branch: head.branch, members,
    membersDigest: head.membersDigest, keyCommitment: head.keyCommitment };
}

// --- Masked payloads -----------------------------------------------------------------------------

/** Deterministic CBOR of {stream_id, sequence, keyload_id, branch, kind, content_type}. */
export function maskedAad({ streamId, sequence, keyloadId, branch, kind, contentType }) {
  return encodeCbor({ stream_id: requireText(streamId, "stream_id"),
    sequence: requireInt(sequence, "sequence", 1), keyload_id: requireKeyloadId(keyloadId),
    branch: requireBranch(branch), kind: requireText(kind, "kind"),
    content_type: requireText(contentType, "content_type") });
}

/** The plaintext of `masked` (nonce ‖ ciphertext ‖ tag) under `sessionKey` and its context
 * ({streamId, sequence, keyloadId, branch, kind, contentType}); DECRYPTION_FAILED when it was
 * altered or belongs elsewhere, INVALID_ARGUMENT for a malformed context or key. */
export async function unmask(sessionKey, masked, context) {
  const aad = maskedAad(context);
  const key = await payloadKey(sessionKey, context.keyloadId);
  if (!(masked instanceof Uint8Array) || masked.length < NONCE_BYTES + TAG_BYTES) throw decryptionFailed();
  const na = await ready();
  try {
    return na.crypto_aead_xchacha20poly1305_ietf_decrypt(null, masked.subarray(NONCE_BYTES), aad,
      masked.subarray(0, NONCE_BYTES), key);
  } catch (err) {
    throw decryptionFailed();
  }
}
