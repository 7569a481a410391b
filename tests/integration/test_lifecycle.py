"""The server's life under a service manager (docs/OPERATIONS.md): SIGTERM
drains (running calls finish, or are cancelled at drain_timeout_s; named
sandboxes and their workspaces stay), SIGHUP reloads the config without
touching sandboxes or sessions (a bad config is refused and the old one
stays) and reopens the audit log, and the sd_notify protocol (READY,
RELOADING, STOPPING, WATCHDOG) goes to $NOTIFY_SOCKET."""
import http.client
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from serverlib import Server, free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

ALICE = "alice-token-0123456789abcdef"
CAROL = "carol-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def no_server_left(monkeypatch):
    """Every server a test starts is stopped (SIGKILL if need be) when it
    ends, even when an assertion failed half-way."""
    started = []
    real_start = Server.start

    def start(self):
        started.append(self)
        return real_start(self)
    monkeypatch.setattr(Server, "start", start)
    yield
    for s in started:
        if s.proc and s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def metrics_get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read()


def with_metrics_listener(s):
    port = free_port()
    config = json.loads(s.config_path.read_text())
    config["listen"]["metrics"] = f"127.0.0.1:{port}"
    s.config_path.write_text(json.dumps(config))
    s.stop()
    s.start()
    return port


def in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()))
    t.start()
    return t, out


def test_sigterm_lets_a_running_exec_finish_and_keeps_the_sandbox(tmp_path):
    s = Server(tmp_path)
    port = with_metrics_listener(s)
    s.ok("POST", "/v1/sandboxes", {"name": "keep"})
    s.ok("PUT", "/v1/sandboxes/keep/files/note.txt", b"kept")
    t, out = in_thread(lambda: s.request(
        "POST", "/v1/sandboxes/keep/exec", {"script": "sleep 2; echo finished"}))
    time.sleep(0.5)
    s.proc.send_signal(signal.SIGTERM)
    # Draining: not ready, and the API's listeners take no new work.
    deadline = time.monotonic() + 5
    while metrics_get(port, "/readyz")[0] != 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, body = metrics_get(port, "/readyz")
    assert status == 503 and "draining" in body.decode()
    assert not os.path.exists(s.socket_path)
    with pytest.raises(OSError):
        s.request("GET", "/v1/sandboxes", unix=False, timeout=5)
    t.join()
    res = out["r"]
    assert res.status == 200 and res.json["status"] == "ok", res.body
    assert res.json["stdout"] == "finished\n"
    s.proc.wait(timeout=30)
    assert s.proc.returncode == 0, s.log_text()
    assert "drain: no call running" in s.log_text()
    s.log.close()
    s.start()
    info = s.ok("GET", "/v1/sandboxes/keep")
    assert info["state"] == "stopped"
    assert s.request("GET", "/v1/sandboxes/keep/files/note.txt").body == b"kept"
    s.stop()


def test_drain_deadline_cancels_what_still_runs(tmp_path):
    s = Server(tmp_path, extra={"drain_timeout_s": 1})
    s.ok("POST", "/v1/sandboxes", {"name": "long"})
    t, out = in_thread(lambda: s.request(
        "POST", "/v1/sandboxes/long/exec", {"script": "sleep 60", "timeout_s": 120}))
    time.sleep(0.5)
    start = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    t.join(timeout=30)
    s.proc.wait(timeout=30)
    assert time.monotonic() - start < 15
    assert out["r"].status == 200 and out["r"].json["status"] == "cancelled", out["r"].body
    assert s.proc.returncode == 0
    assert "drain: cancelling 1 running call(s)" in s.log_text()
    s.log.close()


