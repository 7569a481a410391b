// Drives codecage's MCP server with the official TypeScript SDK client
// (@modelcontextprotocol/sdk, pinned in package.json) over stdio or
// Streamable HTTP, one scenario per run:
//
//   node sdk_client.mjs SCENARIO --http URL [--token TOKEN]
//   node sdk_client.mjs SCENARIO --stdio PROGRAM ARGS...
//
// Each scenario asserts what it checks (node:assert) and prints one JSON
// line with what the Python side checks further (tests/integration/
// test_mcp.py); the exit status is 0 only when every assertion held.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const TOOLS = [
  "run_python", "run_shell", "sandbox_create", "sandbox_list", "sandbox_remove", "sandbox_stop",
  "sandbox_logs", "file_write", "file_read", "file_list", "python_set_variable",
  "python_get_variable", "python_list_variables",
];

function parseArgs(argv) {
  const [scenario, mode, ...rest] = argv;
  if (mode === "--http") {
    const url = rest[0];
    const token = rest[1] === "--token" ? rest[2] : undefined;
    return { scenario, http: url, token };
  }
  if (mode === "--stdio") return { scenario, command: rest[0], args: rest.slice(1) };
  throw new Error("usage: sdk_client.mjs SCENARIO (--http URL [--token T] | --stdio PROGRAM ARGS...)");
}

async function connect(target, { sampling = false, onSample } = {}) {
  const capabilities = sampling ? { sampling: {} } : {};
  const client = new Client({ name: "codecage-sdk-test", version: "1.0.0" }, { capabilities });
  if (sampling)
    client.setRequestHandler(CreateMessageRequestSchema, async (req) => onSample(req));
  const transport = target.http
    ? new StreamableHTTPClientTransport(new URL(target.http), {
        requestInit: target.token ? { headers: { Authorization: `Bearer ${target.token}` } } : {},
      })
    : new StdioClientTransport({ command: target.command, args: target.args, stderr: "inherit" });
  await client.connect(transport);
  await client.listTools(); // caches the output schemas: every result is validated against them
  return client;
}

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

async function call(client, name, args, options) {
  return client.callTool({ name, arguments: args }, undefined, options);
}

async function ok(client, name, args) {
  const r = await call(client, name, args);
  assert.equal(r.isError ?? false, false, `${name} failed: ${text(r)}`);
  return r;
}

// Whether a process with marker in its command line exists (like pgrep -f).
function running(marker) {
  for (const pid of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`).includes(marker)) return true;
    } catch {}
  }
  return false;
}

function unique(prefix) {
  return `${prefix}${process.pid}x${Math.floor(Math.random() * 1e9)}`;
}

// A tiny valid PNG written by Python without any imaging library.
const PNG_CODE = `
import struct, zlib, os
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 2, 2, 8, 2, 0, 0, 0)) \\
    + chunk(b'IDAT', zlib.compress(b'\\x00' + b'\\xff\\x00\\x00' * 2 + b'\\x00' + b'\\x00\\xff\\x00' * 2)) + chunk(b'IEND', b'')
