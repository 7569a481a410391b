"""Attacks on the E2B listener (docs/E2B.md): a request for a sandbox
carries only the sandbox's id and a token, so the token is all that stands
between a client and another sandbox's commands and files; on the control
plane the API key's tenant is all that stands between a tenant and another
tenant's sandboxes.

 - one sandbox's envd access token, sent for another sandbox, runs nothing
   there and reads none of its files;
 - one sandbox's traffic token, sent to another sandbox's code interpreter
   (port 49999), runs no code there;
 - the traffic token (the code interpreter's, which E2B hands out for port
   URLs) runs no command and reads no file on envd's port;
 - another tenant's API key neither sees (list, get) nor reaches (connect,
   set timeout, kill) a sandbox on the control plane;
 - /files never leaves /workspace: not with "..", not through a symlink the
   sandbox planted pointing at a host file.

Each attack runs twice (the pair pattern of seclib): against the normal
build, where it must fail, and against the unsafe debug build with the
protection switched off (CODECAGE_DEBUG_DISABLE=e2b-tokens, the token
check; e2b-tenant, the control plane's tenant check; files-resolve, the
resolution of file paths inside the workspace), where it must succeed -- so
none of these tests can pass vacuously."""
import base64
import http.client
import json
import os
import signal
import socket
import struct
import threading
import time

import pytest

from conftest import BUILD, DEBUG_BUILD
from e2blib import E2B
from serverlib import Server, free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

KEY = "e2b_" + "5a" * 20
BOB = "e2b_" + "7c" * 20
SECRET = "the other sandbox's secret"


@pytest.fixture(params=["protected", "e2b-tokens", "e2b-tenant", "files-resolve"])
def target(request, tmp_path):
    port = free_port()
    extra = {"e2b": {"listen": f"127.0.0.1:{port}"}, "pool_size": 0}
    tenants = {"alice": KEY, "bob": BOB}
    if request.param == "protected":
        server = Server(tmp_path, tenants=tenants, extra=extra, build=BUILD)
    else:
        server = Server(tmp_path, tenants=tenants, extra=extra, build=DEBUG_BUILD,
                        env=dict(os.environ, CODECAGE_DEBUG_DISABLE=request.param))
    server.switched_off = None if request.param == "protected" else request.param
    server.e2b = E2B(port, KEY)
    yield server
    server.stop()


def two_sandboxes(target):
    a, b = target.e2b.create(), target.e2b.create()
    status, _ = target.e2b.run(b, f"printf %s \"{SECRET}\" > secret.txt")
    assert status == 200
    return a, b


def test_one_sandboxs_token_does_not_reach_another(target):
    a, b = two_sandboxes(target)
    leaks = target.switched_off == "e2b-tokens"
    status, out = target.e2b.run(b, "cat secret.txt", token=a["envdAccessToken"])
    assert (status == 200 and out == SECRET) == leaks, (status, out)
    status, body = target.e2b.read(b, "secret.txt", token=a["envdAccessToken"])
    assert (status == 200 and body == SECRET.encode()) == leaks, (status, body)
    if not leaks:
        assert status == 401
    # b's own token reaches b in every build.
    assert target.e2b.read(b, "secret.txt") == (200, SECRET.encode())


def test_one_sandboxs_traffic_token_does_not_reach_anothers_code(target):
    a, b = two_sandboxes(target)
    leaks = target.switched_off == "e2b-tokens"
    code = "open('secret.txt').read()"
    status, lines = target.e2b.execute(b, code, token=a["trafficAccessToken"])
    texts = [line.get("text") for line in lines if line.get("type") == "result"]
    assert (status == 200 and texts == [repr(SECRET)]) == leaks, (status, lines)
    if not leaks:
        assert status == 401, (status, lines)
    # b's own traffic token reaches b's interpreter in every build.
    status, lines = target.e2b.execute(b, code)
    assert status == 200 and [l.get("text") for l in lines if l.get("type") == "result"] == \
        [repr(SECRET)], (status, lines)


