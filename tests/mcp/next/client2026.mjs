// Drives codecage's MCP server with the official v2 client
// (@modelcontextprotocol/client 2.4.0, pinned in package.json) in the
// stateless era of revision 2026-07-28, over stdio or Streamable HTTP:
//
//   node client2026.mjs MODE --http URL
//   node client2026.mjs MODE --stdio PROGRAM ARGS...
//
// MODE is "pin" (the client speaks 2026-07-28 only) or "auto" (it probes
// with server/discover and must choose 2026-07-28). The run lists the
// tools and calls every one of them, checking what each answers in
// structuredContent (a tool listed but never called fails the run): a
// named sandbox keeps files and Python state across stateless calls, is
// listed by its label, logged, stopped (variables gone, files kept) and
// removed; Python and shell runs give their exit codes. Bad input gets its
// exact shape: an unknown tool is a -32602 error, a missing, mistyped,
// unknown or out-of-range argument an isError result naming it. Log
// messages come only to a call whose _meta carries a log level
// (io.modelcontextprotocol/logLevel), at that level; an unknown resource
// is -32602. Python's llm_query and llm_query_batched reach the client's
// sampling handler through input-required results (a batch in one round,
// the code paused in its sandbox meanwhile), and a run that calls
// llm_query past its host-call budget (100) gets HostCallBudgetExceeded
// and exit code 1; a second client declares the tasks extension, runs
// run_python as a task, reads its status and latest output with
// tasks/get and cancels it with tasks/cancel, after which the process the
// run started is gone (/proc is read for its marker); two
// subscriptions/listen streams hear of a file written in a sandbox, one is
// closed. It asserts each step (node:assert) and prints one JSON line for
// the Python side.
import assert from "node:assert/strict";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { readdirSync, readFileSync } from "node:fs";

const [mode, how, ...rest] = process.argv.slice(2);
const transport = how === "--http"
  ? new StreamableHTTPClientTransport(new URL(rest[0]))
  : new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" });
const negotiation = mode === "auto" ? { mode: "auto" } : { mode: { pin: "2026-07-28" } };
// maxRounds: the budget run below takes 100 rounds of input (the client's default is 10).
const client = new Client({ name: "codecage-2026-test", version: "1.0.0" },
  { capabilities: { sampling: {} }, versionNegotiation: negotiation, inputRequired: { maxRounds: 150 } });
// The model: answers "answer(<prompt>)"; counts how many prompts it holds at
// once (a batch of one round is answered in parallel by the client).
// Prompts of the budget run are answered at once and only counted.
const sampling = { asked: [], inFlight: 0, maxInFlight: 0, budget: 0 };
client.setRequestHandler("sampling/createMessage", async (request) => {
  const prompt = request.params.messages[0].content.text;
  const reply = { role: "assistant", model: "test-model", content: { type: "text", text: `answer(${prompt})` } };
  if (prompt.startsWith("budget ")) {
    sampling.budget++;
    return reply;
  }
  sampling.asked.push(prompt);
  sampling.maxInFlight = Math.max(sampling.maxInFlight, ++sampling.inFlight);
  await new Promise((resolve) => setTimeout(resolve, 100));
  sampling.inFlight--;
  return reply;
});
const logs = [];
client.setNotificationHandler("notifications/message", (n) => { logs.push(n.params); });
await client.connect(transport);
const out = { version: client.getNegotiatedProtocolVersion() };
assert.equal(out.version, "2026-07-28");

