"""The HTTP API of `codecage serve` (docs/API.md), end to end over TCP and
the Unix socket: every route, Server-Sent Events, files, one-shot runs with
artifacts, bad input, limits, bearer tokens and tenant isolation. After each
test the server must still answer /healthz."""
import base64
import json
import os
import signal
import socket
import subprocess
import time
import uuid

import pytest

import serverlib
from conftest import BUILD
from serverlib import MAX_BODY, Response, UnixHTTPConnection, free_port

TOKEN_A = "tokenA-" + "a" * 24
TOKEN_B = "tokenB-" + "b" * 24


class Server(serverlib.Server):
    """The API tests speak TCP unless a test asks for the Unix socket."""

    def __init__(self, tmp, tenants=None):
        super().__init__(tmp, tenants=tenants, unix=False)


@pytest.fixture(scope="module")
def server(cage, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("api"))
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log_text()


@pytest.fixture(scope="module")
def auth_server(cage, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("auth"), tenants={"alice": TOKEN_A, "bob": TOKEN_B})
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log_text()


@pytest.fixture(autouse=True)
def keeps_serving(request):
    """Whatever a test sent, the server it used still answers afterwards."""
    yield
    for name in ("server", "auth_server"):
        if name in request.fixturenames:
            s = request.getfixturevalue(name)
            assert s.alive(), f"server stopped serving:\n{s.log_text()}"


def new_name():
    return "t-" + uuid.uuid4().hex[:12]


@pytest.fixture
def sandbox(server):
    name = new_name()
    r = server.request("POST", "/v1/sandboxes", {"name": name, "labels": {"suite": "api"}})
    assert r.status == 201, r.body
    yield name
    server.request("DELETE", f"/v1/sandboxes/{name}")


def sh(server, name, script, **extra):
    r = server.request("POST", f"/v1/sandboxes/{name}/exec", {"script": script, **extra})
    assert r.status == 200, r.body
    return r.json


def read_events(resp):
    """Yields (event, data, arrival time) from an SSE response."""
    event, data = None, []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line == "":
            if event or data:
                yield event, json.loads("\n".join(data)), time.monotonic()
            event, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


# ---- health and the OpenAPI document ----

def test_healthz(server):
    r = server.request("GET", "/healthz")
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json["status"] == "ok" and r.json["version"]


def test_healthz_over_unix_socket(server):
    r = server.request("GET", "/healthz", unix=True)
    assert r.status == 200 and r.json["status"] == "ok"
    assert (os.stat(server.socket_path).st_mode & 0o777) == 0o600


EXPECTED_ROUTES = {
    ("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"), ("get", "/v1/openapi.json"),
    ("post", "/v1/python"), ("post", "/v1/sandboxes/{name}/python"),
    ("post", "/v1/sandboxes/{name}/python/reset"),
    ("get", "/v1/sandboxes/{name}/python/variables"),
    ("get", "/v1/sandboxes/{name}/python/variables/{var}"),
    ("put", "/v1/sandboxes/{name}/python/variables/{var}"),
    ("post", "/v1/sandboxes/{name}/python/variables/{var}/load"), ("get", "/v1/pool"),
    ("post", "/v1/host_calls/{id}"),
    ("post", "/v1/sandboxes"), ("get", "/v1/sandboxes"),
    ("get", "/v1/sandboxes/{name}"), ("delete", "/v1/sandboxes/{name}"),
    ("post", "/v1/sandboxes/{name}/stop"), ("post", "/v1/sandboxes/{name}/start"),
    ("post", "/v1/sandboxes/{name}/kill"), ("get", "/v1/sandboxes/{name}/logs"),
    ("post", "/v1/sandboxes/{name}/exec"), ("post", "/v1/run"),
    ("get", "/v1/runs/{run_id}/files/{path}"),
    ("get", "/v1/sandboxes/{name}/files"), ("post", "/v1/sandboxes/{name}/files"),
    ("get", "/v1/sandboxes/{name}/files/{path}"), ("put", "/v1/sandboxes/{name}/files/{path}"),
    ("delete", "/v1/sandboxes/{name}/files/{path}"), ("post", "/v1/sandboxes/{name}/mkdir"),
    ("get", "/v1/images"), ("post", "/v1/images/pull"), ("post", "/v1/images/import"),
    ("get", "/v1/images/{ref}"), ("delete", "/v1/images/{ref}"),
}


