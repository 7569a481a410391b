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
// log level, and reads an unknown resource; Python's llm_query and
// llm_query_batched reach the client's sampling handler through
// input-required results (a batch in one round, the code paused in its
// sandbox meanwhile); a second client declares the tasks extension, runs
// run_python as a task, reads its status and latest output with
// tasks/get and cancels it with tasks/cancel; two subscriptions/listen
// streams hear of a file written in a sandbox, one is closed. It asserts each step
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
  { capabilities: { sampling: {} }, versionNegotiation: negotiation });
// The model: answers "answer(<prompt>)"; counts how many prompts it holds at
// once (a batch of one round is answered in parallel by the client).
const sampling = { asked: [], inFlight: 0, maxInFlight: 0 };
client.setRequestHandler("sampling/createMessage", async (request) => {
  const prompt = request.params.messages[0].content.text;
  sampling.asked.push(prompt);
  sampling.maxInFlight = Math.max(sampling.maxInFlight, ++sampling.inFlight);
  await new Promise((resolve) => setTimeout(resolve, 100));
  sampling.inFlight--;
  return { role: "assistant", model: "test-model", content: { type: "text", text: `answer(${prompt})` } };
});
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
// llm_query: three prompts in two rounds (one, then the batch of two).
r = await client.callTool({ name: "run_python", arguments: {
  code: "import os\na = llm_query('one')\nb = llm_query_batched(['two', 'three'])\n[a] + b + [os.getpid()]" } });
assert.equal(r.structuredContent.status, "ok", text(r));
out.llm = r.structuredContent.return_value.slice(0, 3);
out.llm_asked = sampling.asked;
out.llm_batched_at_once = sampling.maxInFlight;

