"""What an operator relies on (docs/OPERATIONS.md): /metrics in the
Prometheus text format (checked by promtool) and what its numbers say,
who may read it (an operator's token, or the loopback metrics listener),
/readyz with its reasons, per-tenant quotas answered with 429 and
Retry-After (and an MCP tool error naming the quota), quotas changed by a
SIGHUP reload, and the server-wide launch gate (limits.launches_max)
queueing a burst of cold runs."""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import BUILD
from serverlib import Server, free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

OPS = "ops-token-0123456789abcdef012"
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef01"


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(metrics, name, **labels):
    return metrics.get((name, frozenset(labels.items())))


def promtool_check(text):
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ops")
    metrics_port = free_port()
    extra = {
        "pool_size": 1,
        "tenants": [{"name": "ops", "token": OPS, "operator": True},
                    {"name": "alice", "token": ALICE},
                    {"name": "bob", "token": BOB,
                     "quotas": {"runs": 1, "sessions": 1, "sandboxes_running": 2,
                                "memory_mib": 1024}}],
    }
    s = Server(tmp, extra=extra)
    # listen.metrics is added after Server wrote its listeners.
    config = json.loads(s.config_path.read_text())
    config["listen"]["metrics"] = f"127.0.0.1:{metrics_port}"
    s.config_path.write_text(json.dumps(config))
    s.stop()
    s.start()
    s.metrics_port = metrics_port
    yield s
    s.stop()


def scrape(server, token=OPS):
    r = server.request("GET", "/metrics", token=token)
    assert r.status == 200, r.body
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return r.body.decode()


def test_metrics_pass_promtool_and_count_what_happened(server):
    before = parse_metrics(scrape(server))
    assert server.ok("POST", "/v1/run", {"command": "echo hi"}, token=ALICE)["status"] == "ok"
    assert server.ok("POST", "/v1/run", {"command": "exit 3"}, token=ALICE)["status"] == "error"
    # The pool warms in the background; on a busy machine it may still be
    # starting. Wait for a ready sandbox so the Python run below is a hit.
    deadline = time.monotonic() + 120
    while (value(parse_metrics(scrape(server)), "codecage_pool_ready", image="host") or 0) < 1:
        assert time.monotonic() < deadline, "the pool never had a sandbox ready"
        time.sleep(0.05)
    assert server.ok("POST", "/v1/python", {"code": "6*7"}, token=ALICE)["status"] == "ok"
    server.ok("POST", "/v1/sandboxes", {"name": "m1"}, token=ALICE)
    res = server.ok("POST", "/v1/sandboxes/m1/exec", {"script": "sleep 0.2"}, token=ALICE)
    assert res["status"] == "ok"
    assert server.ok("POST", "/v1/sandboxes/m1/python", {"code": "x = 1"},
                     token=ALICE)["status"] == "ok"
    text = scrape(server)
    promtool_check(text)
    after = parse_metrics(text)

    def grew(name, by, **labels):
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0) == by

    assert grew("codecage_runs_total", 1, kind="run_shell", status="ok")
    assert grew("codecage_runs_total", 1, kind="run_shell", status="error")
    assert grew("codecage_runs_total", 1, kind="run_python", status="ok")
    assert grew("codecage_runs_total", 1, kind="exec", status="ok")
    assert grew("codecage_runs_total", 1, kind="session", status="ok")
    # The exec slept 0.2 s: its duration lies above the 0.1 s bucket.
    assert grew("codecage_run_duration_seconds_count", 1, kind="exec")
    assert grew("codecage_run_duration_seconds_bucket", 0, kind="exec", le="0.1")
    assert value(after, "codecage_sandboxes", tenant="alice") == 1
    assert value(after, "codecage_sandboxes_running", tenant="alice") == 1
    assert value(after, "codecage_sessions", tenant="alice") == 1
    assert value(after, "codecage_execs_in_flight") == 0
    assert value(after, "codecage_pool_size", image="host") == 1
    assert value(after, "codecage_pool_hits_total", image="host") >= 1
    assert value(after, "codecage_pool_refill_seconds_count") >= 1
    assert value(after, "process_open_fds") > 0
    assert value(after, "process_threads") > 1
    assert value(after, "process_resident_memory_bytes") > 1 << 20
    assert value(after, "codecage_ready") == 1
    server.ok("DELETE", "/v1/sandboxes/m1", token=ALICE)
    gone = parse_metrics(scrape(server))
    assert value(gone, "codecage_sandboxes_running", tenant="alice") == 0
    assert value(gone, "codecage_sessions", tenant="alice") == 0