def test_openapi_lists_every_route(server):
    r = server.request("GET", "/v1/openapi.json")
    assert r.status == 200
    doc = r.json
    assert doc["openapi"].startswith("3.1")
    found = {(m, p) for p, ops in doc["paths"].items() for m in ops if m != "parameters"}
    assert found == EXPECTED_ROUTES
    for p, ops in doc["paths"].items():
        for m, op in ops.items():
            if m != "parameters":
                assert op["responses"], (m, p)
    assert "Error" in doc["components"]["schemas"]


# ---- sandboxes ----

def test_sandbox_lifecycle(server):
    name = new_name()
    r = server.request("POST", "/v1/sandboxes", {"name": name, "labels": {"team": "x"}})
    assert r.status == 201, r.body
    assert r.json["name"] == name and r.json["state"] == "running"

    r = server.request("GET", f"/v1/sandboxes/{name}")
    assert r.status == 200 and r.json["name"] == name

    listed = server.request("GET", "/v1/sandboxes").json["sandboxes"]
    assert name in [s["name"] for s in listed]
    by_label = server.request("GET", "/v1/sandboxes?label=team%3Dx").json["sandboxes"]
    assert [s["name"] for s in by_label] == [name]
    other = server.request("GET", "/v1/sandboxes?label=team=y").json["sandboxes"]
    assert name not in [s["name"] for s in other]

    r = server.request("POST", f"/v1/sandboxes/{name}/stop")
    assert r.status == 200 and r.json["state"] == "stopped"
    result = sh(server, name, "echo back")
    assert result["stdout"] == "back\n" and result.get("restarted") is True
    r = server.request("POST", f"/v1/sandboxes/{name}/start")
    assert r.status == 200 and r.json["state"] == "running"
    r = server.request("POST", f"/v1/sandboxes/{name}/kill")
    assert r.status == 200 and r.json["state"] == "stopped"
    r = server.request("POST", f"/v1/sandboxes/{name}/start")
    assert r.status == 200 and r.json["state"] == "running"

    r = server.request("DELETE", f"/v1/sandboxes/{name}")
    assert r.status == 200 and r.json == {"removed": name}
    assert server.request("GET", f"/v1/sandboxes/{name}").status == 404


def test_exec_argv_script_stdin_env_cwd(server, sandbox):
    r = server.request("POST", f"/v1/sandboxes/{sandbox}/exec",
                       {"argv": ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]})
    assert r.status == 200, r.body
    res = r.json
    assert res["status"] == "error" and res["exit_code"] == 3
    assert res["stdout"] == "out\n" and res["stderr"] == "err\n"

    res = sh(server, sandbox, 'cat; echo "$GREETING"; pwd', stdin="in\n",
             env={"GREETING": "hello"}, cwd="/tmp")
    assert res["status"] == "ok"
    assert res["stdout"] == "in\nhello\n/tmp\n"


def test_exec_timeout(server, sandbox):
    res = sh(server, sandbox, "sleep 30", timeout_s=1)
    assert res["status"] == "timeout"


def test_logs(server, sandbox):
    sh(server, sandbox, "echo line1; echo line2; echo line3")
    r = server.request("GET", f"/v1/sandboxes/{sandbox}/logs")
    assert r.status == 200
    assert {"line1", "line2", "line3"} <= set(r.json["lines"])
    assert isinstance(r.json["truncated"], bool)
    r = server.request("GET", f"/v1/sandboxes/{sandbox}/logs?tail=1")
    assert r.status == 200 and r.json["lines"] == ["line3"]
    for bad in ("-1", "abc", "100001", "1.5", ""):
        r = server.request("GET", f"/v1/sandboxes/{sandbox}/logs?tail={bad}")
        assert r.status == 400 and "tail" in r.json["error"]["message"], bad


