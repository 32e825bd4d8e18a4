// Checks a Provely v2 receipt with Node's own crypto: no Provely code, no npm package.
// usage: node verify-receipt.mjs RECEIPT.json KEYS.json   (KEYS: the JSON of GET /v1/receipts/keys)
// exit 0 valid, 1 tampered, 2 cannot check
import { createHash, createPublicKey, verify } from "node:crypto";
import { readFileSync } from "node:fs";

// RFC 8785 (JCS): numbers and strings as ECMAScript writes them, object keys sorted by UTF-16
// code units (what Array.prototype.sort does), no whitespace.
function jcs(value) {
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) throw new Error("not finite");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
  const keys = Object.keys(value).sort();
  return "{" + keys.map((k) => JSON.stringify(k) + ":" + jcs(value[k])).join(",") + "}";
}

function done(code, line) {
  (code === 0 ? console.log : console.error)(line);
  process.exit(code);
}

let doc, keys;
try {
  doc = JSON.parse(readFileSync(process.argv[2], "utf8"));
  keys = JSON.parse(readFileSync(process.argv[3], "utf8")).keys;
} catch (err) {
  done(2, `cannot read: ${err.message}`);
}
if (doc.alg !== "Ed25519" || doc.receipt?.version !== 2) done(2, "not an Ed25519 v2 receipt");
const key = keys.find((k) => k.key_id === doc.key_id && k.alg === "Ed25519");
if (!key) done(2, `unknown key ${doc.key_id}`);
const raw = Buffer.from(key.public_key, "base64");
if (createHash("sha256").update(raw).digest("hex").slice(0, 16) !== key.key_id) {
  done(2, `key ${key.key_id} does not match its public key`);
}
const publicKey = createPublicKey({
  key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") },
  format: "jwk",
});
const signature = Buffer.from(doc.signature, "base64url");
const payload = Buffer.from(jcs(doc.receipt), "utf8");
if (signature.length !== 64 || !verify(null, payload, publicKey, signature)) {
  done(1, `tampered: the signature does not match the receipt under key ${key.key_id}`);
}
done(0, `valid: receipt ${doc.receipt.id} of ${doc.receipt.operation_id} (${doc.receipt.verdict})`);
