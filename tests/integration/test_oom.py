"""`oom` on every path of the service: whenever the kernel's OOM killer kills
something in a sandbox during a call, that call's status is `oom` — one-shot
shell and Python runs (pooled and cold), execs and Python sessions in named
sandboxes, over the HTTP API and over MCP (stdio). On cgroup v1 the kernel
counts a kill only in the victim's own group (an exec's sub-group), so each
path here would say `error` if codecage read only the sandbox's group."""
import json
import os
import time

import pytest

from conftest import wait_until
from serverlib import Server
from test_mcp import INIT, Stdio, rpc, write_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

MEMORY_MIB = 64
HOG = "b = bytearray(300 << 20)"  # five times the limit, touched at once
HOG_ARGV = ["/usr/bin/python3", "-c", HOG]
# The hog runs as a child of the session: only it dies, the session lives on.
HOG_CHILD = ("import subprocess, sys\n"
             f"rc = subprocess.run([sys.executable, '-c', {HOG!r}]).returncode\n"
             "rc")
CONFIG = {"defaults": {"memory_mib": MEMORY_MIB}, "pool_size": 1}


def assert_oom(result):
    assert result["status"] == "oom", result
    assert result["reason"].startswith("out of memory"), result


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, extra=CONFIG)
    yield s
    s.stop()


def test_one_shot_shell_run_reports_oom(server):
    r = server.ok("POST", "/v1/run", {"command": f"/usr/bin/python3 -c '{HOG}'"})
    assert_oom(r)
    assert r["exit_code"] == 137  # the shell's own report is kept
    ok = server.ok("POST", "/v1/run", {"command": "echo fine"})
    assert ok["status"] == "ok" and ok["stdout"] == "fine\n"


def test_one_shot_python_reports_oom_pooled_and_cold(server):
    # The pool warms in the background (slowly under sanitizers): wait for it.
    assert wait_until(lambda: server.ok("GET", "/v1/pool")["ready"] >= 1, timeout=60)
    pooled = server.ok("POST", "/v1/python", {"code": HOG})
    assert pooled["pooled"] is True
    assert_oom(pooled)
    cold = server.ok("POST", "/v1/python", {"code": HOG, "memory_mib": MEMORY_MIB + 16})
    assert cold["pooled"] is False
    assert_oom(cold)


def test_named_sandbox_exec_reports_oom_and_stays_usable(server):
    server.ok("POST", "/v1/sandboxes", {"name": "m"})
    assert_oom(server.ok("POST", "/v1/sandboxes/m/exec", {"argv": HOG_ARGV}))
    assert_oom(server.ok("POST", "/v1/sandboxes/m/exec", {"script": f"python3 -c '{HOG}'"}))
    r = server.ok("POST", "/v1/sandboxes/m/exec", {"script": "echo alive"})
    assert r["status"] == "ok" and r["stdout"] == "alive\n"


def test_parked_sandbox_still_counts_and_reports_oom(server):
    # Idle for PARK_AFTER_MS (2 s), a sandbox and its session close their
    # cgroup fds; the next call opens them again and reads the same groups.
    server.ok("POST", "/v1/sandboxes", {"name": "p"})
    run = lambda code: server.ok("POST", "/v1/sandboxes/p/python", {"code": code})
    assert run("x = 41")["status"] == "ok"
    time.sleep(3.5)  # the reaper runs each second
    r = run(HOG_CHILD)
    assert_oom(r)
    assert r["state_lost"] is False and r["return_value"] == -9
    assert r["cpu_ms"] > 0 and r["peak_memory_bytes"] > 0
    time.sleep(3.5)
    assert run("x + 1")["return_value"] == 42
    assert_oom(server.ok("POST", "/v1/sandboxes/p/exec", {"argv": HOG_ARGV}))
    info = server.ok("GET", "/v1/sandboxes/p")
    assert info["usage"]["memory_peak_bytes"] > 0


def test_session_reports_oom_and_whether_state_was_lost(server):
    server.ok("POST", "/v1/sandboxes", {"name": "s"})
    run = lambda code: server.ok("POST", "/v1/sandboxes/s/python", {"code": code})
    assert run("x = 41")["status"] == "ok"
    # A child process is killed: the session and its variables survive.
    r = run(HOG_CHILD)
    assert_oom(r)
    assert r["state_lost"] is False and r["return_value"] == -9
    assert run("x + 1")["return_value"] == 42
    # The session's own process is killed: its variables are gone.
    r = run(HOG)
    assert_oom(r)
    assert r["state_lost"] is True
    after = run("'x' in globals()")
    assert after["status"] == "ok" and after["return_value"] is False
    # A later call that allocates nothing is not blamed for the old kills.
    assert run("1 + 1")["status"] == "ok"


def call(stdio, name, arguments, id):
    return stdio.call_tool(name, arguments, id)["structuredContent"]


def test_mcp_paths_report_oom(tmp_path):
    s = Stdio(write_config(tmp_path, **CONFIG))
    try:
        s.ask(rpc("initialize", INIT))
        s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert_oom(call(s, "run_shell", {"command": f"/usr/bin/python3 -c '{HOG}'"}, 2))
        assert_oom(call(s, "run_python", {"code": HOG}, 3))
        call(s, "sandbox_create", {"name": "box"}, 4)
        assert_oom(call(s, "run_shell", {"command": f"python3 -c '{HOG}'", "sandbox": "box"}, 5))
        r = call(s, "run_python", {"code": HOG, "sandbox": "box"}, 6)
        assert_oom(r)
        assert r["state_lost"] is True
        r = call(s, "run_python", {"code": "print('back')", "sandbox": "box"}, 7)
        assert r["status"] == "ok" and r["stdout"] == "back\n", json.dumps(r)
    finally:
        s.close()