def test_another_tenants_key_reaches_no_sandbox(target):
    """bob knows the id of alice's sandbox (ids are not secrets: they show in
    URLs and logs) and tries every control-plane route with his own key."""
    e2b = target.e2b
    _, b = two_sandboxes(target)
    sid = b["sandboxID"]
    leaks = target.switched_off == "e2b-tenant"
    status, listed = e2b.control("GET", "/v2/sandboxes", key=BOB)
    assert status == 200, (status, listed)
    assert (sid in [s["sandboxID"] for s in listed]) == leaks, listed
    status, info = e2b.control("GET", f"/sandboxes/{sid}", key=BOB)
    assert (status == 200 and info["sandboxID"] == sid) == leaks, (status, info)
    if not leaks:
        assert status == 404 and info["code"] == 404, (status, info)
    # Setting the timeout: alice's end of life stays where it was.
    _, before = e2b.control("GET", f"/sandboxes/{sid}")
    status, body = e2b.control("POST", f"/sandboxes/{sid}/timeout", {"timeout": 3000}, key=BOB)
    assert (status == 204) == leaks, (status, body)
    _, after = e2b.control("GET", f"/sandboxes/{sid}")
    assert (after["endAt"] != before["endAt"]) == leaks, (before, after)
    # Connect hands out the sandbox's tokens: with them bob would read her files.
    for path in (f"/sandboxes/{sid}/connect", f"/v2/sandboxes/{sid}/connect"):
        status, body = e2b.control("POST", path, {"timeout": 60}, key=BOB)
        assert (status == 200 and "envdAccessToken" in body) == leaks, (path, status, body)
        if leaks:
            assert e2b.read(body, "secret.txt") == (200, SECRET.encode())
        else:
            assert status == 404 and "envdAccessToken" not in body, (path, status, body)
    status, body = e2b.control("DELETE", f"/sandboxes/{sid}", key=BOB)
    assert (status == 204) == leaks, (status, body)
    # For alice it is still there exactly when bob's kill was refused.
    status, _ = e2b.control("GET", f"/sandboxes/{sid}")
    assert status == (404 if leaks else 200), status
    if not leaks:
        denied = [r for r in target.audit_records() if r.get("event") == "auth.deny"
                  and r.get("reason") == "forbidden" and r.get("sandbox") == sid]
        assert len(denied) >= 5 and {r["tenant"] for r in denied} == {"bob"}, denied


def test_traffic_token_alone_runs_no_command(target):
    _, b = two_sandboxes(target)
    leaks = target.switched_off == "e2b-tokens"
    for header in ("X-Access-Token", "E2B-Traffic-Access-Token"):
        status, out = target.e2b.run(b, "cat secret.txt", token_header=header,
                                     token=b["trafficAccessToken"])
        assert (status == 200 and out == SECRET) == leaks, (header, status, out)
        status, body = target.e2b.read(b, "secret.txt", token_header=header,
                                       token=b["trafficAccessToken"])
        assert (status == 200 and body == SECRET.encode()) == leaks, (header, status, body)


def test_files_do_not_leave_the_workspace(target, tmp_path):
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text("a file of the host")
    os.chmod(tmp_path, 0o755)
    sbx = target.e2b.create()
    status, _ = target.e2b.run(sbx, f"ln -s {host_file} link && ln -s / root")
    assert status == 200
    leaks = target.switched_off == "files-resolve"
    # Through a link in the middle of the path: resolved inside the workspace.
    status, body = target.e2b.read(sbx, "root" + str(host_file))
    assert (status == 200 and body == b"a file of the host") == leaks, (status, body)
    if not leaks:
        assert status == 404, (status, body)
    # A link as the last component is never followed (O_NOFOLLOW), in any build.
    for path in ("link", "/workspace/link"):
        status, body = target.e2b.read(sbx, path)
        assert status in (403, 404) and b"a file of the host" not in body, (path, status, body)
    for path in ("../../../../" + str(host_file), "/workspace/../" + str(host_file), str(host_file)):
        status, body = target.e2b.read(sbx, path)
        assert status == 400 and b"a file of the host" not in body, (path, status, body)


