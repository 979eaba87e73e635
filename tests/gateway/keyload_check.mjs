// The feed page's keyload code (watchtower/gateway/static/keyload.mjs) on conformance vectors.
//
//   node tests/gateway/keyload_check.mjs vectors/keyloads.json     check a vector file
//   node tests/gateway/keyload_check.mjs - < vectors.json          the same, from stdin
//   node tests/gateway/keyload_check.mjs --cases < cases.json      run cases, print results (no verdict)
//
// Every vector of a type this checker knows (keyload_check, keyload_open, masked_payload, unmask,
// reseal_open) is computed from its input and compared with its expect as
// watchtower/protocol/conformance.py compares: the same fields and values, or {"error": CODE}
// ("*": any error). A vector of another type is listed as skipped; it is not a failure. Prints
// JSON {"outcomes": [{id, type, passed, reason}], "skipped": [...]}; exits 1 when one failed.
import sodium from "../../watchtower/gateway/static/vendor/libsodium-wrappers.mjs";
import { bytesToHex } from "../../watchtower/gateway/static/signing.mjs";
import {
  checkKeyload, decodePart, decodeReseal, KeyloadError, keyCommitment, maskedAad, openKeyload, openReseal, partFor,
  payloadKey, ready, unmask,
} from "../../watchtower/gateway/static/keyload.mjs";

export const KNOWN_TYPES = ["keyload_check", "keyload_open", "masked_payload", "unmask", "reseal_open"];
const MAX_PLAINTEXT = 16384 - 24 - 16;

class VectorFormatError extends Error {
  constructor(message) {
    super(message);
    this.code = "VECTOR_FORMAT";
  }
}

function get(input, key) {
  if (input === null || typeof input !== "object" || !(key in input)) throw new VectorFormatError(`input lacks ${key}`);
  return input[key];
}

function hex(input, key) {
  const value = get(input, key);
  if (typeof value !== "string" || value.length % 2 !== 0 || /[^0-9a-fA-F]/.test(value)) {
    throw new VectorFormatError(`input ${key} is not a hex string`);
  }
  return Uint8Array.from(value.match(/../g) || [], (h) => parseInt(h, 16));
}

function hexList(input, key) {
  const values = get(input, key);
  if (!Array.isArray(values)) throw new VectorFormatError(`input ${key} must be a list of hex strings`);
  return values.map((_, i) => hex(values, String(i)));
}

const int = (n) => (typeof n === "bigint" && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n);

function context(input) {
  return { keyloadId: hex(input, "keyload_id_hex"), streamId: get(input, "stream_id"),
    sequence: get(input, "sequence"), branch: get(input, "branch"), kind: get(input, "kind"),
    contentType: get(input, "content_type") };
}

async function openResult(keyloadId, accountKeyId, sessionKey, extra) {
  return { keyload_id_hex: bytesToHex(keyloadId), ...extra, account_key_id: int(accountKeyId),
    session_key_hex: bytesToHex(sessionKey), key_commitment_hex: bytesToHex(await keyCommitment(sessionKey, keyloadId)) };
}

