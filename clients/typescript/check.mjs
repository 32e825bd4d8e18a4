// @ts-check
// A client of Provely generated from its OpenAPI document: `openapi-typescript` makes
// schema.d.ts from the served /openapi.json, `openapi-fetch` sends the requests, and `tsc`
// checks this file against those types (a request the document no longer allows fails).
// It creates an operation, refunds at the Stripe sandbox with the operation id as the
// idempotency key, reports the result, reads the operation until it is final, and checks the
// receipt with docs/examples/verify-receipt.mjs.
// env: PROVELY_URL, PROVELY_API_KEY, SANDBOX_URL, SANDBOX_KEY, CHARGE, VERIFY_SCRIPT, WORK_DIR
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import createClient from "openapi-fetch";

/** @param {string} name */
function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

/**
 * @param {string} what
 * @param {unknown} error
 * @returns {never}
 */
function fail(what, error) {
  console.error(`${what}: ${JSON.stringify(error)}`);
  process.exit(1);
}

/** @type {import("openapi-fetch").Client<import("./schema.js").paths>} */
const client = createClient({
  baseUrl: env("PROVELY_URL"),
  headers: { Authorization: `Bearer ${env("PROVELY_API_KEY")}` },
});
const charge = env("CHARGE");

const created = await client.POST("/v1/operations", {
  params: { header: { "Idempotency-Key": `ts-${charge}` } },
  body: { contract: "stripe.refund.succeeded", input: { charge, amount: 2000, currency: "usd" } },
});
if (!created.data) fail("create", created.error);
const operationId = created.data.id;
const path = { path: { operation_id: operationId } };

const refunded = await fetch(`${env("SANDBOX_URL")}/v1/refunds`, {
  method: "POST",
  headers: {
    Authorization: `Bearer ${env("SANDBOX_KEY")}`,
    "Idempotency-Key": operationId,
    "Content-Type": "application/x-www-form-urlencoded",
  },
  body: new URLSearchParams({ charge, amount: "2000" }),
});
const refund = await refunded.json();

const reported = await client.POST("/v1/operations/{operation_id}/action", {
  params: path,
  body: { phase: "result", http_status: refunded.status, result: refund },
});
if (!reported.data) fail("report", reported.error);

let operation = reported.data;
for (let i = 0; i < 120 && !operation.final; i++) {
  await new Promise((resolve) => setTimeout(resolve, 1000)); // PENDING is a normal answer
  const read = await client.GET("/v1/operations/{operation_id}", { params: path });
  if (!read.data) fail("read", read.error);
  operation = read.data;
}

const receipt = await client.GET("/v1/operations/{operation_id}/receipt", { params: path });
const keys = await client.GET("/v1/receipts/keys");
if (!receipt.data || !keys.data) fail("receipt", receipt.error ?? keys.error);
const work = env("WORK_DIR");
writeFileSync(`${work}/receipt.json`, JSON.stringify(receipt.data));
writeFileSync(`${work}/keys.json`, JSON.stringify(keys.data));
const checked = execFileSync(
  process.execPath,
  [env("VERIFY_SCRIPT"), `${work}/receipt.json`, `${work}/keys.json`],
  { encoding: "utf8" },
);
console.log(JSON.stringify({ id: operationId, verdict: operation.verdict, check: checked.trim() }));