def test_metrics_need_an_operator_except_on_the_metrics_listener(server):
    assert server.request("GET", "/metrics").status == 401
    assert server.request("GET", "/metrics", token=ALICE).status == 403
    assert server.request("GET", "/metrics", token=OPS, unix=False).status == 200
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=30)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    body = r.read().decode()
    assert r.status == 200 and "codecage_runs_total" in body
    for path in ("/v1/sandboxes", "/v1/pool", "/mcp"):
        conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=30)
        conn.request("GET", path)
        assert conn.getresponse().status == 404, path


def test_metrics_listener_must_be_loopback(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"data_dir": str(tmp_path / "d"),
                                  "tenants": [{"name": "a", "token": ALICE}],
                                  "listen": {"metrics": "0.0.0.0:9464"}}))
    p = subprocess.run([str(BUILD / "codecage"), "serve", "--config", str(config)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 125 and "listen.metrics" in p.stderr and "loopback" in p.stderr


def test_readyz_and_healthz(server):
    r = server.request("GET", "/readyz")
    assert r.status == 200, r.body
    doc = r.json
    assert doc["status"] == "ready" and doc["reasons"] == []
    assert set(doc["checks"]) == {"accepting", "store", "cgroups", "pool", "disk"}
    assert server.request("GET", "/healthz").status == 200


def exec_in_thread(server, name, script, token):
    out = {}

    def go():
        out["r"] = server.request("POST", f"/v1/sandboxes/{name}/exec", {"script": script},
                                  token=token)
    t = threading.Thread(target=go)
    t.start()
    return t, out


def test_runs_quota_answers_429_with_retry_after(server):
    server.ok("POST", "/v1/sandboxes", {"name": "q1"}, token=BOB)
    t, out = exec_in_thread(server, "q1", "sleep 2", BOB)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = parse_metrics(scrape(server))
            if value(m, "codecage_tenant_runs_in_flight", tenant="bob") == 1:
                break
            time.sleep(0.05)
        r = server.request("POST", "/v1/run", {"command": "true"}, token=BOB)
        assert r.status == 429, r.body
        assert r.error_code() == "too_many_requests"
        assert r.headers["Retry-After"] == "1"
        assert "quota runs" in r.json["error"]["message"]
        # Another tenant is not held back by bob's quota.
        assert server.ok("POST", "/v1/run", {"command": "true"}, token=ALICE)["status"] == "ok"
    finally:
        t.join()
    assert out["r"].status == 200
    # Once the exec ended the quota has room again.
    assert server.ok("POST", "/v1/run", {"command": "true"}, token=BOB)["status"] == "ok"
    refused = [r for r in server.audit_records()
               if r["event"] == "policy.deny" and r["tenant"] == "bob"
               and "quota runs" in r["reason"]]
    assert refused
    m = parse_metrics(scrape(server))
    assert value(m, "codecage_quota_refusals_total", quota="runs") >= 1
    server.ok("DELETE", "/v1/sandboxes/q1", token=BOB)


def test_sessions_running_and_memory_quotas(server):
    server.ok("POST", "/v1/sandboxes", {"name": "s1", "memory_mib": 256}, token=BOB)
    server.ok("POST", "/v1/sandboxes", {"name": "s2", "memory_mib": 256}, token=BOB)
    # sandboxes_running = 2
    r = server.request("POST", "/v1/sandboxes", {"name": "s3", "memory_mib": 256}, token=BOB)
    assert r.status == 429 and "quota sandboxes_running" in r.json["error"]["message"], r.body
    assert server.request("GET", "/v1/sandboxes/s3", token=BOB).status == 404
    # sessions = 1
    assert server.ok("POST", "/v1/sandboxes/s1/python", {"code": "1"}, token=BOB)["status"] == "ok"
    r = server.request("POST", "/v1/sandboxes/s2/python", {"code": "1"}, token=BOB)
    assert r.status == 429 and "quota sessions" in r.json["error"]["message"], r.body
    # memory_mib = 1024: 512 are held by s1 and s2; a 768 MiB run does not fit.
    r = server.request("POST", "/v1/run", {"command": "true", "memory_mib": 768}, token=BOB)
    assert r.status == 429 and "quota memory_mib" in r.json["error"]["message"], r.body
    assert server.ok("POST", "/v1/run", {"command": "true", "memory_mib": 256},
                     token=BOB)["status"] == "ok"
    # Stopping s1 gives back its running slot, its memory and its session.
    server.ok("POST", "/v1/sandboxes/s1/stop", token=BOB)
    assert server.ok("POST", "/v1/sandboxes/s2/python", {"code": "1"}, token=BOB)["status"] == "ok"
    server.ok("POST", "/v1/sandboxes", {"name": "s3", "memory_mib": 256}, token=BOB)
    for name in ("s1", "s2", "s3"):
        server.ok("DELETE", f"/v1/sandboxes/{name}", token=BOB)
    m = parse_metrics(scrape(server))
    assert value(m, "codecage_sandboxes_running", tenant="bob") == 0
    assert value(m, "codecage_sessions", tenant="bob") == 0
    assert value(m, "codecage_memory_reserved_bytes", tenant="bob") == 0


def test_sandbox_count_quota_is_429(tmp_path):
    s = Server(tmp_path, extra={"limits": {"max_body_bytes": 16 * 1024 * 1024,
                                           "max_sandboxes_per_tenant": 1}})
    try:
        s.ok("POST", "/v1/sandboxes", {"name": "one"})
        r = s.request("POST", "/v1/sandboxes", {"name": "two"})
        assert r.status == 429 and "quota sandboxes" in r.json["error"]["message"], r.body
        assert r.headers["Retry-After"]
    finally:
        s.stop()


# --- MCP ------------------------------------------------------------------------

MCP_INIT = {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "pytest", "version": "1"}}


def mcp_call(server, token, tool, arguments):
    """One MCP tools/call over the server's /mcp (Unix socket, a fresh MCP
    session) as the tenant of token; the call's result."""
    hdrs = {"Accept": "application/json, text/event-stream"}
    r = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                        "params": MCP_INIT}, token=token, headers=hdrs)
    assert r.status == 200, r.body
    hdrs = {"Accept": "application/json", "Mcp-Session-Id": r.headers["Mcp-Session-Id"],
            "MCP-Protocol-Version": MCP_INIT["protocolVersion"]}
    r = server.request("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
                       token=token, headers=hdrs)
    assert r.status in (200, 202), r.body
    r = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                        "params": {"name": tool, "arguments": arguments}},
                       token=token, headers=hdrs)
    assert r.status == 200, r.body
    doc = r.json
    assert "result" in doc, doc
    return doc["result"]