def test_a_reload_reaches_the_e2b_listener(tmp_path):
    """SIGHUP replaces a tenant's key: the old key opens nothing on the E2B
    listener any more, and the new one is redacted from command output
    there as on the API (the listener once kept its first config)."""
    port = free_port()
    server = Server(tmp_path, tenants={"alice": KEY},
                    extra={"e2b": {"listen": f"127.0.0.1:{port}"}, "pool_size": 0})
    try:
        e2b = E2B(port, KEY)
        sbx = e2b.create()
        new_key = "e2b_" + "6b" * 20
        config = json.loads(server.config_path.read_text())
        config["tenants"] = [{"name": "alice", "token": new_key}]
        server.config_path.write_text(json.dumps(config))
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "codecage: reloaded" not in server.log_text():
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.05)
        status, body = e2b.request("POST", "/v2/sandboxes", json.dumps({"templateID": "base"}),
                                   {"X-API-Key": KEY, "Content-Type": "application/json"})
        assert status == 401, (status, body)
        status, body = e2b.request("GET", "/v2/sandboxes", headers={"X-API-Key": new_key})
        assert status == 200, (status, body)
        status, out = e2b.run(sbx, f"printf '%s\\n' '{new_key}'")
        assert status == 200 and new_key not in out, (status, out)
        # The listener is bound at start: a reload that drops its section (and
        # with it the tenants a public listener requires) is refused.
        del config["e2b"]
        config["tenants"] = []
        server.config_path.write_text(json.dumps(config))
        server.proc.send_signal(signal.SIGHUP)
        while "e2b changed" not in server.log_text():
            assert time.monotonic() < deadline + 30, server.log_text()
            time.sleep(0.05)
        status, body = e2b.request("GET", "/v2/sandboxes")
        assert status == 401, (status, body)
        status, body = e2b.request("GET", "/v2/sandboxes", headers={"X-API-Key": new_key})
        assert status == 200, (status, body)
    finally:
        server.stop()


@pytest.fixture
def plain(tmp_path):
    """One normal server with an E2B listener (no switched-off protection)."""
    port = free_port()
    server = Server(tmp_path, tenants={"alice": KEY, "bob": BOB},
                    extra={"e2b": {"listen": f"127.0.0.1:{port}"}, "pool_size": 0})
    server.e2b = E2B(port, KEY)
    yield server
    server.stop()


def test_set_timeout_without_a_timeout_keeps_the_sandbox(plain):
    """POST /sandboxes/{id}/timeout must name its timeout: a body without
    one (empty, `{}`, null, a misspelt field) once set a lifetime of 0 and
    the reaper removed the sandbox -- silently, with a 204."""
    e2b = plain.e2b
    sbx = e2b.create()
    path = f"/sandboxes/{sbx['sandboxID']}/timeout"
    headers = {"X-API-Key": KEY, "Content-Type": "application/json"}
    for body in ("", "{}", '{"timeout": null}', '{"timeoutMs": 60000}', '{"timeout": "60"}'):
        status, raw = e2b.request("POST", path, body, headers)
        assert status == 400 and b"timeout" in raw, (body, status, raw)
    time.sleep(1.5)  # the reaper runs every 0.5 s
    status, info = e2b.control("GET", f"/sandboxes/{sbx['sandboxID']}")
    assert status == 200, (status, info)
    assert e2b.run(sbx, "echo alive") == (200, "alive\n")
    assert e2b.request("POST", path, '{"timeout": 60}', headers)[0] == 204


def start_stream(e2b, sbx, command, stdin=False):
    """A streamed Process/Start of `bash -c command`: (connection, response,
    pid from its start event)."""
    msg = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-c", command]},
                      "stdin": stdin}).encode()
    headers = E2B.sandbox_headers(sbx, 49983, "X-Access-Token", sbx["envdAccessToken"])
    headers["Content-Type"] = "application/connect+json"
    conn = http.client.HTTPConnection("127.0.0.1", e2b.port, timeout=60)
    conn.request("POST", "/process.Process/Start", struct.pack(">BI", 0, len(msg)) + msg, headers)
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    flags, first = read_envelope(resp)
    return conn, resp, first["event"]["start"]["pid"]


