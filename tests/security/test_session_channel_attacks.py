"""The channel between the server and the Python session driver, attacked
from inside (docs/SECURITY.md, "Python sessions"): once user code runs it
can write raw frames to fd 3, so the server must hold every frame to the
bounds the honest driver keeps — host calls within the run's budget and
its granted names, the memory a frame takes to read, the size and depth of
the values it carries, the run's timeout — and redact what goes out."""
import http.client
import json
import re
import time
import uuid

import pytest

from conftest import SANITIZED
from serverlib import Server

SECRET = "s3cr3t-" + uuid.uuid4().hex

# Frames written by the code itself, beside the driver: docs/SESSION-PROTOCOL.md.
RAW = """
import json, os, struct
def _send(o):
    b = json.dumps(o).encode()
    os.write(3, struct.pack('>II', len(b), 0) + b)
def _send_text(t):
    b = t.encode()
    os.write(3, struct.pack('>II', len(b), 0) + b)
def _rd(n):
    d = b''
    while len(d) < n:
        d += os.read(3, n - len(d))
    return d
def _recv():
    n, _ = struct.unpack('>II', _rd(8))
    return json.loads(_rd(n))
"""


@pytest.fixture(scope="module")
def server(cage, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("chan"),
               extra={"secrets": {"MYSECRET": {"value": SECRET}}})
    yield s
    s.stop()


@pytest.fixture
def box(server):
    name = "chan-" + uuid.uuid4().hex[:12]
    server.ok("POST", "/v1/sandboxes", {"name": name, "secrets": ["MYSECRET"]})
    yield name
    server.request("DELETE", f"/v1/sandboxes/{name}")


def run(server, name, code, **extra):
    r = server.request("POST", f"/v1/sandboxes/{name}/python", {"code": code, **extra},
                       timeout=120)
    assert r.status == 200, r.body
    return r.json


def streamed_run(server, name, body):
    """A run over Server-Sent Events whose host calls are all answered
    "granted"; returns (the host_call events the client saw, the result)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", f"/v1/sandboxes/{name}/python", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json",
                          "Accept": "text/event-stream"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    calls, result, event, data = [], None, None, []
    try:
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif line == "" and event:
                doc = json.loads("\n".join(data))
                if event == "host_call":
                    calls.append(doc)
                    r = server.request("POST", f"/v1/host_calls/{doc['id']}",
                                       {"value": "granted"})
                    assert r.status == 200, r.body
                elif event == "result":
                    result = doc
                event, data = None, []
    finally:
        conn.close()
    assert result is not None
    return calls, result


def vm_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024


def test_forged_host_calls_stop_at_the_budget_and_the_granted_names(server, box):
    # The driver refuses a 2nd call with host_budget 1 and a name it was not
    # given; frames the code writes itself must be refused by the server.
    code = RAW + """
replies = []
for i, fn in enumerate(["llm_query"] * 5 + ["delete_everything"]):
    _send({"op": "host_call", "id": 10**6 + i, "fn": fn, "args": ["x"], "kwargs": {}})
    replies.append(_recv())
[r.get("error") for r in replies]
"""
    calls, res = streamed_run(server, box, {"code": code, "host_budget": 1,
                                            "host_functions": ["granted_fn"]})
    assert [c["fn"] for c in calls] == ["llm_query"], calls
    errors = res["return_value"]
    assert errors[0] is None and all("budget" in e for e in errors[1:]), res
    assert res["host_calls"] == 1 and res["state_lost"] is False, res


def test_forged_host_calls_outside_the_granted_names_never_reach_the_client(server, box):
    deep = "[" * 600 + "]" * 600
    code = RAW + """
out = []
for i, fn in enumerate(["delete_everything", "x" * 5000, "granted_fn", "tools.search"]):
    _send({"op": "host_call", "id": 10**6 + i, "fn": fn, "args": [], "kwargs": {}})
    out.append(_recv().get("error"))
_send_text('{"op":"host_call","id":2000000,"fn":"llm_query","args":%s,"kwargs":{}}' % DEEP)
out.append(_recv().get("error"))
out
""".replace("DEEP", repr(deep))
    calls, res = streamed_run(server, box, {"code": code, "host_budget": 50,
                                            "host_functions": ["granted_fn"]})
    assert [c["fn"] for c in calls] == ["granted_fn", "tools.search"], calls
    errors = res["return_value"]
    assert "not a host function of this run" in errors[0], errors
    assert "at most 256 bytes" in errors[1] and len(errors[1]) < 200, errors
    assert errors[2] is None and errors[3] is None, errors
    assert "512 deep" in errors[4], errors


def test_an_honest_driver_gets_a_clear_error_for_a_refused_call(server, box):
    # granted in an earlier run (the driver keeps the function), not in this one
    run(server, box, "1")
    streamed_run(server, box, {"code": "granted_fn", "host_functions": ["granted_fn"]})
    calls, res = streamed_run(server, box, {"code": "granted_fn('a')",
                                            "host_functions": ["other_fn"]})
    assert calls == []
    assert res["error"]["type"] == "HostCallError", res
    assert "granted_fn is not a host function of this run" in res["error"]["message"]


def test_a_frame_costly_to_read_does_not_balloon_the_server(cage, tmp_path):
    # 16 MiB of "{}," would take jansson ~1.3 GiB; the server reads at most
    # SESSION_PARSE_MAX (256 MiB) of it and gives up. 512 MiB leaves room
    # for the frame itself and whatever else the server holds meanwhile.
    s = Server(tmp_path)
    try:
        s.ok("POST", "/v1/sandboxes", {"name": "b", "memory_mib": 512})
        assert run(s, "b", "1")["return_value"] == 1
        before = vm_hwm(s.proc.pid)
        code = RAW + """