# ---- Server-Sent Events ----

def sse_post(server, path, body):
    conn = server.connection()
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    resp = conn.getresponse()
    return conn, resp


def test_exec_sse_streams_chunks_before_the_result(server, sandbox):
    conn, resp = sse_post(server, f"/v1/sandboxes/{sandbox}/exec",
                          {"script": "echo first; sleep 1.5; echo second >&2; printf '\\303'; "
                                     "sleep 0.2; printf '\\251\\n'"})
    try:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = list(read_events(resp))
    finally:
        conn.close()
    kinds = [e for e, _, _ in events]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    first = next(t for e, d, t in events if e == "stdout" and "first" in d["data"])
    assert events[-1][2] - first > 1.0, "the first chunk came only with the result"
    out = "".join(d["data"] for e, d, _ in events if e == "stdout")
    err = "".join(d["data"] for e, d, _ in events if e == "stderr")
    assert out == "first\n\u00e9\n"  # a UTF-8 character split across two writes
    assert err == "second\n"
    assert events[-1][1]["status"] == "ok"


def test_exec_sse_client_disconnect_cancels(server, sandbox):
    conn, resp = sse_post(server, f"/v1/sandboxes/{sandbox}/exec",
                          {"script": "echo started; sleep 3; touch /workspace/late"})
    assert resp.status == 200
    event, data, _ = next(read_events(resp))
    assert event == "stdout" and data["data"] == "started\n"
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    time.sleep(5)
    r = server.request("GET", f"/v1/sandboxes/{sandbox}/files/late?stat=1")
    assert r.status == 404, "the exec went on after its client left"


def test_exec_sse_error_before_output_is_a_plain_error(server):
    conn, resp = sse_post(server, f"/v1/sandboxes/{new_name()}/exec", {"script": "true"})
    try:
        assert resp.status == 404
        assert json.loads(resp.read())["error"]["code"] == "not_found"
    finally:
        conn.close()


# ---- files ----

def test_files_write_read_list_stat_mkdir_delete(server, sandbox):
    base = f"/v1/sandboxes/{sandbox}"
    r = server.request("POST", f"{base}/files", {"path": "notes/a.txt", "content": "héllo\n"})
    assert r.status == 200 and r.json["size"] == len("héllo\n".encode())
    r = server.request("GET", f"{base}/files/notes/a.txt")
    assert r.status == 200 and r.body == "héllo\n".encode()
    assert r.headers["X-Content-Type-Options"] == "nosniff"

    r = server.request("POST", f"{base}/files",
                       {"path": "bin.dat", "content": base64.b64encode(b"\x00\xff\x10").decode(),
                        "encoding": "base64"})
    assert r.status == 200 and r.json["size"] == 3
    assert server.request("GET", f"{base}/files/bin.dat").body == b"\x00\xff\x10"

    r = server.request("POST", f"{base}/mkdir", {"path": "empty/deep"})
    assert r.status == 200
    r = server.request("GET", f"{base}/files?path=notes")
    assert r.status == 200
    assert [e["name"] for e in r.json["entries"]] == ["a.txt"]
    root = {e["name"]: e for e in server.request("GET", f"{base}/files").json["entries"]}
    assert root["notes"]["type"] == "dir" and root["bin.dat"]["size"] == 3
    assert "empty" in root

    r = server.request("GET", f"{base}/files/notes/a.txt?stat=1")
    assert r.status == 200 and r.json["type"] == "file" and r.json["size"] == 7

    r = server.request("DELETE", f"{base}/files/notes/a.txt")
    assert r.status == 200
    assert server.request("GET", f"{base}/files/notes/a.txt").status == 404
    assert server.request("DELETE", f"{base}/files/empty").status != 200  # not empty
    assert server.request("DELETE", f"{base}/files/empty?recursive=1").status == 200
    assert server.request("GET", f"{base}/files/empty?stat=1").status == 404