def read_envelope(resp):
    """One Connect envelope of a stream: (flags, parsed JSON), (None, None) at EOF."""
    head = resp.read(5)
    if len(head) < 5:
        return None, None
    flags, n = struct.unpack(">BI", head)
    return flags, json.loads(resp.read(n))


def drain_stream(resp):
    """Reads a stream to its end: (stdout bytes, end event or None, the
    end-of-stream envelope or None)."""
    out, end = b"", None
    while True:
        flags, frame = read_envelope(resp)
        if flags is None or flags & 2:
            return out, end, frame
        event = frame.get("event", {})
        out += base64.b64decode(event.get("data", {}).get("stdout", ""))
        end = event.get("end", end)


def unary(e2b, sbx, method, msg):
    """A unary Connect call of process.Process: (HTTP status, parsed body)."""
    headers = E2B.sandbox_headers(sbx, 49983, "X-Access-Token", sbx["envdAccessToken"])
    headers["Content-Type"] = "application/json"
    status, raw = e2b.request("POST", f"/process.Process/{method}", json.dumps(msg), headers)
    return status, json.loads(raw) if raw else None


def test_large_input_reaches_a_command_that_echoes_it(plain):
    """SendInput of 1 MB to `cat`: cat's output is streamed while the input
    is written (the write once held the lock the output needs, so cat
    blocked on its stdout, read no more, and SendInput failed after 10 s)."""
    e2b = plain.e2b
    sbx = e2b.create()
    conn, resp, pid = start_stream(e2b, sbx, "cat", stdin=True)
    result = {}
    reader = threading.Thread(target=lambda: result.update(zip(("out", "end", "eos"),
                                                                drain_stream(resp))))
    reader.start()
    data = os.urandom(1024 * 1024)
    status, body = unary(e2b, sbx, "SendInput", {"process": {"pid": pid},
                                                 "input": {"stdin": base64.b64encode(data).decode()}})
    assert status == 200, (status, body)
    assert unary(e2b, sbx, "CloseStdin", {"process": {"pid": pid}})[0] == 200
    reader.join(60)
    conn.close()
    assert not reader.is_alive()
    assert result["out"] == data and result["end"]["exitCode"] == 0, result.get("end")


def kept_connection(e2b):
    """A connection to the E2B listener kept open after one answered request."""
    conn = http.client.HTTPConnection("127.0.0.1", e2b.port, timeout=60)
    conn.request("GET", "/v2/sandboxes", headers={"X-API-Key": KEY})
    r = conn.getresponse()
    assert r.status == 200 and r.read()
    return conn


def test_a_draining_server_takes_no_new_e2b_work(plain):
    """After SIGTERM the E2B listener, like the main one, starts nothing:
    a connection kept open answers 503 to a create and to Process/Start
    (they once got 201 and ran), and a new connection is refused."""
    e2b = plain.e2b
    sbx = e2b.create()
    conn, resp, _ = start_stream(e2b, sbx, "sleep 60")  # keeps the server draining
    kept = [kept_connection(e2b), kept_connection(e2b)]
    plain.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while "stopping" not in plain.log_text():
        assert time.monotonic() < deadline, plain.log_text()
        time.sleep(0.05)
    time.sleep(0.2)  # the drain has begun (cage_service_drain, then the quiesce)
    kept[0].request("POST", "/v2/sandboxes", json.dumps({"templateID": "base"}),
                    {"X-API-Key": KEY, "Content-Type": "application/json"})
    r = kept[0].getresponse()
    assert r.status == 503 and b"shutting down" in r.read(), r.status
    msg = json.dumps({"process": {"cmd": "/bin/echo", "args": ["ran"]}}).encode()
    headers = E2B.sandbox_headers(sbx, 49983, "X-Access-Token", sbx["envdAccessToken"])
    headers["Content-Type"] = "application/connect+json"
    kept[1].request("POST", "/process.Process/Start", struct.pack(">BI", 0, len(msg)) + msg,
                    headers)
    r = kept[1].getresponse()
    assert r.status == 503 and b"ran" not in r.read(), r.status
    with pytest.raises(OSError):
        e2b.control("GET", "/v2/sandboxes")
    for c in (*kept, conn):
        c.close()
    plain.proc.send_signal(signal.SIGTERM)  # a second one cuts the drain short