// A task: run_python as a task, its output and status, then cancelled.
// The v2 client has no task results of its own (resultType "task" is the
// extension's): these requests go through its transport as they are, with
// ids of their own, and their answers are taken before the client sees them.
const waiting = new Map();
let nextId = 1;
const clientOnMessage = transport.onmessage;
transport.onmessage = (msg, extra) => {
  if (waiting.has(msg.id)) waiting.get(msg.id)(msg);
  else clientOnMessage(msg, extra);
};
const tasks = async (method, params) => {
  const id = `task-${nextId++}`;
  const answer = new Promise((resolve) => waiting.set(id, resolve));
  await transport.send({ jsonrpc: "2.0", id, method, params: { ...params, _meta: {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": { sampling: {}, extensions: { "io.modelcontextprotocol/tasks": {} } } } } });
  const msg = await answer;
  assert.ok(msg.result, JSON.stringify(msg));
  return msg.result;
};
const settle = async (taskId, until) => {
  let got;
  for (let i = 0; i < 600; i++) { // up to a minute: a busy machine starts Python slowly
    got = await tasks("tasks/get", { taskId });
    if (until(got)) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return got;
};
const created = await tasks("tools/call", { name: "run_python", arguments: {
  code: "import time\nprint('task-started', flush=True)\ntime.sleep(60)", timeout_s: 90 } });
assert.equal(created.resultType, "task");
out.task_created = created.status;
let got = await settle(created.taskId, (t) => (t.statusMessage || "").includes("task-started"));
out.task_working = got.status;
out.task_output = got.statusMessage;
const ack = await tasks("tasks/cancel", { taskId: created.taskId });
assert.equal(ack.resultType, "complete");
got = await settle(created.taskId, (t) => t.status !== "working");
out.task_final = got.status;
// A task that completes: its result is kept for tasks/get.
const quick = await tasks("tools/call", { name: "run_python", arguments: { code: "6 * 7" } });
got = await settle(quick.taskId, (t) => t.status !== "working");
out.task_result = got.result?.structuredContent?.return_value;
// A task whose code calls llm_query waits in input_required; tasks/update answers it.
const asking = await tasks("tools/call", { name: "run_python", arguments: { code: "llm_query('in a task')" } });
got = await settle(asking.taskId, (t) => t.status !== "working");
out.task_input_status = got.status;
const [key, question] = Object.entries(got.inputRequests ?? {})[0] ?? [];
out.task_question = question?.params?.messages?.[0]?.content?.text;
await tasks("tasks/update", { taskId: asking.taskId, inputResponses: {
  [key]: { role: "assistant", model: "test-model", content: { type: "text", text: "answered by update" } } } });
got = await settle(asking.taskId, (t) => t.status !== "working" && t.status !== "input_required");
out.task_input_result = got.result?.structuredContent?.return_value;
transport.onmessage = clientOnMessage;

// subscriptions/listen: two subscriptions at once on one connection, each
// acknowledged with its own id and the part of its filter codecage honors
// (files of a sandbox; not tools' list, nor a run's files, which never
// change); a file written through a tool reaches each subscription naming
// it; one is closed, the other still hears. Raw messages are watched to
// check the subscriptionId of each against its listen request's id.
const raw = [];
const listenIds = [];
const sendRaw = transport.send.bind(transport);
transport.send = (msg, opts) => {
  if (msg.method === "subscriptions/listen") listenIds.push(msg.id);
  return sendRaw(msg, opts);
};
const onRaw = transport.onmessage;
transport.onmessage = (msg, extra) => {
  if (msg.method?.startsWith("notifications/")) raw.push(msg);
  onRaw(msg, extra);
};
const updates = [];
client.setNotificationHandler("notifications/resources/updated", (n) => { updates.push(n.params.uri); });
const lbox = `listen2026${process.pid}`;
const uri = (f) => `codecage://sandboxes/${lbox}/files/${f}`;
const waitFor = async (cond) => {
  for (let i = 0; i < 100 && !cond(); i++) await new Promise((resolve) => setTimeout(resolve, 50));
  return cond();
};
const tagged = (id, method) => raw.filter((m) => m.method === method &&
  m.params?._meta?.["io.modelcontextprotocol/subscriptionId"] === id);
r = await client.callTool({ name: "sandbox_create", arguments: { name: lbox } });
assert.notEqual(r.isError, true, text(r));
try {
  const subA = await client.listen({ toolsListChanged: true,
    resourceSubscriptions: [uri("a.txt"), "codecage://runs/none/x"] });
  const subB = await client.listen({ resourceSubscriptions: [uri("a.txt"), uri("sub/b.txt")] });
  const [idA, idB] = listenIds;
  out.listen_ids_differ = idA !== idB;
  out.listen_honored = [subA.honoredFilter, subB.honoredFilter];
  out.listen_acks = [tagged(idA, "notifications/subscriptions/acknowledged").length,
    tagged(idB, "notifications/subscriptions/acknowledged").length];
  await client.callTool({ name: "file_write", arguments: { sandbox: lbox, path: "a.txt", content: "1" } });
  await waitFor(() => tagged(idA, "notifications/resources/updated").length > 0 &&
    tagged(idB, "notifications/resources/updated").length > 0);
  out.listen_first = [tagged(idA, "notifications/resources/updated").map((m) => m.params.uri),
    tagged(idB, "notifications/resources/updated").map((m) => m.params.uri)];
  await subA.close();
  out.listen_closed = await subA.closed;
  await client.callTool({ name: "file_write", arguments: { sandbox: lbox, path: "sub/b.txt", content: "2" } });
  await waitFor(() => tagged(idB, "notifications/resources/updated").length > 1);
  await client.callTool({ name: "file_write", arguments: { sandbox: lbox, path: "a.txt", content: "3" } });
  await waitFor(() => tagged(idB, "notifications/resources/updated").length > 2);
  out.listen_after_close = [tagged(idA, "notifications/resources/updated").map((m) => m.params.uri),
    tagged(idB, "notifications/resources/updated").map((m) => m.params.uri)];
  out.listen_handler_saw = updates.length;
  await subB.close();
} finally {
  await client.callTool({ name: "sandbox_remove", arguments: { name: lbox } });
}
transport.onmessage = onRaw;
transport.send = sendRaw;

try {
  await client.readResource({ uri: "codecage://runs/none/x" });
  out.unknown_resource = "read";
} catch (e) {
  out.unknown_resource = e.code;
}
await client.close();
console.log(JSON.stringify(out));