const COMPUTATIONS = {
  async keyload_check(input) {
    const summary = await checkKeyload(hexList(input, "parts_hex").map(decodePart));
    return { keyload_id_hex: bytesToHex(summary.keyloadId), stream_id: summary.streamId, branch: summary.branch,
      parts: get(input, "parts_hex").length,
      members: summary.members.map((m) => ({ address: m.address, account_key_id: int(m.accountKeyId) })),
      members_digest_hex: bytesToHex(summary.membersDigest), key_commitment_hex: bytesToHex(summary.keyCommitment) };
  },

  async keyload_open(input) {
    // A member reads only the part whose address range holds it, as ConfidentialReader does.
    const address = get(input, "address");
    const part = partFor(hexList(input, "parts_hex").map(decodePart), address);
    if (part === null) throw new KeyloadError("UNAUTHORIZED", `${address} is in no part of this keyload`);
    const sessionKey = await openKeyload(part, address, hex(input, "test_only_x25519_secret_key_hex"));
    const found = part.entries.find((e) => e.address === address);
    return openResult(part.keyloadId, found.accountKeyId, sessionKey, { part: part.part });
  },

  async reseal_open(input) {
    // As keyload_open, from a reseal. A reader that read the keyload passes its own commitment
    // (keyload_key_commitment_hex, or the commitment of the keyload's parts in parts_hex), so a
    // reseal cannot swap in another key.
    const address = get(input, "address");
    const reseal = decodeReseal(hex(input, "reseal_hex"));
    let commitment = "keyload_key_commitment_hex" in input ? hex(input, "keyload_key_commitment_hex") : null;
    if (commitment === null && "parts_hex" in input) {
      const own = hexList(input, "parts_hex").map(decodePart).find((p) => p.keyloadIdHex === reseal.keyloadIdHex);
      if (own) commitment = own.keyCommitment;
    }
    const sessionKey = await openReseal(reseal, address, hex(input, "test_only_x25519_secret_key_hex"), commitment);
    const found = reseal.entries.find((e) => e.address === address);
    return openResult(reseal.keyloadId, found.accountKeyId, sessionKey, {});
  },

  async masked_payload(input) {
    // The page never masks; here the AEAD seals with the vector's nonce (libsodium) so the bytes
    // compare exactly, and the page's unmask must open them back to the plaintext.
    const sessionKey = hex(input, "session_key_hex"), ctx = context(input);
    const plaintext = hex(input, "plaintext_hex"), nonce = hex(input, "nonce_hex");
    const aad = maskedAad(ctx);
    const key = await payloadKey(sessionKey, ctx.keyloadId);
    if (plaintext.length > MAX_PLAINTEXT) throw new KeyloadError("PAYLOAD_TOO_LARGE", "plaintext too large");
    if (nonce.length !== 24) throw new KeyloadError("INVALID_ARGUMENT", "the nonce is exactly 24 bytes");
    const body = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, null, nonce, key);
    const masked = new Uint8Array(nonce.length + body.length);
    masked.set(nonce);
    masked.set(body, nonce.length);
    const opened = await unmask(sessionKey, masked, ctx);
    if (bytesToHex(opened) !== bytesToHex(plaintext)) throw new Error("unmask did not return the plaintext");
    return { payload_key_hex: bytesToHex(key), aad_hex: bytesToHex(aad), masked_hex: bytesToHex(masked) };
  },

  async unmask(input) {
    const plaintext = await unmask(hex(input, "session_key_hex"), hex(input, "masked_hex"), context(input));
    return { plaintext_hex: bytesToHex(plaintext) };
  },
};

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

function sortedKeys(obj) {
  return Object.keys(obj).sort();
}

/** {result} or {error: code, message} for one vector's input. */
export async function compute(type, input) {
  try {
    return { result: await COMPUTATIONS[type](input) };
  } catch (err) {
    return { error: err && err.code ? err.code : "UNEXPECTED", message: String((err && err.message) || err) };
  }
}

function verdict(vector, got) {
  const expect = vector.expect;
  if (expect && typeof expect === "object" && "error" in expect) {
    if (got.error === undefined) return `expected ${expect.error}, got a result`;
    if (got.error === "VECTOR_FORMAT" || got.error === "UNEXPECTED") return `${got.error}: ${got.message}`;
    return expect.error === "*" || expect.error === got.error ? null : `expected ${expect.error}, got ${got.error}: ${got.message}`;
  }
  if (got.error !== undefined) return `${got.error}: ${got.message}`;
  const keys = sortedKeys(got.result);
  if (!same(sortedKeys(expect), keys)) return `fields ${keys} != expected ${sortedKeys(expect)}`;
  for (const k of keys) if (!same(got.result[k], expect[k])) return `${k}: ${JSON.stringify(got.result[k])} != expected`;
  return null;
}

export async function checkVectors(doc) {
  const outcomes = [], skipped = [];
  for (const vector of doc.vectors) {
    if (!KNOWN_TYPES.includes(vector.type)) {
      skipped.push({ id: vector.id, type: vector.type });
      continue;
    }
    const reason = verdict(vector, await compute(vector.type, vector.input));
    outcomes.push({ id: vector.id, type: vector.type, passed: reason === null, reason });
  }
  return { outcomes, skipped };
}

async function readAll(stream) {
  let text = "";
  for await (const chunk of stream) text += chunk;
  return text;
}

await ready();
const arg = process.argv[2] || "-";
if (arg === "--cases") {
  // [{id, type, input}] -> [{id, result} | {id, error, message}]
  const out = [];
  for (const c of JSON.parse(await readAll(process.stdin))) out.push({ id: c.id, ...(await compute(c.type, c.input)) });
  process.stdout.write(JSON.stringify(out, (_k, v) => (typeof v === "bigint" ? v.toString() : v)));
} else {
  const text = arg === "-" ? await readAll(process.stdin) : (await import("node:fs")).readFileSync(arg, "utf8");
  const report = await checkVectors(JSON.parse(text));
  process.stdout.write(JSON.stringify(report, null, 1) + "\n");
  if (report.outcomes.some((o) => !o.passed)) process.exitCode = 1;
}