def test_files_upload_download_raw(server, sandbox):
    data = bytes(range(256)) * 1000
    r = server.request("PUT", f"/v1/sandboxes/{sandbox}/files/up/blob.bin", data,
                       headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200 and r.json["size"] == len(data)
    r = server.request("GET", f"/v1/sandboxes/{sandbox}/files/up/blob.bin")
    assert r.status == 200 and r.body == data
    assert int(r.headers["Content-Length"]) == len(data)
    # Percent-encoded segments are decoded one by one.
    r = server.request("PUT", f"/v1/sandboxes/{sandbox}/files/with%20space.txt", b"x")
    assert r.status == 200
    res = sh(server, sandbox, "cat '/workspace/with space.txt'")
    assert res["stdout"] == "x"


def test_files_bad_base64_is_400_naming_content(server, sandbox):
    for bad in ("abc", "ab=c", "YQ", "Y Q==", "YR==", "!!!!"):
        r = server.request("POST", f"/v1/sandboxes/{sandbox}/files",
                           {"path": "x", "content": bad, "encoding": "base64"})
        assert r.status == 400 and "content" in r.json["error"]["message"], bad
    r = server.request("POST", f"/v1/sandboxes/{sandbox}/files",
                       {"path": "x", "content": "a", "encoding": "latin-1"})
    assert r.status == 400 and "encoding" in r.json["error"]["message"]


@pytest.mark.parametrize("path", ["..", "%2e%2e/etc/passwd", "a/../../etc/passwd",
                                  "a%2F..%2F..%2Fx"])
def test_files_traversal_in_url_is_400(server, sandbox, path):
    for method in ("GET", "DELETE"):
        r = server.request(method, f"/v1/sandboxes/{sandbox}/files/{path}")
        assert r.status == 400, (method, path, r.body)
    r = server.request("PUT", f"/v1/sandboxes/{sandbox}/files/{path}", b"x")
    assert r.status == 400


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "/workspace/../etc/x"])
def test_files_traversal_in_body_is_400(server, sandbox, path):
    r = server.request("POST", f"/v1/sandboxes/{sandbox}/files", {"path": path, "content": "x"})
    assert r.status == 400, r.body
    r = server.request("POST", f"/v1/sandboxes/{sandbox}/mkdir", {"path": path})
    assert r.status == 400, r.body


def test_files_of_unknown_sandbox_are_404(server):
    name = new_name()
    assert server.request("GET", f"/v1/sandboxes/{name}/files").status == 404
    assert server.request("GET", f"/v1/sandboxes/{name}/files/a").status == 404
    assert server.request("PUT", f"/v1/sandboxes/{name}/files/a", b"x").status == 404


# ---- one-shot runs ----

def test_run_one_shot_with_downloadable_artifacts(server):
    r = server.request("POST", "/v1/run", {
        "command": "mkdir -p /workspace/output && cat in.txt > /workspace/output/copy.txt "
                   "&& echo done",
        "files": [{"path": "in.txt", "content": "payload\n"}],
    })
    assert r.status == 200, r.body
    res = r.json
    assert res["status"] == "ok" and res["stdout"] == "done\n"
    run_id = res["run_id"]
    assert any(a["name"] == "copy.txt" for a in res["artifacts"]), res["artifacts"]
    r = server.request("GET", f"/v1/runs/{run_id}/files/copy.txt")
    assert r.status == 200 and r.body == b"payload\n"
    assert r.headers["Content-Type"].startswith("text/plain")
    assert server.request("GET", f"/v1/runs/{run_id}/files/missing.txt").status == 404
    assert server.request("GET", f"/v1/runs/{run_id}/files/..%2Fin.txt").status == 400
    assert server.request("GET", f"/v1/runs/{'0' * 32}/files/copy.txt").status == 404


def test_run_one_shot_streaming(server):
    conn, resp = sse_post(server, "/v1/run", {"command": "echo a; sleep 1; echo b"})
    try:
        assert resp.status == 200
        events = list(read_events(resp))
    finally:
        conn.close()
    assert events[0][0] == "stdout" and events[-1][0] == "result"
    assert events[-1][1]["stdout"] == "a\nb\n" and events[-1][1]["run_id"]


# ---- bad input ----