n = (16 * 1024 * 1024 - 64) // 3
_send_text('{"op":"done","return_value":[' + '{},' * (n - 1) + '{}]}')
import time
time.sleep(60)
"""
        res = run(s, "b", code, timeout_s=60)
        grown = vm_hwm(s.proc.pid) - before
        assert grown < 512 << 20, f"the server grew by {grown >> 20} MiB"
        assert res["status"] == "error" and res["state_lost"] is True, res
        assert "memory to read" in res["reason"], res
        assert run(s, "b", "2")["return_value"] == 2  # a new session serves on
        assert s.alive()
    finally:
        s.stop()


FORGED_DONE = RAW + """
_send_text('{"op":"done","status":"ok","return_value":%s,"return_repr":null,'
           '"error":null,"exit_code":0,"duration_ms":1,"host_calls":0}' % (VALUE))
import time
time.sleep(60)
"""


@pytest.mark.parametrize("value,why", [
    ('json.dumps("a" * (2 << 20))', "more than 65536 bytes of JSON"),
    ('"[" * 1500 + "]" * 1500', "nested more than 512 deep"),
])
def test_forged_return_values_keep_the_documented_bounds(server, box, value, why):
    res = run(server, box, FORGED_DONE.replace("VALUE", value), timeout_s=30)
    assert res["status"] == "ok", res
    assert res["return_value"] is None and why in res["return_repr"], res
    assert len(json.dumps(res)) < 100_000


def test_a_forged_get_value_keeps_the_documented_bounds(server, box):
    # The code swaps the driver's own `get` for one answering a value nested
    # 1500 deep and a 1 MiB repr (the driver's are at most 512 and 64 KiB).
    code = """
import gc, json
forged = ('{"op":"value","name":"v","type":"list","value":%s,"repr":%s}'
          % ("[" * 1500 + "]" * 1500, json.dumps("r" * (1 << 20))))
for o in gc.get_objects():
    if type(o).__name__ == "Session" and isinstance(getattr(o, "handlers", None), dict):
        o.handlers["get"] = lambda msg: forged
v = 1
"""
    run(server, box, code)
    r = server.request("GET", f"/v1/sandboxes/{box}/python/variables/v")
    assert r.status == 200, r.body
    assert r.json["value"] is None and len(r.json["repr"]) <= 65536, r.json["type"]
    json.loads(r.body)  # and any client reads it


def test_host_call_replies_do_not_stretch_the_timeout(server, box):
    # Each call's reply used to repeat its 4 MiB name and block the server
    # while the code slept, and that time was added to the deadline.
    code = RAW + """
import time
for i in range(5):
    _send({"op": "host_call", "id": 10**6 + i, "fn": "f" * (4 << 20), "args": [], "kwargs": {}})
    time.sleep(3)
    _recv()
"""
    t0 = time.monotonic()
    res = run(server, box, code, timeout_s=3)
    took = time.monotonic() - t0
    assert res["status"] == "timeout", res
    assert took < 12, f"a 3 s run took {took:.1f} s"


def test_a_variable_holding_a_secret_is_redacted(server, box):
    run(server, box, "import os\nx = os.environ['MYSECRET']\nd = {'k': [x]}")
    for var in ("x", "d"):
        r = server.request("GET", f"/v1/sandboxes/{box}/python/variables/{var}")
        assert r.status == 200, r.body
        assert SECRET not in r.body.decode(), r.body


def test_a_request_body_costly_to_read_does_not_balloon_the_server(tmp_path):
    # The same shape from a client: a 16 MiB body (the default
    # limits.max_body_bytes) of "{}," once took the server ~1.3 GiB to
    # parse. Now at most JSON_REQUEST_BASE (256 MiB) + 4 bytes per byte of
    # body, and the client gets a 413 saying why; the MCP endpoint parses
    # its messages the same way.
    s = Server(tmp_path)
    try:
        assert s.request("GET", "/healthz").status == 200
        before = vm_hwm(s.proc.pid)
        n = (16 * 1024 * 1024 - 64) // 3
        body = b'{"code":"1","x":[' + b"{}," * (n - 1) + b"{}]}"
        r = s.request("POST", "/v1/python", body, headers={"Content-Type": "application/json"},
                      timeout=120)
        assert r.status == 413, (r.status, r.body[:300])
        assert b"memory" in r.body, r.body[:300]
        # ASan's redzones and quarantine hold about twice what the heap does
        # (the old code: 1.3 GiB, and over 2 GiB under ASan).
        assert vm_hwm(s.proc.pid) - before < (1 << 30 if SANITIZED else 512 << 20)
        assert s.request("GET", "/healthz").status == 200
    finally:
        s.stop()