const { tools } = await client.listTools();
out.tools = tools.map((t) => t.name).sort();

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");
// Every tool a user relies on: each call that succeeds is counted, and the
// tools listed must all have been (the check is at the end of this part).
const called = new Set();
const call = async (name, args, meta) => {
  const r = await client.callTool({ name, arguments: args, ...(meta && { _meta: meta }) });
  assert.notEqual(r.isError, true, `${name}: ${text(r)}`);
  assert.equal(typeof r.structuredContent, "object", `${name}: no structuredContent`);
  called.add(name);
  return r.structuredContent;
};
const refused = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  assert.equal(r.isError, true, `${name} ${JSON.stringify(args)} was not refused`);
  assert.equal(r.structuredContent, undefined);
  return text(r);
};
const box = `box2026${process.pid}`;
const label = `suite=client2026-${process.pid}-${Date.now()}`;
let r;
let s = await call("sandbox_create", { name: box, labels: { suite: label.slice(6) } });
assert.equal(s.name, box);
assert.equal(s.state, "running");
assert.deepEqual(s.labels, { suite: label.slice(6) });
try {
  s = await call("sandbox_list", { label });
  assert.deepEqual(s.sandboxes.map((b) => [b.name, b.state]), [[box, "running"]]);
  // State across stateless calls: a variable of an earlier call.
  s = await call("run_python", { sandbox: box, code: "x = 20" });
  assert.equal(s.exit_code, 0);
  s = await call("run_python", { sandbox: box, code: "x + 22" });
  out.state = s.return_value;
  s = await call("run_shell", { sandbox: box, command: "echo hi; echo err >&2; pwd" });
  assert.deepEqual([s.status, s.exit_code, s.stdout, s.stderr], ["ok", 0, "hi\n/workspace\n", "err\n"]);
  // Files: written through the tool, seen by the sandbox's programs and read back.
  s = await call("file_write", { sandbox: box, path: "data/in.csv", content: "x,y\n1,2\n3,4\n" });
  assert.deepEqual(s, { path: "data/in.csv", size: 12 });
  s = await call("run_python", { sandbox: box, code: "rows = open('data/in.csv').read().splitlines()\nlen(rows)" });
  assert.equal(s.return_value, 3);
  s = await call("file_read", { sandbox: box, path: "data/in.csv" });
  assert.deepEqual([s.text, s.encoding, s.size, s.uri],
    ["x,y\n1,2\n3,4\n", "utf-8", 12, `codecage://sandboxes/${box}/files/data/in.csv`]);
  s = await call("file_list", { sandbox: box, path: "data" });
  assert.deepEqual(s.entries.map((e) => [e.name, e.path, e.type, e.size]), [["in.csv", "data/in.csv", "file", 12]]);
  // Variables: set from JSON, used by code, read back, listed.
  s = await call("python_set_variable", { sandbox: box, name: "ctx", value: { topic: "sales", years: [2024, 2025] } });
  assert.deepEqual(s, { name: "ctx", set: true });
  s = await call("run_python", { sandbox: box, code: "ctx['years'][1] - x" });
  assert.equal(s.return_value, 2005);
  s = await call("python_get_variable", { sandbox: box, name: "rows" });
  assert.deepEqual([s.name, s.type, s.value], ["rows", "list", ["x,y", "1,2", "3,4"]]);
  s = await call("python_list_variables", { sandbox: box });
  assert.deepEqual(s.variables.map((v) => [v.name, v.type]).sort(), [["ctx", "dict"], ["rows", "list"], ["x", "int"]]);
  // The sandbox's log: the output of its shell run.
  s = await call("sandbox_logs", { name: box, tail: 5 });
  assert.deepEqual(s.lines, ["hi", "/workspace", "err"]);
  // Stopped: variables are gone, files kept, the next run starts it again.
  s = await call("sandbox_stop", { name: box });
  assert.equal(s.state, "stopped");
  s = await call("run_python", { sandbox: box, code: "x" });
  assert.deepEqual([s.status, s.exit_code, s.error?.type, s.restarted], ["error", 1, "NameError", true]);
  s = await call("file_read", { sandbox: box, path: "data/in.csv" });
  assert.equal(s.text, "x,y\n1,2\n3,4\n");
  // Exit codes of one-shot runs, as the process would have them.
  s = await call("run_python", { code: "raise SystemExit(7)" });
  out.exit_code = s.exit_code;
  s = await call("run_shell", { command: "echo one-shot; exit 3" });
  out.shell_exit = [s.status, s.exit_code, s.stdout];
} finally {
  r = await client.callTool({ name: "sandbox_remove", arguments: { name: box } });
}
assert.notEqual(r.isError, true, text(r));
assert.deepEqual(r.structuredContent, { removed: box });
called.add("sandbox_remove");
s = await call("sandbox_list", { label });
assert.deepEqual(s.sandboxes, []);
out.tools_called = [...called].sort();
assert.deepEqual(out.tools_called, out.tools, "every tool listed is called");