def test_unknown_sandbox_is_404(server):
    name = new_name()
    for method, suffix, body in (("GET", "", None), ("DELETE", "", None),
                                 ("POST", "/stop", None), ("POST", "/start", None),
                                 ("POST", "/kill", None), ("GET", "/logs", None),
                                 ("POST", "/exec", {"script": "true"})):
        r = server.request(method, f"/v1/sandboxes/{name}{suffix}", body)
        assert r.status == 404 and r.error_code() == "not_found", (method, suffix)


@pytest.mark.parametrize("name", ["-dash", ".dot", "a" * 64, "bad!name", "%00x", "a%2Fb",
                                  "%zz"])
def test_invalid_names_are_400(server, name):
    r = server.request("GET", f"/v1/sandboxes/{name}")
    assert r.status == 400 and r.error_code() == "invalid_request", name
    r = server.request("POST", f"/v1/sandboxes/{name}/exec", {"script": "true"})
    assert r.status == 400


def test_create_with_invalid_name_is_400(server):
    for name in ("bad name", "", "-x", "a/b"):
        r = server.request("POST", "/v1/sandboxes", {"name": name})
        assert r.status == 400 and r.error_code() == "invalid_request", name


def test_duplicate_is_409(server, sandbox):
    r = server.request("POST", "/v1/sandboxes", {"name": sandbox})
    assert r.status == 409 and r.error_code() == "conflict"