def raw_request(port, head):
    """Sends head (bytes: request line and headers) on a new connection;
    returns the status line's code."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        answer = b""
        while b"\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ")[1])


def test_what_a_client_sends_reaches_log_and_audit_escaped(plain):
    """A method with terminal escapes and invalid UTF-8 neither writes raw
    bytes to the log nor loses the auth.deny record's fields (json_pack
    once failed on it); a bad token on the sandbox plane is not logged
    under the owner's tenant; a foreign sandbox's record has its remote."""
    e2b = plain.e2b
    sbx = e2b.create()
    port = e2b.port
    method = b"G\x1b[31mE\xffT"
    for head in (b"%s /v2/sandboxes HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-API-Key: wrong\r\n\r\n",
                 b"%s /files?path=x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nE2b-Sandbox-Id: "
                 + sbx["sandboxID"].encode() + b"\r\nE2b-Sandbox-Port: 49983\r\n"
                 b"X-Access-Token: wrong\r\n\r\n"):
        assert raw_request(port, head % (method, port)) == 401
    status, _ = e2b.control("GET", "/sandboxes/" + sbx["sandboxID"] + "/%1B[2J", key=BOB)
    assert status == 404
    log = plain.log_path.read_bytes()
    assert b"\x1b" not in log and b"\xff" not in log, log[-2000:]
    e2b_lines = [line for line in log.decode().splitlines() if "status=401" in line]
    assert len(e2b_lines) == 2 and all("tenant=-" in line for line in e2b_lines), e2b_lines
    denies = [r for r in plain.audit_records() if r.get("event") == "auth.deny"]
    bad = [r for r in denies if r.get("reason") == "bad_token"]
    assert len(bad) == 2, denies
    for r in bad:
        assert r["method"] == "G%1B[31mE%FFT" and r["remote"].startswith("127.0.0.1:"), r
    assert {r["route"] for r in bad} == {"/v2/sandboxes", "/files"}, bad
    foreign = [r for r in denies if r.get("reason") == "forbidden"]
    assert len(foreign) == 1 and foreign[0]["remote"].startswith("127.0.0.1:"), foreign
    assert "\x1b" not in foreign[0]["route"], foreign


def connect_stream(e2b, sbx, pid):
    """Process/Connect to the command pid: (connection, response)."""
    msg = json.dumps({"process": {"pid": pid}}).encode()
    headers = E2B.sandbox_headers(sbx, 49983, "X-Access-Token", sbx["envdAccessToken"])
    headers["Content-Type"] = "application/connect+json"
    conn = http.client.HTTPConnection("127.0.0.1", e2b.port, timeout=60)
    conn.request("POST", "/process.Process/Connect", struct.pack(">BI", 0, len(msg)) + msg,
                 headers)
    return conn, conn.getresponse()


def test_a_connect_past_the_streams_limit_is_refused(plain):
    """A command takes 8 streams; a 9th Connect ends at once with a
    resource_exhausted error (it once got a stream with only its start
    event and no end), and the 8 attached streams all get the output and
    the end."""
    e2b = plain.e2b
    sbx = e2b.create()
    conn, resp, pid = start_stream(e2b, sbx, "read line; echo got $line", stdin=True)
    streams = [(conn, resp)]
    for _ in range(7):
        c, r = connect_stream(e2b, sbx, pid)
        assert r.status == 200 and read_envelope(r)[1]["event"]["start"]["pid"] == pid
        streams.append((c, r))
    c, r = connect_stream(e2b, sbx, pid)
    out, end, eos = drain_stream(r)
    c.close()
    assert end is None and eos and eos["error"]["code"] == "resource_exhausted", (r.status, eos)
    status, _ = unary(e2b, sbx, "SendInput", {"process": {"pid": pid},
                                              "input": {"stdin": base64.b64encode(b"x\n").decode()}})
    assert status == 200
    for c, r in streams:
        out, end, _ = drain_stream(r)
        c.close()
        assert out == b"got x\n" and end["exitCode"] == 0, (out, end)


def list_dir(e2b, sbx, path, depth):
    headers = E2B.sandbox_headers(sbx, 49983, "X-Access-Token", sbx["envdAccessToken"])
    headers["Content-Type"] = "application/json"
    status, raw = e2b.request("POST", "/filesystem.Filesystem/ListDir",
                              json.dumps({"path": path, "depth": depth}), headers)
    return status, json.loads(raw) if raw else None


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_a_deep_listing_keeps_within_its_entries(plain):
    """ListDir depth 16 over a chain of 16 directories, each with 9,999
    hard links: the answer has at most 10,000 entries and the server reads
    no more than that (it once kept all 16 listings of 10,000 at once,
    ~200 MB)."""
    e2b = plain.e2b
    sbx = e2b.create()
    script = ("import os\nos.makedirs('chain', exist_ok=True)\nd = 'chain'\n"
              "for level in range(16):\n    f = f'src{level}'\n    open(f, 'w').close()\n"
              "    for i in range(9999):\n        os.link(f, f'{d}/l{i:05}')\n"
              "    d = d + '/d'\n    os.mkdir(d)\n")
    status, out = e2b.run(sbx, f"python3 -c \"{script}\" 2>&1 && echo made")
    assert (status, out) == (200, "made\n"), out
    before = vm_hwm_kb(plain.proc.pid)
    status, body = list_dir(e2b, sbx, "/workspace/chain", 16)
    assert status == 200 and len(body["entries"]) == 10000, (status, len(body["entries"]))
    grown_mb = (vm_hwm_kb(plain.proc.pid) - before) / 1024
    assert grown_mb < 100, grown_mb


def test_a_listing_passes_over_names_it_cannot_address(plain):
    """A directory whose name is not UTF-8 (shown sanitized) or whose path
    is too long to name does not make a deeper ListDir fail (404 / 400
    once): the other entries are listed."""
    e2b = plain.e2b
    sbx = e2b.create()
    long_dir = "/".join(["d" * 200] * 6)
    status, out = e2b.run(sbx, f"mkdir -p $'bad\\xff' {long_dir} ok && touch $'bad\\xff/x' ok/y "
                               f"&& echo made")
    assert (status, out) == (200, "made\n"), out
    status, body = list_dir(e2b, sbx, "/workspace", 8)
    assert status == 200, (status, body)
    paths = {e["path"] for e in body["entries"]}
    assert "/workspace/ok/y" in paths and "/workspace/ok" in paths, paths


@pytest.mark.parametrize("listener", ["api", "e2b"])
def test_one_address_does_not_take_every_connection(plain, listener):
    """260 idle connections from one address (127.0.0.2), each with half a
    request, once filled the 256 connections of a listener, so every other
    client was turned away for a minute; a client from another address
    (127.0.0.1) is now still served."""
    port = plain.port if listener == "api" else plain.e2b.port
    hogs = []
    try:
        for _ in range(260):
            s = socket.create_connection(("127.0.0.1", port), timeout=10,
                                         source_address=("127.0.0.2", 0))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            hogs.append(s)
        time.sleep(0.5)  # the server has accepted what it will
        if listener == "api":
            assert plain.request("GET", "/healthz", unix=False, timeout=10).status == 200
        else:
            assert plain.e2b.control("GET", "/v2/sandboxes")[0] == 200
    finally:
        for s in hogs:
            s.close()
