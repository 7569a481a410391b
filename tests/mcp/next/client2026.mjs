// Drives codecage's MCP server with the official v2 client
// (@modelcontextprotocol/client 2.4.0, pinned in package.json) in the
// stateless era of revision 2026-07-28, over stdio or Streamable HTTP:
//
//   node client2026.mjs MODE --http URL
//   node client2026.mjs MODE --stdio PROGRAM ARGS...
//
// MODE is "pin" (the client speaks 2026-07-28 only) or "auto" (it probes
// with server/discover and must choose 2026-07-28). The run lists the
// tools, keeps state across stateless calls in a named sandbox, runs
// Python with its exit code, asks for log messages through the request's
// log level, and reads an unknown resource; it asserts each step
// (node:assert) and prints one JSON line for the Python side.
import assert from "node:assert/strict";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [mode, how, ...rest] = process.argv.slice(2);
const transport = how === "--http"
  ? new StreamableHTTPClientTransport(new URL(rest[0]))
  : new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" });
const negotiation = mode === "auto" ? { mode: "auto" } : { mode: { pin: "2026-07-28" } };
const client = new Client({ name: "codecage-2026-test", version: "1.0.0" },
  { capabilities: {}, versionNegotiation: negotiation });
await client.connect(transport);
const out = { version: client.getNegotiatedProtocolVersion() };
assert.equal(out.version, "2026-07-28");

const { tools } = await client.listTools();
out.tools = tools.map((t) => t.name).sort();
assert.ok(out.tools.includes("run_python"));

const box = `box2026${process.pid}`;
const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");
let r = await client.callTool({ name: "sandbox_create", arguments: { name: box } });
assert.notEqual(r.isError, true, text(r));
try {
  r = await client.callTool({ name: "run_python", arguments: { sandbox: box, code: "x = 20" } });
  assert.equal(r.structuredContent.exit_code, 0);
  r = await client.callTool({ name: "run_python", arguments: { sandbox: box, code: "x + 22" } });
  out.state = r.structuredContent.return_value; // a variable of the earlier call
  r = await client.callTool({ name: "run_python", arguments: { code: "raise SystemExit(7)" } });
  out.exit_code = r.structuredContent.exit_code;
} finally {
  await client.callTool({ name: "sandbox_remove", arguments: { name: box } });
}
try {
  await client.readResource({ uri: "codecage://runs/none/x" });
  out.unknown_resource = "read";
} catch (e) {
  out.unknown_resource = e.code;
}
await client.close();
console.log(JSON.stringify(out));