def test_malformed_json_is_400_with_position(server):
    r = server.request("POST", "/v1/sandboxes", b'{"name": "x",\n  oops}',
                       headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.error_code() == "invalid_request"
    assert "line 2" in r.json["error"]["message"]
    for body in (b"", b"[1]", b'{"a": 1, "a": 2}'):
        r = server.request("POST", "/v1/sandboxes", body,
                           headers={"Content-Type": "application/json"})
        assert r.status == 400, body


def test_wrong_content_type_is_415(server, sandbox):
    for ct in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": ct} if ct else {}
        r = server.request("POST", f"/v1/sandboxes/{sandbox}/exec", b'{"script": "true"}',
                           headers=headers)
        assert r.status == 415 and r.error_code() == "unsupported_media_type", ct
    r = server.request("POST", f"/v1/sandboxes/{sandbox}/exec", b'{"script": "true"}',
                       headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status == 200


def test_unknown_route_is_404_and_wrong_method_405(server):
    r = server.request("GET", "/v1/nothing")
    assert r.status == 404 and r.error_code() == "not_found"
    r = server.request("GET", "/v1/sandboxes/")
    assert r.status == 404
    r = server.request("PATCH", "/v1/sandboxes")
    assert r.status == 405 and r.error_code() == "method_not_allowed"
    assert set(r.headers["Allow"].split(", ")) == {"GET", "POST"}


def test_oversize_body_by_content_length_is_413(server):
    conn = server.connection()
    try:
        conn.putrequest("POST", "/v1/sandboxes")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(MAX_BODY + 1))
        conn.endheaders()
        r = Response(conn.getresponse())
    finally:
        conn.close()
    assert r.status == 413 and r.error_code() == "too_large"


def test_oversize_chunked_body_is_413(server):
    """No Content-Length: the body is counted while it arrives; past the
    limit it is no longer kept, and the 413 comes when it ends."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
        for _ in range(MAX_BODY // (1 << 20) + 4):
            s.sendall(chunk)
        s.sendall(b"0\r\n\r\n")
        reply = b""
        while not reply.endswith(b"}\n"):
            part = s.recv(65536)
            if not part:
                break
            reply += part
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b'"too_large"' in reply


def test_body_at_the_limit_is_accepted(server, sandbox):
    data = b"z" * MAX_BODY
    r = server.request("PUT", f"/v1/sandboxes/{sandbox}/files/big.bin", data)
    assert r.status == 200 and r.json["size"] == MAX_BODY
    r = server.request("GET", f"/v1/sandboxes/{sandbox}/files/big.bin?stat=1")
    assert r.json["size"] == MAX_BODY


def test_many_concurrent_requests(server):
    conns = [server.connection() for _ in range(32)]
    try:
        for c in conns:
            c.request("GET", "/v1/sandboxes")
        assert all(c.getresponse().status == 200 for c in conns)
    finally:
        for c in conns:
            c.close()


# ---- authentication and tenants ----

def test_no_token_is_401(auth_server):
    r = auth_server.request("GET", "/v1/sandboxes")
    assert r.status == 401 and r.error_code() == "unauthorized"
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    r = auth_server.request("POST", "/v1/sandboxes", {"name": "x"})
    assert r.status == 401


def test_wrong_token_is_401(auth_server):
    for header in (f"Bearer {TOKEN_A}x", "Bearer ", f"Basic {TOKEN_A}", TOKEN_A):
        r = auth_server.request("GET", "/v1/sandboxes", headers={"Authorization": header})
        assert r.status == 401, header


def test_health_and_openapi_need_no_token(auth_server):
    assert auth_server.request("GET", "/healthz").status == 200
    assert auth_server.request("GET", "/v1/openapi.json").status == 200


def test_tenant_cannot_see_or_touch_another_tenants_sandbox(auth_server):
    name = new_name()
    r = auth_server.request("POST", "/v1/sandboxes", {"name": name}, token=TOKEN_A)
    assert r.status == 201, r.body
    try:
        listed = auth_server.request("GET", "/v1/sandboxes", token=TOKEN_B).json["sandboxes"]
        assert name not in [s["name"] for s in listed]
        for method, suffix, body in (("GET", "", None), ("POST", "/stop", None),
                                     ("POST", "/exec", {"script": "true"}),
                                     ("GET", "/logs", None), ("GET", "/files", None),
                                     ("PUT", "/files/x", b"x"), ("DELETE", "", None)):
            r = auth_server.request(method, f"/v1/sandboxes/{name}{suffix}", body, token=TOKEN_B)
            assert r.status == 404, (method, suffix, r.body)
        # B may use the same name for its own sandbox.
        r = auth_server.request("POST", "/v1/sandboxes", {"name": name}, token=TOKEN_B)
        assert r.status == 201
        auth_server.request("DELETE", f"/v1/sandboxes/{name}", token=TOKEN_B)
        r = auth_server.request("GET", f"/v1/sandboxes/{name}", token=TOKEN_A)
        assert r.status == 200, "B's delete removed A's sandbox"
        # Over the Unix socket the token is required too.
        assert auth_server.request("GET", "/v1/sandboxes", unix=True).status == 401
        r = auth_server.request("GET", f"/v1/sandboxes/{name}", token=TOKEN_A, unix=True)
        assert r.status == 200
    finally:
        auth_server.request("DELETE", f"/v1/sandboxes/{name}", token=TOKEN_A)


# ---- the command line ----

def test_serve_help_and_bad_config(cage, tmp_path):
    p = subprocess.run([str(BUILD / "codecage"), "serve", "--help"], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0
    for flag in ("--config", "--listen", "--socket", "--no-socket", "--mcp-tools",
                 "--mcp-upstream", "--mcp-conformance"):
        assert flag in p.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"limts": {}}')
    p = subprocess.run([str(BUILD / "codecage"), "serve", "--config", str(bad)],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 125 and "limts" in p.stderr
    # The loopback-without-tokens rule holds for --listen too.
    p = subprocess.run([str(BUILD / "codecage"), "serve", "--no-socket", "--listen",
                        "0.0.0.0:0"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 125 and "loopback" in p.stderr


def test_serve_command_line_overrides_and_sigterm(cage, tmp_path):
    sock = tmp_path / "o.sock"
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"data_dir": str(tmp_path / "d"),
                               "audit_log": str(tmp_path / "a.jsonl")}))
    port = free_port()
    proc = subprocess.Popen([str(BUILD / "codecage"), "serve", "--config", str(cfg),
                             "--listen", f"127.0.0.1:{port}", "--socket", str(sock)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        line = b""
        while b"serving on" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line, "serve exited before it was ready"
        assert f"127.0.0.1:{port}".encode() in line and str(sock).encode() in line
        conn = UnixHTTPConnection(str(sock))
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert not sock.exists(), "the socket was left behind"