os.makedirs('output', exist_ok=True)
open('output/plot.png', 'wb').write(png)
open('output/data.csv', 'w').write('x,y\\n1,2\\n')
print('made')
`;

const scenarios = {
  async tools(target) {
    const client = await connect(target);
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
    for (const t of tools) {
      assert.ok(t.description.length > 40, `${t.name}: description`);
      assert.equal(t.inputSchema.type, "object");
      assert.equal(t.outputSchema.type, "object");
    }
    const templates = await client.listResourceTemplates();
    const uris = templates.resourceTemplates.map((t) => t.uriTemplate);
    assert.ok(uris.includes("codecage://runs/{run_id}/{+path}"));
    assert.ok(uris.includes("codecage://sandboxes/{name}/files/{+path}"));
    const resources = await client.listResources();
    assert.deepEqual(resources.resources, []);
    await client.ping();
    await client.close();
    return { tools: tools.map((t) => t.name) };
  },

  async run(target) {
    const client = await connect(target);
    const py = await ok(client, "run_python", { code: "print('hello')\n6*7" });
    assert.equal(py.structuredContent.status, "ok");
    assert.equal(py.structuredContent.stdout, "hello\n");
    assert.equal(py.structuredContent.return_value, 42);
    assert.match(text(py), /hello/);
    const exc = await ok(client, "run_python", { code: "def f():\n    return 1/0\nf()" });
    assert.equal(exc.structuredContent.status, "error");
    assert.equal(exc.structuredContent.error.type, "ZeroDivisionError");
    assert.match(text(exc), /ZeroDivisionError/);
    const sh = await ok(client, "run_shell", { command: "echo out; echo err >&2; exit 3" });
    assert.equal(sh.structuredContent.status, "error");
    assert.equal(sh.structuredContent.exit_code, 3);
    assert.equal(sh.structuredContent.stdout, "out\n");
    assert.equal(sh.structuredContent.stderr, "err\n");
    const files = await ok(client, "run_python", {
      code: "print(open('in/data.txt').read())",
      files: [{ path: "in/data.txt", content: "from a file" }],
    });
    assert.equal(files.structuredContent.stdout, "from a file\n");
    const env = await ok(client, "run_shell", { command: "echo $GREETING", env: { GREETING: "hi there" } });
    assert.equal(env.structuredContent.stdout, "hi there\n");
    const slow = await ok(client, "run_shell", { command: "sleep 5", timeout_s: 0.5 });
    assert.equal(slow.structuredContent.status, "timeout");
    await client.close();
    return { ok: true };
  },

  async sandbox(target) {
    const client = await connect(target);
    const name = unique("mcp");
    const info = await ok(client, "sandbox_create", { name, memory_mib: 256 });
    assert.equal(info.structuredContent.name, name);
    assert.equal(info.structuredContent.state, "running");
    await ok(client, "run_python", { sandbox: name, code: "x = 41" });
    const next = await ok(client, "run_python", { sandbox: name, code: "x + 1" });
    assert.equal(next.structuredContent.return_value, 42);
    await ok(client, "python_set_variable", { sandbox: name, name: "cfg", value: { a: [1, 2], b: "z" } });
    const got = await ok(client, "python_get_variable", { sandbox: name, name: "cfg" });
    assert.deepEqual(got.structuredContent.value, { a: [1, 2], b: "z" });
    assert.equal(got.structuredContent.type, "dict");
    const vars = await ok(client, "python_list_variables", { sandbox: name });
    const names = vars.structuredContent.variables.map((v) => v.name);
    assert.ok(names.includes("x") && names.includes("cfg"), JSON.stringify(names));
    const missing = await call(client, "python_get_variable", { sandbox: name, name: "nope" });
    assert.equal(missing.isError, true);
    await ok(client, "file_write", { sandbox: name, path: "data/hello.txt", content: "hello file\n" });
    await ok(client, "file_write", { sandbox: name, path: "data/bin.dat", content: "AAEC/w==", encoding: "base64" });
    const rt = await ok(client, "file_read", { sandbox: name, path: "data/hello.txt" });
    assert.equal(rt.structuredContent.encoding, "utf-8");
    assert.equal(text(rt), "hello file\n");
    const rb = await ok(client, "file_read", { sandbox: name, path: "data/bin.dat" });
    assert.equal(rb.structuredContent.encoding, "base64");
    const blob = rb.content.find((c) => c.type === "resource");
    assert.equal(Buffer.from(blob.resource.blob, "base64").toString("hex"), "000102ff");
    const ls = await ok(client, "file_list", { sandbox: name, path: "data" });
    assert.deepEqual(ls.structuredContent.entries.map((e) => e.name).sort(), ["bin.dat", "hello.txt"]);
    const sh = await ok(client, "run_shell", { sandbox: name, command: "cat data/hello.txt; echo second line" });
    assert.equal(sh.structuredContent.stdout, "hello file\nsecond line\n");
    const logs = await ok(client, "sandbox_logs", { name, tail: 1 });
    assert.deepEqual(logs.structuredContent.lines, ["second line"]);
    const withFiles = await ok(client, "run_python", {
      sandbox: name, code: "open('given.txt').read()", files: [{ path: "given.txt", content: "given" }],
    });
    assert.equal(withFiles.structuredContent.return_value, "given");
    const stopped = await ok(client, "sandbox_stop", { name });
    assert.equal(stopped.structuredContent.state, "stopped");
    const again = await ok(client, "run_python", { sandbox: name, code: "open('data/hello.txt').read()" });
    assert.equal(again.structuredContent.restarted, true);
    assert.equal(again.structuredContent.return_value, "hello file\n");
    const list = await ok(client, "sandbox_list", {});
    assert.ok(list.structuredContent.sandboxes.some((s) => s.name === name));
    const dup = await call(client, "sandbox_create", { name });
    assert.equal(dup.isError, true);
    assert.match(text(dup), /already exists/);
    await ok(client, "sandbox_remove", { name });
    const gone = await call(client, "run_python", { sandbox: name, code: "1" });
    assert.equal(gone.isError, true);
    assert.match(text(gone), /not found/);
    await client.close();
    return { name };
  },

  async progress(target) {
    const client = await connect(target);
    const seen = [];
    const r = await call(
      client, "run_shell",
      { command: "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.25; done" },
      { onprogress: (p) => seen.push(p), resetTimeoutOnProgress: true },
    );
    assert.equal(r.structuredContent.status, "ok");
    assert.ok(seen.length >= 3, `only ${seen.length} progress notifications`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
    assert.ok(seen.some((p) => /line [2-6]/.test(p.message ?? "")), JSON.stringify(seen));
    await client.close();
    return { notifications: seen.length };
  },

  async cancel(target) {
    const client = await connect(target);
    const marker = unique("cancelmarker");
    const controller = new AbortController();
    let started = false, wasRunning = false;
    const pending = call(
      client, "run_shell",
      { command: `echo started; exec python3 -c "import time; time.sleep(600)" ${marker}`, timeout_s: 120 },
      {
        signal: controller.signal,
        onprogress: (p) => {
          if (/started/.test(p.message ?? "") && !started) {
            started = true;
            // Cancel once the command has exec'd python3 (however long a busy
            // machine takes), or after 60 s, when wasRunning stays false.
            const since = Date.now();
            const poll = setInterval(() => {
              wasRunning = running(marker);
              if (wasRunning || Date.now() - since > 60000) {
                clearInterval(poll);
                controller.abort("test cancels");
              }
            }, 50);
          }
        },
      },
    );
    let error;
    try {
      await pending;
    } catch (e) {
      error = e;
    }
    assert.ok(started, "the command never reported its first output");
    assert.ok(error, "the call was not cancelled");
    assert.ok(wasRunning, "the command was not running when the call was cancelled");
    // The server keeps serving this session.
    const after = await ok(client, "run_python", { code: "'still here'" });
    assert.equal(after.structuredContent.return_value, "still here");
    await client.close();
    return { marker, error: String(error) };
  },

  async sampling(target) {
    const prompts = [];
    const client = await connect(target, {
      sampling: true,
      onSample: async (req) => {
        const prompt = req.params.messages[0].content.text;
        prompts.push(prompt);
        return { role: "assistant", model: "test-model", content: { type: "text", text: `ANSWER(${prompt})` } };
      },
    });
    const r = await ok(client, "run_python", {
      code: "a = llm_query('what is 2+2?')\nb = llm_query_batched(['x', 'y'])\n[a, b]",
    });
    assert.equal(r.structuredContent.status, "ok", text(r));
    assert.deepEqual(r.structuredContent.return_value, ["ANSWER(what is 2+2?)", ["ANSWER(x)", "ANSWER(y)"]]);
    assert.deepEqual(prompts, ["what is 2+2?", "x", "y"]);
    await client.close();
    // A client without the sampling capability: a clear exception in the code.
    const plain = await connect(target);
    const no = await ok(plain, "run_python", { code: "llm_query('hi')" });
    assert.equal(no.structuredContent.status, "error");
    assert.match(no.structuredContent.error.message, /sampling/);
    await plain.close();
    return { prompts };
  },

  async artifacts(target) {
    const client = await connect(target);
    const r = await ok(client, "run_python", { code: PNG_CODE });
    const image = r.content.find((c) => c.type === "image");
    assert.ok(image, JSON.stringify(r.content));
    assert.equal(image.mimeType, "image/png");
    assert.equal(Buffer.from(image.data, "base64").subarray(1, 4).toString(), "PNG");
    const link = r.content.find((c) => c.type === "resource_link");
    assert.ok(link, JSON.stringify(r.content));
    assert.match(link.uri, /^codecage:\/\/runs\/[0-9a-f]+\/output\/data\.csv$/);
    const read = await client.readResource({ uri: link.uri });
    assert.equal(read.contents[0].text, "x,y\n1,2\n");
    const pngUri = link.uri.replace("data.csv", "plot.png");
    const blob = await client.readResource({ uri: pngUri });
    assert.equal(Buffer.from(blob.contents[0].blob, "base64").subarray(1, 4).toString(), "PNG");
    // In a named sandbox: links into its workspace.
    const name = unique("art");
    await ok(client, "sandbox_create", { name });
    const s = await ok(client, "run_python", { sandbox: name, code: PNG_CODE });
    assert.ok(s.content.some((c) => c.type === "image"));
    const slink = s.content.find((c) => c.type === "resource_link");
    assert.equal(slink.uri, `codecage://sandboxes/${name}/files/output/data.csv`);
    const sread = await client.readResource({ uri: slink.uri });
    assert.equal(sread.contents[0].text, "x,y\n1,2\n");
    await ok(client, "sandbox_remove", { name });
    await assert.rejects(client.readResource({ uri: slink.uri }), /not found/i);
    await client.close();
    return { link: link.uri };
  },

  async errors(target) {
    const client = await connect(target);
    const missing = await call(client, "run_python", {});
    assert.equal(missing.isError, true);
    assert.match(text(missing), /`code` is required/);
    const type = await call(client, "run_python", { code: 5 });
    assert.equal(type.isError, true);
    assert.match(text(type), /`code` must be a "string"/);
    const extra = await call(client, "run_python", { code: "1", bogus: true });
    assert.equal(extra.isError, true);
    assert.match(text(extra), /unknown argument `bogus`/);
    const net = await call(client, "run_python", { code: "1", network: ["10.0.0.1"] });
    assert.equal(net.isError, true);
    assert.match(text(net), /network/);
    const req = await call(client, "run_python", { code: "1", requirements: ["--index-url=http://evil"] });
    assert.equal(req.isError, true);
    assert.match(text(req), /requirements/);
    const nobox = await call(client, "file_read", { sandbox: "no-such-box", path: "x" });
    assert.equal(nobox.isError, true);
    assert.match(text(nobox), /not found/);
    await assert.rejects(call(client, "no_such_tool", {}), (e) => e.code === -32602 && /Unknown tool/.test(e.message));
    await assert.rejects(client.readResource({ uri: "codecage://elsewhere/x" }), (e) => e.code === -32002);
    await assert.rejects(client.request({ method: "no/such/method", params: {} }, LoggingMessageNotificationSchema), (e) => e.code === -32601);
    const still = await ok(client, "run_python", { code: "'alive'" });
    assert.equal(still.structuredContent.return_value, "alive");
    await client.close();
    return { ok: true };
  },

  async concurrent(target) {
    const client = await connect(target);
    const n = 20;
    const calls = [];
    for (let i = 0; i < n; i++)
      calls.push(i % 2
        ? call(client, "run_python", { code: `import time\ntime.sleep(0.2)\n${i} * ${i}` })
        : call(client, "run_shell", { command: `sleep 0.2; echo $((${i} * ${i}))` }));
    const results = await Promise.all(calls);
    results.forEach((r, i) => {
      assert.equal(r.isError ?? false, false, text(r));
      if (i % 2) assert.equal(r.structuredContent.return_value, i * i);
      else assert.equal(r.structuredContent.stdout, `${i * i}\n`);
    });
    await client.close();
    return { calls: n };
  },

  // Code mode: the server was started with an upstream MCP server named
  // demo (upstream_server.mjs) whose tools the code calls as tools.*.
  async codemode(target) {
    const client = await connect(target);
    const { tools } = await client.listTools();
    const runPython = tools.find((t) => t.name === "run_python");
    assert.match(runPython.description, /Code mode: the tools of the upstream MCP servers demo/);
    const r = await ok(client, "run_python", {
      code: [
        "total = tools.add(a=2, b=3)",
        "names = sorted(t['name'] for t in tools.list())",
        "try:",
        "    tools.fail()",
        "except HostCallError as e:",
        "    failure = str(e)",
        "[total, names, tools.echo(text='hi'), tools.demo__echo(text='prefixed'), failure]",
      ].join("\n"),
    });
    assert.equal(r.structuredContent.status, "ok", text(r));
    assert.deepEqual(r.structuredContent.return_value,
      [{ sum: 5 }, ["add", "echo", "fail"], "hi", "prefixed", "tools.fail: fail always fails"]);
    const missing = await ok(client, "run_python", { code: "tools.nope()" });
    assert.equal(missing.structuredContent.error.type, "HostCallError");
    assert.match(missing.structuredContent.error.message, /no upstream MCP server has this tool/);
    await client.close();
    return { ok: true };
  },

  async logging(target) {
    const client = await connect(target);
    const messages = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => messages.push(n.params));
    await client.setLoggingLevel("debug");
    await ok(client, "run_shell", { command: "true" });
    await ok(client, "run_shell", { command: "sleep 3", timeout_s: 0.3 });
    assert.ok(messages.some((m) => m.level === "debug" && /starting/.test(m.data)), JSON.stringify(messages));
    assert.ok(messages.some((m) => m.level === "notice" && /timeout/.test(m.data)), JSON.stringify(messages));
    await client.setLoggingLevel("error");
    const before = messages.length;
    await ok(client, "run_shell", { command: "sleep 3", timeout_s: 0.3 });
    assert.equal(messages.length, before);
    await client.close();
    return { messages: messages.length };
  },
};

const target = parseArgs(process.argv.slice(2));
const fn = scenarios[target.scenario];
if (!fn) {
  console.error(`unknown scenario ${target.scenario}; known: ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
try {
  const out = await fn(target);
  console.log(JSON.stringify({ scenario: target.scenario, ok: true, ...out }));
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ scenario: target.scenario, ok: false, error: String(e?.stack ?? e) }));
  process.exit(1);
}
