// Checks Provely receipts in the browser: Ed25519 (WebCrypto) over the canonical JSON of the
// receipt body (RFC 8785 for version 2, sorted keys for version 1). No server-side check: the
// keys come from the "keys" box or from this server's GET /v1/receipts/keys.
"use strict";

const KEYS_URL = "/v1/receipts/keys";

class Refusal extends Error {}

// Refuses a JSON text that repeats a key in one object (two parsers must never disagree).
function assertNoDuplicateKeys(text) {
  const stack = [];
  let i = 0;
  let expectKey = false;
  while (i < text.length) {
    const ch = text[i];
    if (ch === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      const frame = stack[stack.length - 1];
      if (frame && frame.object && expectKey) {
        const key = JSON.parse(text.slice(i, j + 1));
        if (frame.keys.has(key)) throw new Refusal(`malformed receipt: duplicate key "${key}"`);
        frame.keys.add(key);
        expectKey = false;
      }
      i = j + 1;
      continue;
    }
    if (ch === "{") { stack.push({ object: true, keys: new Set() }); expectKey = true; }
    else if (ch === "[") stack.push({ object: false });
    else if (ch === "}" || ch === "]") stack.pop();
    else if (ch === ",") expectKey = Boolean(stack[stack.length - 1]?.object);
    i += 1;
  }
}

function parseStrict(text, what) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Refusal(`malformed ${what}: not valid JSON (${err.message})`);
  }
  assertNoDuplicateKeys(text);
  return value;
}

function jsonNumber(value) {
  if (!Number.isFinite(value)) throw new Refusal("malformed receipt: a number is not finite");
  return JSON.stringify(value);
}

// RFC 8785: keys sorted by UTF-16 code units (Array.prototype.sort), ECMAScript numbers.
function jcs(value) {
  if (value === null || typeof value !== "object") {
    return typeof value === "number" ? jsonNumber(value) : JSON.stringify(value);
  }
  if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
  const keys = Object.keys(value).sort();
  return "{" + keys.map((k) => JSON.stringify(k) + ":" + jcs(value[k])).join(",") + "}";
}

// Version 1: Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False):
// keys sorted by code point.
function byCodePoint(a, b) {
  const x = Array.from(a), y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i += 1) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

function pythonSorted(value) {
  if (value === null || typeof value !== "object") {
    return typeof value === "number" ? jsonNumber(value) : JSON.stringify(value);
  }
  if (Array.isArray(value)) return "[" + value.map(pythonSorted).join(",") + "]";
  const keys = Object.keys(value).sort(byCodePoint);
  return "{" + keys.map((k) => JSON.stringify(k) + ":" + pythonSorted(value[k])).join(",") + "}";
}

function b64ToBytes(text, url) {
  let s = text;
  if (url) {
    if (!/^[A-Za-z0-9_-]*$/.test(s)) return null;
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
  }
  try {
    return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  } catch (err) {
    return null;
  }
}