def result_text(result):
    return "\n".join(c.get("text", "") for c in result["content"])


def hold_a_call(server, name, token):
    """An exec in sandbox `name` that runs until release() is called: it
    holds one of the tenant's `runs` for as long as the test needs,
    whatever the machine's speed. Returns release, which waits for the
    exec's answer and returns it."""
    t, out = exec_in_thread(server, name,
                            "while [ ! -e /workspace/go ]; do sleep 0.05; done; echo released",
                            token)
    deadline = time.monotonic() + 60
    while value(parse_metrics(scrape(server)), "codecage_tenant_runs_in_flight",
                tenant=server_tenant(token)) != 1:
        assert time.monotonic() < deadline, "the held exec never started"
        time.sleep(0.05)

    def release():
        r = server.request("PUT", f"/v1/sandboxes/{name}/files/go", b"", token=token)
        assert r.status in (200, 201, 204), r.body
        t.join()
        return out["r"]
    return release


def server_tenant(token):
    return {OPS: "ops", ALICE: "alice", BOB: "bob"}[token]


def test_mcp_tool_call_over_a_quota_is_a_tool_error_naming_it(server):
    server.ok("POST", "/v1/sandboxes", {"name": "mq"}, token=BOB)
    release = hold_a_call(server, "mq", BOB)
    try:
        res = mcp_call(server, BOB, "run_shell", {"command": "echo should-not-run"})
        assert res.get("isError") is True, res
        text = result_text(res)
        assert "over a quota" in text, text
        assert 'quota runs: tenant "bob" may have at most 1 calls running at once' in text, text
        assert "should-not-run" not in text
        # The same tool for a tenant without that quota runs.
        res = mcp_call(server, ALICE, "run_shell", {"command": "echo ran"})
        assert res.get("isError") is not True and "ran" in result_text(res), res
    finally:
        r = release()
    assert r.status == 200 and r.json["stdout"] == "released\n", r.body
    # With the call ended the quota has room again, over MCP too.
    res = mcp_call(server, BOB, "run_shell", {"command": "echo again"})
    assert res.get("isError") is not True and "again" in result_text(res), res
    server.ok("DELETE", "/v1/sandboxes/mq", token=BOB)


# --- reload -----------------------------------------------------------------------

