"""The sandbox service through the HTTP API: lifecycle details (stop keeps
the workspace, a call into a stopped sandbox restarts it, idle timeout),
crash recovery after kill -9 of the server during an exec, tenant and
sandbox isolation, and secrets that never leave the server."""
import os
import subprocess
import time

import pytest

from serverlib import Server, cgroups_of_server, pids_of_server

SECRET = "s3cr3t-" + "q" * 20
TOKEN_A = "tokenA-" + "a" * 24
TOKEN_B = "tokenB-" + "b" * 24

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, extra={"secrets": {"API_KEY": {"value": SECRET}}})
    yield s
    s.stop()


def create(server, name, token=None, **spec):
    return server.ok("POST", "/v1/sandboxes", {"name": name, **spec}, token=token)


def sh(server, name, script, token=None, **kw):
    return server.ok("POST", f"/v1/sandboxes/{name}/exec", {"script": script, **kw}, token=token)


def test_stop_keeps_the_workspace_and_a_later_exec_restarts(server):
    create(server, "keep")
    assert sh(server, "keep", "echo data > kept.txt; echo $$ > pid")["status"] == "ok"
    info = server.ok("POST", "/v1/sandboxes/keep/stop")
    assert info["state"] == "stopped"
    assert server.ok("GET", "/v1/sandboxes/keep")["state"] == "stopped"
    r = sh(server, "keep", "cat kept.txt")
    assert r["stdout"] == "data\n" and r["restarted"] is True
    assert server.ok("GET", "/v1/sandboxes/keep")["state"] == "running"
    assert sh(server, "keep", "true")["restarted"] is False


def test_kill_ends_a_running_exec_and_start_makes_it_usable(server):
    create(server, "k")
    import threading
    out = {}
    t = threading.Thread(target=lambda: out.update(
        r=server.request("POST", "/v1/sandboxes/k/exec", {"script": "sleep 60"})))
    t.start()
    time.sleep(0.5)
    assert server.ok("POST", "/v1/sandboxes/k/kill")["state"] == "stopped"
    t.join(30)
    assert out["r"].json["status"] == "cancelled"
    assert server.ok("POST", "/v1/sandboxes/k/start")["state"] == "running"
    assert sh(server, "k", "echo back")["stdout"] == "back\n"


def test_idle_timeout_stops_the_sandbox(server):
    create(server, "idle", idle_timeout_s=1)
    sh(server, "idle", "true")
    deadline = time.monotonic() + 10
    while server.ok("GET", "/v1/sandboxes/idle")["state"] != "stopped":
        assert time.monotonic() < deadline, "not stopped after its idle timeout"
        time.sleep(0.2)
    assert any(r["event"] == "sandbox.stop" and r.get("how") == "idle"
               for r in server.audit_records())


def test_logs_keep_past_output_and_tail_counts_lines(server):
    create(server, "logs")
    sh(server, "logs", "seq 1 5")
    sh(server, "logs", "echo err >&2")
    logs = server.ok("GET", "/v1/sandboxes/logs/logs")
    assert logs["lines"] == ["1", "2", "3", "4", "5", "err"]
    assert server.ok("GET", "/v1/sandboxes/logs/logs?tail=2")["lines"] == ["5", "err"]


def mounts_under(path):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if str(path) in line]


def loops_backed_by(path):
    found = []
    for dev in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{dev}/loop/backing_file") as f:
                if str(path) in f.read():
                    found.append(dev)
        except OSError:
            pass
    return found