function bytesToB64url(bytes) {
  let s = "";
  bytes.forEach((b) => { s += String.fromCharCode(b); });
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function loadKeys(pasted) {
  if (pasted.trim()) {
    const doc = parseStrict(pasted, "key list");
    if (!doc || !Array.isArray(doc.keys)) throw new Refusal("malformed key list: no \"keys\" array");
    return doc.keys;
  }
  let answer;
  try {
    answer = await fetch(KEYS_URL, { headers: { Accept: "application/json" } });
  } catch (err) {
    throw new Refusal(`cannot fetch the key list from ${KEYS_URL}: paste the keys instead`);
  }
  if (!answer.ok) throw new Refusal(`cannot fetch the key list from ${KEYS_URL} (HTTP ${answer.status}): paste the keys instead`);
  const doc = parseStrict(await answer.text(), "key list");
  if (!doc || !Array.isArray(doc.keys)) throw new Refusal("malformed key list: no \"keys\" array");
  return doc.keys;
}

function describeKey(key) {
  if (key.status === "retired") {
    return `key ${key.key_id} (retired${key.retired_at ? " " + key.retired_at.slice(0, 10) : ""})`;
  }
  return `key ${key.key_id} (${key.status || "active"})`;
}

function readDocument(doc) {
  if (!doc || typeof doc !== "object" || Array.isArray(doc)) throw new Refusal("malformed receipt: a receipt document is a JSON object");
  for (const name of ["receipt", "signature", "key_id"]) {
    if (!(name in doc)) throw new Refusal(`malformed receipt: missing ${name}`);
  }
  const body = doc.receipt;
  if (!body || typeof body !== "object" || Array.isArray(body)) throw new Refusal("malformed receipt: 'receipt' is not a JSON object");
  if (typeof doc.signature !== "string" || !doc.signature) throw new Refusal("malformed receipt: 'signature' is not a non-empty string");
  if (typeof doc.key_id !== "string" || !doc.key_id) throw new Refusal("malformed receipt: 'key_id' is not a non-empty string");
  const alg = doc.alg === undefined ? "Ed25519" : doc.alg;
  if (alg !== "Ed25519") throw new Refusal(`cannot check: algorithm ${alg} is not Ed25519`);
  if (body.version !== 1 && body.version !== 2) throw new Refusal(`cannot check: receipt version ${JSON.stringify(body.version)} is not one this page reads`);
  return body;
}

// One receipt document: resolves to {body, key}; throws Refusal with the reason.
async function checkOne(doc, keys) {
  const body = readDocument(doc);
  const key = keys.find((k) => k && k.key_id === doc.key_id);
  if (!key) throw new Refusal(`unknown key ${doc.key_id}: it is not in the key list`);
  if (key.alg !== undefined && key.alg !== "Ed25519") throw new Refusal(`key ${key.key_id} is not an Ed25519 key`);
  const raw = typeof key.public_key === "string" ? b64ToBytes(key.public_key, false) : null;
  if (!raw || raw.length !== 32) throw new Refusal(`key ${key.key_id} is not a 32-byte Ed25519 public key`);
  const digest = hex(await crypto.subtle.digest("SHA-256", raw));
  if (digest.slice(0, 16) !== key.key_id) throw new Refusal(`key ${key.key_id} does not match its public key`);
  const signature = b64ToBytes(doc.signature, true);
  const tampered = new Refusal(`tampered: the signature does not match the receipt under key ${key.key_id}`);
  if (!signature || signature.length !== 64 || bytesToB64url(signature) !== doc.signature) throw tampered;
  const text = body.version === 2 ? jcs(body) : pythonSorted(body);
  const publicKey = await crypto.subtle.importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
  const ok = await crypto.subtle.verify({ name: "Ed25519" }, publicKey, signature, new TextEncoder().encode(text));
  if (!ok) throw tampered;
  return { body, key };
}

function documentsOf(value) {
  if (Array.isArray(value)) return value;
  if (value && typeof value === "object" && Array.isArray(value.data)) return value.data;
  return [value];
}

function label(body) {
  return `receipt ${body.id} of ${body.operation_id} (${body.verdict})`;
}

// Checks every pasted receipt; all must verify. Returns the lines of the chain and the summary.
async function checkAll(text, keysText) {
  if (!text.trim()) throw new Refusal("paste a receipt first");
  const docs = documentsOf(parseStrict(text, "receipt"));
  if (!docs.length) throw new Refusal("the list holds no receipt");
  const keys = await loadKeys(keysText);
  const checked = [];
  for (let i = 0; i < docs.length; i += 1) {
    try {
      checked.push(await checkOne(docs[i], keys));
    } catch (err) {
      if (err instanceof Refusal && docs.length > 1) throw new Refusal(`receipt ${i + 1} of ${docs.length}: ${err.message}`);
      throw err;
    }
  }
  const supersededBy = new Map();
  checked.forEach(({ body }) => { if (body.supersedes) supersededBy.set(body.supersedes, body); });
  const lines = checked.map(({ body, key }) => {
    let line = `${label(body)}: valid, signed by ${describeKey(key)}, version ${body.version}`;
    if (body.supersedes) line += `; it supersedes ${body.supersedes}`;
    const newer = supersededBy.get(body.id);
    if (newer) line += `; superseded by ${newer.id} (${newer.verdict})`;
    return line;
  });
  const current = checked.filter(({ body }) => !supersededBy.has(body.id));
  const first = checked[0];
  let summary;
  if (checked.length === 1) {
    summary = `Verified: ${lines[0]}.`;
  } else {
    const heads = current.map(({ body }) => body.id).join(", ");
    summary = `Verified: all ${checked.length} receipts are valid; the current one is ${heads || "none"}. ${lines.join(". ")}.`;
  }
  if (checked.length === 1 && first.body.supersedes) summary += " Check the receipt it supersedes by pasting both as a list.";
  return { lines, summary };
}

function show(outcome, text, lines) {
  const out = document.getElementById("result");
  out.dataset.outcome = outcome;
  out.textContent = text;
  const chain = document.getElementById("chain");
  chain.replaceChildren(...lines.map((line) => {
    const li = document.createElement("li");
    li.textContent = line;
    return li;
  }));
}

async function run() {
  const out = document.getElementById("result");
  out.dataset.outcome = "";
  out.textContent = "Checking…";
  try {
    const { lines, summary } = await checkAll(document.getElementById("receipt").value, document.getElementById("keys").value);
    show("verified", summary, lines);
  } catch (err) {
    const reason = err instanceof Refusal ? err.message : `cannot check: ${err.message}`;
    show("refused", `Refused: ${reason}.`, []);
  }
}

function fromFragment() {
  const match = /^#receipt=([A-Za-z0-9_-]+)$/.exec(window.location.hash);
  if (!match) return false;
  const bytes = b64ToBytes(match[1], true);
  if (!bytes) return false;
  document.getElementById("receipt").value = new TextDecoder().decode(bytes);
  return true;
}

function acceptDrops() {
  const area = document.getElementById("receipt");
  area.addEventListener("dragover", (event) => { event.preventDefault(); area.classList.add("dragging"); });
  area.addEventListener("dragleave", () => area.classList.remove("dragging"));
  area.addEventListener("drop", async (event) => {
    event.preventDefault();
    area.classList.remove("dragging");
    const file = event.dataTransfer && event.dataTransfer.files[0];
    if (file) { area.value = await file.text(); run(); }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("check").addEventListener("click", run);
  acceptDrops();
  if (fromFragment()) run();
});