def set_alice_quotas(quotas):
    def change(config):
        for t in config["tenants"]:
            if t["name"] == "alice":
                t.pop("quotas", None)
                if quotas is not None:
                    t["quotas"] = quotas
    return change


def test_sighup_applies_a_tenants_new_quotas_and_keeps_what_runs(tmp_path):
    s = Server(tmp_path, extra={"pool_size": 0,
                                "tenants": [{"name": "ops", "token": OPS, "operator": True},
                                            {"name": "alice", "token": ALICE}]})
    try:
        s.ok("POST", "/v1/sandboxes", {"name": "live"}, token=ALICE)
        assert s.ok("POST", "/v1/sandboxes/live/python", {"code": "x = 41"},
                    token=ALICE)["status"] == "ok"
        s.ok("POST", "/v1/sandboxes", {"name": "hold"}, token=ALICE)
        release = hold_a_call(s, "hold", ALICE)
        try:
            # No quota: a second call runs beside the held one.
            assert s.ok("POST", "/v1/run", {"command": "true"}, token=ALICE)["status"] == "ok"
            s.reload(set_alice_quotas({"runs": 1}))
            r = s.request("POST", "/v1/run", {"command": "true"}, token=ALICE)
            assert r.status == 429, r.body
            assert r.headers["Retry-After"] == "1"
            assert 'quota runs: tenant "alice" may have at most 1' in r.json["error"]["message"]
            # Raised: room for one more beside the held call.
            s.reload(set_alice_quotas({"runs": 2}))
            assert s.ok("POST", "/v1/run", {"command": "true"}, token=ALICE)["status"] == "ok"
            s.reload(set_alice_quotas({"runs": 1}))
            assert s.request("POST", "/v1/run", {"command": "true"}, token=ALICE).status == 429
            # Dropped: no quota at all.
            s.reload(set_alice_quotas(None))
            assert s.ok("POST", "/v1/run", {"command": "true"}, token=ALICE)["status"] == "ok"
        finally:
            r = release()
        # The call that ran through four reloads ended normally ...
        assert r.status == 200 and r.json["stdout"] == "released\n", r.body
        # ... and the sandboxes and the session are the ones from before.
        names = sorted(sb["name"] for sb in s.ok("GET", "/v1/sandboxes", token=ALICE)["sandboxes"])
        assert names == ["hold", "live"]
        res = s.ok("POST", "/v1/sandboxes/live/python", {"code": "x + 1"}, token=ALICE)
        assert res["return_value"] == 42 and res["restarted"] is False, res
        assert s.log_text().count("codecage: reloaded") == 4
    finally:
        s.stop()


# --- the launch gate ----------------------------------------------------------------

def test_a_burst_of_cold_runs_queues_for_one_launch_slot(tmp_path):
    """launches_max = 1 and no pool: every run is a launch. The burst is
    sent while the server is stopped (SIGSTOP), so all of it is there when
    it resumes; every run passes the gate one at a time and succeeds."""
    burst = 6
    s = Server(tmp_path, extra={"pool_size": 0,
                                "tenants": [{"name": "ops", "token": OPS, "operator": True},
                                            {"name": "alice", "token": ALICE}],
                                "limits": {"max_body_bytes": 16 * 1024 * 1024,
                                           "launches_max": 1}})
    conns = []
    try:
        before = parse_metrics(scrape(s))
        s.proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(burst):
                conn = s.connection(timeout=120)
                conn.request("POST", "/v1/run",
                             body=json.dumps({"command": f"echo run-{i}"}).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": f"Bearer {ALICE}"})
                conns.append(conn)
        finally:
            s.proc.send_signal(signal.SIGCONT)
        for i, conn in enumerate(conns):
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, body
            doc = json.loads(body)
            assert doc["status"] == "ok" and doc["stdout"] == f"run-{i}\n", doc
        text = scrape(s)
        promtool_check(text)
        after = parse_metrics(text)

        def grew(name, **labels):
            return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

        # Every run was a launch through the gate, and each waited its turn:
        # with one slot, all but the first waited while another launched.
        assert grew("codecage_launch_wait_seconds_count") == burst
        assert grew("codecage_runs_total", kind="run_shell", status="ok") == burst
        waited = burst - grew("codecage_launch_wait_seconds_bucket", le="0.005")
        assert waited >= 1, text
        assert value(after, "codecage_launches_running") == 0
        assert value(after, "codecage_launches_waiting") == 0
        assert grew("codecage_quota_refusals_total", quota="launch_queue") == 0
    finally:
        for conn in conns:
            conn.close()
        s.stop()