def test_sighup_reloads_tokens_and_limits_and_keeps_sessions(tmp_path):
    s = Server(tmp_path, tenants={"alice": ALICE})
    s.ok("POST", "/v1/sandboxes", {"name": "sess"}, token=ALICE)
    s.ok("POST", "/v1/sandboxes/sess/python", {"code": "x = 41"}, token=ALICE)
    assert s.request("GET", "/v1/sandboxes", token=CAROL).status == 401
    config = json.loads(s.config_path.read_text())
    good = dict(config, tenants=config["tenants"] + [{"name": "carol", "token": CAROL}],
                limits=dict(config["limits"], timeout_s_max=5))
    s.config_path.write_text(json.dumps(good))
    s.proc.send_signal(signal.SIGHUP)
    assert wait_for_log(s, "codecage: reloaded")
    assert s.request("GET", "/v1/sandboxes", token=CAROL).status == 200
    r = s.request("POST", "/v1/run", {"command": "true", "timeout_s": 10}, token=ALICE)
    assert r.status == 403 and "timeout_s" in r.body.decode(), r.body
    # The session lived through the reload.
    res = s.ok("POST", "/v1/sandboxes/sess/python", {"code": "x + 1"}, token=ALICE)
    assert res["return_value"] == 42 and res["restarted"] is False

    # A file that does not parse is refused; the running config stays.
    s.config_path.write_text("{ not json")
    s.proc.send_signal(signal.SIGHUP)
    assert wait_for_log(s, "reload refused")
    assert s.request("GET", "/v1/sandboxes", token=CAROL).status == 200
    # So is a change that needs a restart.
    s.config_path.write_text(json.dumps(dict(good, data_dir=str(tmp_path / "elsewhere"))))
    s.proc.send_signal(signal.SIGHUP)
    assert wait_for_log(s, "data_dir changed")
    assert s.ok("POST", "/v1/sandboxes/sess/python", {"code": "x"}, token=ALICE)[
        "return_value"] == 41
    s.stop()


def wait_for_log(s, text, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in s.log_text():
            return True
        time.sleep(0.05)
    return False


def test_sighup_reopens_the_audit_log(tmp_path):
    s = Server(tmp_path)
    s.ok("POST", "/v1/sandboxes", {"name": "a1"})
    rotated = tmp_path / "audit.jsonl.1"
    os.rename(s.audit_path, rotated)
    s.proc.send_signal(signal.SIGHUP)
    assert wait_for_log(s, "reloaded")
    s.ok("POST", "/v1/sandboxes", {"name": "a2"})
    new = [json.loads(line) for line in s.audit_path.read_text().splitlines()]
    assert any(r["event"] == "sandbox.create" and r["sandbox"] == "a2" for r in new)
    old = rotated.read_text()
    assert '"a1"' in old and '"a2"' not in old
    s.stop()


def test_sd_notify_protocol(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    s = Server(tmp_path, env=env)

    def expect(word):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = sock.recv(4096).decode()
            if word in msg.splitlines():
                return msg
        raise AssertionError(f"no {word}")

    expect("READY=1")
    expect("WATCHDOG=1")
    s.proc.send_signal(signal.SIGHUP)
    expect("RELOADING=1")
    expect("READY=1")
    s.proc.send_signal(signal.SIGTERM)
    expect("STOPPING=1")
    s.proc.wait(timeout=30)
    assert s.proc.returncode == 0
    s.log.close()
    sock.close()


def test_dist_config_is_a_valid_config(tmp_path):
    """dist/config.json, with its paths moved under tmp_path, starts a server."""
    dist = json.loads((Path(__file__).parents[2] / "dist" / "config.json").read_text())
    dist["data_dir"] = str(tmp_path / "data")
    dist["audit_log"] = str(tmp_path / "audit.jsonl")
    dist["listen"] = {"http": f"127.0.0.1:{free_port()}", "unix": str(tmp_path / "api.sock"),
                      "metrics": f"127.0.0.1:{free_port()}"}
    s = Server(tmp_path, extra=dist)
    assert s.request("GET", "/readyz").status in (200, 503)
    s.stop()


def test_a_sandboxs_last_use_outlives_a_restart(tmp_path):
    """The time of a sandbox's last call reaches the store (the reaper
    writes what calls left due, and the server on its way out), so a
    restarted server shows it rather than the time of creation."""
    s = Server(tmp_path)
    created = s.ok("POST", "/v1/sandboxes", {"name": "used"})
    s.ok("POST", "/v1/sandboxes/used/exec", {"argv": ["true"]})
    used = s.ok("GET", "/v1/sandboxes/used")["last_used"]
    assert used != created["created"]
    s.stop()
    s.start()
    assert s.ok("GET", "/v1/sandboxes/used")["last_used"] == used
    s.stop()
