// Reads cases (JSON) on stdin and prints, per case, the JS signing bytes (hex) and the JS verdict.
// Used by tests/gateway/test_feed_page_signing.py to compare watchtower/gateway/static/signing.mjs
// with the Python protocol core.
import { bytesToHex, signingBytes, verifyMessage } from "../../watchtower/gateway/static/signing.mjs";

let text = "";
for await (const chunk of process.stdin) text += chunk;
const out = [];
for (const c of JSON.parse(text)) {
  let bytes = null, valid = null, error = null;
  try {
    bytes = bytesToHex(signingBytes(c.message));
    if (c.public_key_hex) valid = await verifyMessage(c.message, c.public_key_hex);
  } catch (e) {
    error = String(e && e.message || e);
  }
  out.push({ id: c.id, signing_bytes_hex: bytes, valid, error });
}
process.stdout.write(JSON.stringify(out));