def test_kill9_of_the_server_during_an_exec_leaves_nothing_and_keeps_data(tmp_path):
    server = Server(tmp_path)
    try:
        create(server, "crash")
        sh(server, "crash", "echo precious > data.txt; sync")
        first_pid = server.proc.pid
        proc = subprocess.Popen(
            ["python3", "-c", "import sys, http.client, socket\n"
             "class C(http.client.HTTPConnection):\n"
             "  def connect(self):\n"
             "    self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])\n"
             "c = C('x'); c.request('POST', '/v1/sandboxes/crash/exec', "
             "body='{\"script\": \"sleep 300 & sleep 300; echo never\"}', "
             "headers={'Content-Type': 'application/json'})\n"
             "c.getresponse()\n", server.socket_path],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        assert len(pids_of_server(first_pid)) >= 3, "init, sh and sleeps should be running"
        server.kill9()
        proc.kill()
        proc.wait()
        # The sandbox dies with its server (parent-death signal).
        deadline = time.monotonic() + 10
        while pids_of_server(first_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pids_of_server(first_pid), "sandbox processes outlived the server"
        # Its reaper removes its cgroups (and the next start would sweep them).
        while cgroups_of_server(first_pid) and time.monotonic() < deadline + 5:
            time.sleep(0.05)
        assert not cgroups_of_server(first_pid), "cgroups of the dead server are left"
        server.start()
        info = server.ok("GET", "/v1/sandboxes/crash")
        assert info["state"] == "stopped"
        r = sh(server, "crash", "cat data.txt")
        assert r["stdout"] == "precious\n" and r["restarted"] is True
        server.ok("DELETE", "/v1/sandboxes/crash")
        second_pid = server.proc.pid
    finally:
        server.stop()
    assert not mounts_under(tmp_path), "workspace mounts left on the host"
    assert not loops_backed_by(tmp_path), "loop devices left bound to workspace images"
    assert not cgroups_of_server(second_pid), "cgroups left after the server stopped"


def test_tenants_cannot_see_or_touch_each_other(tmp_path):
    server = Server(tmp_path, tenants={"alice": TOKEN_A, "bob": TOKEN_B})
    try:
        create(server, "box", token=TOKEN_A)
        sh(server, "box", "echo alice-data > mine.txt", token=TOKEN_A)
        assert server.ok("GET", "/v1/sandboxes", token=TOKEN_B)["sandboxes"] == []
        for method, path, body in [
                ("GET", "/v1/sandboxes/box", None),
                ("POST", "/v1/sandboxes/box/exec", {"script": "true"}),
                ("POST", "/v1/sandboxes/box/stop", None),
                ("GET", "/v1/sandboxes/box/logs", None),
                ("GET", "/v1/sandboxes/box/files/mine.txt", None),
                ("DELETE", "/v1/sandboxes/box", None)]:
            r = server.request(method, path, body, token=TOKEN_B)
            assert r.status == 404, (method, path, r.status)
        # Bob's own "box" is another sandbox with another workspace.
        create(server, "box", token=TOKEN_B)
        assert sh(server, "box", "cat mine.txt", token=TOKEN_B)["status"] == "error"
        assert sh(server, "box", "cat mine.txt", token=TOKEN_A)["stdout"] == "alice-data\n"
        assert server.request("GET", "/v1/sandboxes").status == 401
    finally:
        server.stop()


def test_one_sandbox_cannot_see_another(server):
    create(server, "x")
    create(server, "y")
    sh(server, "x", "echo marker-x > /workspace/marker-x; sleep 30 >/dev/null &"
                    " echo started")
    import threading
    t = threading.Thread(target=lambda: sh(server, "x", "sleep 3"))
    t.start()
    time.sleep(0.5)
    r = sh(server, "y", "find / -xdev -name 'marker-x' 2>/dev/null; ls /proc | grep -c '^[0-9]'; "
                        "for p in /proc/[0-9]*; do cat $p/comm; done")
    t.join()
    assert "marker-x" not in r["stdout"]
    assert "sleep" not in r["stdout"]


def test_secrets_never_leave_the_server(server):
    create(server, "sec", secrets=["API_KEY"])
    r = sh(server, "sec", "echo key=$API_KEY; echo $API_KEY >&2; "
                          "echo $API_KEY > output/leak.txt")
    assert SECRET not in r["stdout"] + r["stderr"]
    assert "[REDACTED:API_KEY]" in r["stdout"]
    logs = server.ok("GET", "/v1/sandboxes/sec/logs")
    assert SECRET not in str(logs) and "[REDACTED:API_KEY]" in str(logs)
    info = server.ok("GET", "/v1/sandboxes/sec")
    assert SECRET not in str(info) and info["spec"]["secrets"] == ["API_KEY"]
    run = server.ok("POST", "/v1/run", {"command": "echo $API_KEY", "secrets": ["API_KEY"]})
    assert SECRET not in run["stdout"] and "[REDACTED:API_KEY]" in run["stdout"]
    audit = server.audit_path.read_text()
    assert SECRET not in audit
    assert any(r["event"] == "secret.inject" and r.get("secrets") == ["API_KEY"]
               for r in server.audit_records())
    assert SECRET not in server.log_text()
    # Naming a secret the server does not know is an error that names it.
    r = server.request("POST", "/v1/sandboxes", {"name": "s2", "secrets": ["NOPE"]})
    assert r.status == 400 and "NOPE" in r.json["error"]["message"]


def test_the_server_environment_does_not_leak(tmp_path):
    env = dict(os.environ, LEAKY_VAR="host-only", TZ="Europe/Paris")
    server = Server(tmp_path, extra={"env_allowlist": ["TZ"]}, env=env)
    try:
        r = server.ok("POST", "/v1/run", {"command": "env"})
        assert "LEAKY_VAR" not in r["stdout"]
        assert "TZ=Europe/Paris" in r["stdout"]
    finally:
        server.stop()


def test_one_shot_run_keeps_artifacts_for_download(server):
    r = server.ok("POST", "/v1/run", {
        "code": "import os\nos.makedirs('output', exist_ok=True)\n"
                "open('output/table.csv','w').write('a,b\\n1,2\\n')\nprint('done')",
        "files": [{"path": "in.txt", "content": "given"}]})
    assert r["status"] == "ok" and r["stdout"] == "done\n"
    assert [a["path"] for a in r["artifacts"]] == ["output/table.csv"]
    got = server.request("GET", f"/v1/runs/{r['run_id']}/files/output/table.csv")
    assert got.status == 200 and got.body == b"a,b\n1,2\n"
    r2 = server.ok("POST", "/v1/run", {"command": "cat in.txt",
                                      "files": [{"path": "in.txt", "content": "aGk=",
                                                 "encoding": "base64"}]})
    assert r2["stdout"] == "hi"


def test_refusals_are_audited(tmp_path):
    server = Server(tmp_path, tenants={"alice": TOKEN_A})
    try:
        r = server.request("POST", "/v1/sandboxes", {"name": "big", "memory_mib": 10 ** 7},
                           token=TOKEN_A)
        assert r.status == 403
        assert server.request("GET", "/v1/sandboxes", token="wrong-" + "x" * 20).status == 401
        assert server.request("GET", "/v1/sandboxes").status == 401
        records = server.audit_records()
        deny = [r for r in records if r["event"] == "policy.deny"]
        assert deny and deny[0]["tenant"] == "alice" and deny[0]["field"] == "memory_mib"
        auth = [r["reason"] for r in records if r["event"] == "auth.deny"]
        assert auth == ["bad_token", "missing_token"]
        assert "wrong-" not in server.audit_path.read_text()
    finally:
        server.stop()


def test_one_shot_artifacts_expire_after_the_retention(tmp_path):
    server = Server(tmp_path, extra={"retention_s": 1})
    try:
        r = server.ok("POST", "/v1/run", {"command": "mkdir -p output; echo x > output/a.txt"})
        path = f"/v1/runs/{r['run_id']}/files/output/a.txt"
        assert server.request("GET", path).status == 200
        deadline = time.monotonic() + 10
        while server.request("GET", path).status == 200:
            assert time.monotonic() < deadline, "artifacts outlived their retention"
            time.sleep(0.3)
        assert server.request("GET", path).status == 404
    finally:
        server.stop()