// Bad input: an unknown tool is a protocol error; arguments the tool
// refuses are an isError result (no structuredContent) naming the argument.
out.bad = {};
await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }), (e) => {
  out.bad.unknown_tool = [e.code, e.message];
  return true;
});
out.bad.missing = await refused("run_python", {});
out.bad.wrong_type = await refused("file_write", { sandbox: box, path: 5, content: "x" });
out.bad.unknown_argument = await refused("run_shell", { command: "true", bogus: 1 });
out.bad.out_of_range = await refused("run_python", { code: "1", timeout_s: -1 });
out.bad.tail_out_of_range = await refused("sandbox_logs", { name: box, tail: -1 });
out.bad.no_sandbox = await refused("file_read", { sandbox: box, path: "data/in.csv" });

// Log messages: only a call whose _meta asks for them, at the level it
// asks (codecage logs "debug" when a run starts, "notice" when one times out).
const logsOf = async (args, meta) => {
  const before = logs.length;
  s = await call("run_shell", args, meta);
  return [s.status, ...logs.slice(before).map((m) => `${m.logger}:${m.level}`)];
};
const level = (l) => ({ "io.modelcontextprotocol/logLevel": l });
const slow = { command: "sleep 30", timeout_s: 0.5 };
out.logs = {
  unasked: [await logsOf({ command: "true" }), await logsOf(slow)],
  debug: [await logsOf({ command: "true" }, level("debug")), await logsOf(slow, level("debug"))],
  notice: [await logsOf({ command: "true" }, level("notice")), await logsOf(slow, level("notice"))],
};

// llm_query: three prompts in two rounds (one, then the batch of two).
s = await call("run_python", {
  code: "import os\na = llm_query('one')\nb = llm_query_batched(['two', 'three'])\n[a] + b + [os.getpid()]" });
assert.equal(s.status, "ok");
out.llm = s.return_value.slice(0, 3);
out.llm_asked = sampling.asked;
out.llm_batched_at_once = sampling.maxInFlight;
// The host-call budget holds across rounds: 100 answered, the 101st raises.
r = await client.callTool({ name: "run_python", arguments: {
  code: "for i in range(105):\n    llm_query(f'budget {i}')" } });
s = r.structuredContent;
out.budget = { status: s.status, exit_code: s.exit_code, error: s.error?.type, host_calls: s.host_calls,
  asked: sampling.budget, isError: r.isError ?? false };

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
// The cancelled run starts a process with a marker in its command line, so
// that /proc shows whether cancelling killed the run's processes.
const processesWith = (marker) => readdirSync("/proc").filter((pid) => {
  if (!/^[0-9]+$/.test(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`).includes(marker);
  } catch {
    return false; // gone meanwhile
  }
});
const poll = async (cond, ms) => {
  for (const end = Date.now() + ms; !cond() && Date.now() < end;)
    await new Promise((resolve) => setTimeout(resolve, 50));
  return cond();
};
out.task_marker = `task2026marker${process.pid}x${Date.now()}`;
const created = await tasks("tools/call", { name: "run_python", arguments: {
  code: "import subprocess, sys\n" +
    `child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '${out.task_marker}'])\n` +
    "print('task-started', flush=True)\nchild.wait()", timeout_s: 90 } });
assert.equal(created.resultType, "task");
out.task_created = created.status;
let got = await settle(created.taskId, (t) => (t.statusMessage || "").includes("task-started"));
out.task_working = got.status;
out.task_output = got.statusMessage;
out.task_running_before_cancel = await poll(() => processesWith(out.task_marker).length > 0, 10000);
const ack = await tasks("tasks/cancel", { taskId: created.taskId });
assert.equal(ack.resultType, "complete");
got = await settle(created.taskId, (t) => t.status !== "working");
out.task_final = got.status;
await poll(() => processesWith(out.task_marker).length === 0, 10000);
out.task_left_after_cancel = processesWith(out.task_marker);
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
