"""Python over the HTTP API (docs/API.md, "Python"), end to end: persistent
sessions of named sandboxes (state, return values, errors, timeouts, a
lost session), their variables (JSON, a 100 MB text context, files),
reset, isolation between sandboxes and between one-shot runs of the warm
pool, the pool's statistics, and host-function callbacks answered by the
client over Server-Sent Events."""
import http.client
import json
import time
import uuid

import pytest

from serverlib import Server

MIB = 1024 * 1024
MAX_BODY = 128 * MIB
TOKEN_A = "tokenA-" + "a" * 24
TOKEN_B = "tokenB-" + "b" * 24


@pytest.fixture(scope="module")
def server(cage, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("py"), extra={"limits": {"max_body_bytes": MAX_BODY}})
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def keeps_serving(request):
    """Whatever a test did, its server still answers afterwards."""
    yield
    if "server" in request.fixturenames:
        s = request.getfixturevalue("server")
        assert s.request("GET", "/healthz").status == 200, s.log_text()[-4000:]


def new_name():
    return "py-" + uuid.uuid4().hex[:12]


def create(server, **spec):
    name = new_name()
    server.ok("POST", "/v1/sandboxes", {"name": name, **spec})
    return name


@pytest.fixture
def box(server):
    name = create(server)
    yield name
    server.request("DELETE", f"/v1/sandboxes/{name}")


def run(server, name, code, **extra):
    r = server.request("POST", f"/v1/sandboxes/{name}/python", {"code": code, **extra},
                       timeout=120)
    assert r.status == 200, r.body
    return r.json


def oneshot(server, code, **extra):
    r = server.request("POST", "/v1/python", {"code": code, **extra}, timeout=120)
    assert r.status == 200, r.body
    return r.json


def var_path(name, var=""):
    return f"/v1/sandboxes/{name}/python/variables" + (f"/{var}" if var else "")


# ---- Server-Sent Events and host calls ----

class Stream:
    """A Python run streamed as Server-Sent Events over its own connection."""

    def __init__(self, server, path, body, token=None, timeout=60):
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
        self.conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        self.resp = self.conn.getresponse()

    def events(self):
        """Yields (event, data) until the stream ends."""
        event, data = None, []
        while True:
            line = self.resp.readline()
            if not line:
                return
            line = line.decode().rstrip("\r\n")
            if line == "":
                if event or data:
                    yield event, json.loads("\n".join(data))
                event, data = None, []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))

    def close(self):
        self.conn.close()


def answer(server, call_id, doc, token=None):
    return server.request("POST", f"/v1/host_calls/{call_id}", doc, token=token)


def stream_run(server, path, body, answers):
    """Streams a run; each host_call event is answered with the next of
    answers (a function of the event's data returning {value} or {error}).
    Returns (host_call events, stdout text, the result)."""
    s = Stream(server, path, body)
    calls, out, result = [], "", None
    try:
        assert s.resp.status == 200, s.resp.read()
        assert s.resp.headers["Content-Type"].startswith("text/event-stream")
        for event, data in s.events():
            if event == "host_call":
                calls.append(data)
                r = answer(server, data["id"], answers(data))
                assert r.status == 200, r.body
            elif event == "stdout":
                out += data["data"]
            elif event == "result":
                result = data
            else:
                assert event == "stderr", (event, data)
    finally:
        s.close()
    assert result is not None, "the stream ended without a result"
    return calls, out, result


# ---- sessions of named sandboxes ----

def test_state_persists_across_calls(server, box):
    res = run(server, box, "x = 1")
    assert res["status"] == "ok" and res["return_value"] is None, res
    assert res["restarted"] is False and res["state_lost"] is False
    res = run(server, box, "x + 1")
    assert res["status"] == "ok" and res["return_value"] == 2, res
    res = run(server, box, "x += 40\nx")
    assert res["return_value"] == 41


def test_return_values_json_and_repr(server, box):
    res = run(server, box, '{"a": [1, 2.5, None], "b": "\u00e9"}')
    assert res["return_value"] == {"a": [1, 2.5, None], "b": "\u00e9"}
    assert res["return_repr"] is None
    res = run(server, box, "{1, 2}")
    assert res["return_value"] is None and res["return_repr"] == "{1, 2}"
    res = run(server, box, "print('hi')\n7")
    assert res["stdout"] == "hi\n" and res["return_value"] == 7


# A value whose JSON every part of the way reads back as that value (NUL in
# a string included) is return_value; any other is null with its repr. The
# session goes on either way.
CARRIED = [("'a\\x00b'", "a\x00b"), ("{'k': ['\\x00', 2**63 - 1]}", {"k": ["\x00", 2**63 - 1]}),
           ("-2**63", -2**63), ("'\\U0001f600'", "\U0001f600")]
AS_REPR = [("2**64", "18446744073709551616"), ("-2**63 - 1", "-9223372036854775809"),
           ("2**100", str(2**100)), ("[1, {'h': 2**64}]", "[1, {'h': 18446744073709551616}]"),
           ("{'a\\x00': 1}", "{'a\\x00': 1}"), ("'\\ud800'", "'\\ud800'")]


@pytest.mark.parametrize("code,value", CARRIED)
def test_values_carried_exactly(server, box, code, value):
    run(server, box, "kept = 41")
    res = run(server, box, code)
    assert res["status"] == "ok" and res["state_lost"] is False, res
    assert res["return_value"] == value and res["return_repr"] is None, res
    run(server, box, f"v = {code}")
    got = server.ok("GET", var_path(box, "v"))
    assert got["value"] == value and got["repr"] == run(server, box, "repr(v)")["return_value"]
    assert run(server, box, "kept + 1")["return_value"] == 42


@pytest.mark.parametrize("code,text", AS_REPR)
def test_values_beyond_json_come_as_their_repr(server, box, code, text):
    run(server, box, "kept = 41")
    res = run(server, box, code)
    assert res["status"] == "ok" and res["state_lost"] is False, res
    assert res["return_value"] is None and res["return_repr"] == text, res
    run(server, box, f"v = {code}")
    got = server.ok("GET", var_path(box, "v"))
    assert got["value"] is None and got["repr"] == text
    assert run(server, box, "kept + 1")["return_value"] == 42


def test_errors_and_names_with_nul_or_surrogates_keep_the_session(server, box):
    run(server, box, "kept = 41")
    res = run(server, box, "raise ValueError('a\\x00b \\udcff')")
    assert res["status"] == "error" and res["state_lost"] is False, res
    assert res["error"]["message"] == "a\x00b \\udcff"
    run(server, box, "globals()['odd\\x00name'] = 1")
    names = [v["name"] for v in server.ok("GET", var_path(box))["variables"]]
    assert "odd\x00name" in names and "kept" in names
    assert run(server, box, "kept + 1")["return_value"] == 42


def test_variables_put_with_nul_and_refused_deep(server, box):
    r = server.request("PUT", var_path(box, "s"), b'"a\\u0000b"',
                       headers={"Content-Type": "application/json"})
    assert r.status == 200, r.body
    assert run(server, box, "[len(s), s[1] == chr(0)]")["return_value"] == [3, True]
    assert server.ok("GET", var_path(box, "s"))["value"] == "a\x00b"
    deep = 1
    for _ in range(600):
        deep = [deep]
    r = server.request("PUT", var_path(box, "d"), deep)
    assert r.status == 400 and "deep" in r.json["error"]["message"], r.body
    r = server.request("PUT", var_path(box, "n"), b"18446744073709551616",
                       headers={"Content-Type": "application/json"})
    assert r.status == 400, r.body
    assert run(server, box, "[len(s), 'd' in globals()]")["return_value"] == [3, False]


def test_exception_traceback_shows_the_users_line(server, box):
    res = run(server, box, "def f(n):\n    return 10 / n\n\nf(0)\n")
    assert res["status"] == "error" and res["state_lost"] is False
    err = res["error"]
    assert err["type"] == "ZeroDivisionError" and "division by zero" in err["message"]
    assert "return 10 / n" in err["traceback"] and "<cell-" in err["traceback"]
    assert "codecage_session" not in err["traceback"]


def test_syntax_error(server, box):
    run(server, box, "before = 3")
    res = run(server, box, "def broken(:\n    pass\n")
    assert res["status"] == "error" and res["error"]["type"] == "SyntaxError", res
    assert run(server, box, "before")["return_value"] == 3


EXIT_CASES = [("x = 1", "ok", 0), ("1/0", "error", 1), ("def broken(:\n    pass\n", "error", 1),
              ("raise SystemExit(3)", "error", 3), ("import sys\nsys.exit()", "error", 0),
              ("raise SystemExit(0)", "error", 0), ("raise SystemExit(256 + 7)", "error", 7),
              ("raise SystemExit('bye')", "error", 1)]


@pytest.mark.parametrize("code,status,exit_code", EXIT_CASES)
def test_exit_code_is_the_scripts(server, box, code, status, exit_code):
    res = run(server, box, code)
    assert (res["status"], res["exit_code"]) == (status, exit_code), res
    assert run(server, box, "7")["exit_code"] == 0  # the session goes on


def test_exit_code_of_a_oneshot_and_a_timeout(server, box):
    assert oneshot(server, "raise SystemExit(5)")["exit_code"] == 5
    assert oneshot(server, "print(1)")["exit_code"] == 0
    res = run(server, box, "import time\ntime.sleep(30)", timeout_s=1)
    assert res["status"] == "timeout" and res["exit_code"] is None, res


def test_output_capped_with_marker(server):
    name = create(server, output_max_bytes=1024)
    try:
        res = run(server, name, "print('a' * 100000)\nprint('end')")
        assert res["truncated"]["stdout"]["total"] > res["truncated"]["stdout"]["kept"]
        assert "bytes truncated" in res["stdout"], res["stdout"]
        assert len(res["stdout"]) < 4096 and res["stdout"].endswith("end\n")
    finally:
        server.request("DELETE", f"/v1/sandboxes/{name}")


def test_timeout_keeps_state(server, box):
    run(server, box, "kept = 41")
    res = run(server, box, "while True: pass", timeout_s=1)
    assert res["status"] == "timeout" and res["state_lost"] is False, res
    assert run(server, box, "kept + 1")["return_value"] == 42


def test_unstoppable_loop_loses_state(server, box):
    run(server, box, "lost = 1")
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass\n"
    t0 = time.monotonic()
    res = run(server, box, code, timeout_s=1)
    assert res["status"] == "timeout" and res["state_lost"] is True, res
    assert time.monotonic() - t0 < 30
    res = run(server, box, "'lost' in globals()")
    assert res["status"] == "ok" and res["return_value"] is False, res
    names = [v["name"] for v in server.ok("GET", var_path(box))["variables"]]
    assert "lost" not in names


def test_stopped_sandbox_restarts_with_an_empty_namespace(server, box):
    assert run(server, box, "v = 1")["restarted"] is False
    assert server.ok("POST", f"/v1/sandboxes/{box}/stop")["state"] == "stopped"
    res = run(server, box, "'v' in globals()")
    assert res["restarted"] is True and res["return_value"] is False, res
    assert run(server, box, "1")["restarted"] is False


def test_two_sandboxes_never_share_state(server, box):
    other = create(server)
    try:
        run(server, box, "secret = 'A'")
        assert run(server, other, "'secret' in globals()")["return_value"] is False
        run(server, other, "secret = 'B'")
        assert run(server, box, "secret")["return_value"] == "A"
        assert server.ok("GET", var_path(other, "secret"))["value"] == "B"
    finally:
        server.request("DELETE", f"/v1/sandboxes/{other}")


def test_reset(server, box):
    run(server, box, "a = 1")
    assert server.ok("POST", f"/v1/sandboxes/{box}/python/reset") == {"reset": True}
    res = run(server, box, "['a' in globals(), callable(llm_query)]")
    assert res["return_value"] == [False, True]


def test_requests_are_checked(server, box):
    r = server.request("POST", f"/v1/sandboxes/{box}/python", {"code": "1", "bogus": 1})
    assert r.status == 400 and "bogus" in r.json["error"]["message"]
    r = server.request("POST", "/v1/python", {"code": "1", "bogus": 1})
    assert r.status == 400 and "bogus" in r.json["error"]["message"]
    r = server.request("POST", f"/v1/sandboxes/{box}/python", {"timeout_s": 1})
    assert r.status == 400 and "code" in r.json["error"]["message"]
    r = server.request("POST", f"/v1/sandboxes/{new_name()}/python", {"code": "1"})
    assert r.status == 404
    r = server.request("POST", f"/v1/sandboxes/{box}/python", b'{"code": "1"}',
                       headers={"Content-Type": "text/plain"})
    assert r.status == 415
    assert server.request("GET", f"/v1/sandboxes/{box}/python").status == 405


# ---- variables ----

def test_variables_round_trip(server, box):
    value = {"k": [1, 2, {"z": None}], "s": "\u00e9"}
    r = server.request("PUT", var_path(box, "data"), value)
    assert r.status == 200 and r.json == {"name": "data"}, r.body
    got = server.ok("GET", var_path(box, "data"))
    assert got["name"] == "data" and got["type"] == "dict" and got["value"] == value
    assert run(server, box, "data['k'][2]")["return_value"] == {"z": None}
    r = server.request("PUT", var_path(box, "n"), b"3", headers={"Content-Type": "application/json"})
    assert r.status == 200
    assert server.ok("GET", var_path(box, "n"))["value"] == 3
    run(server, box, "_private = 1\npublic = object()\nimport os")
    listed = {v["name"]: v for v in server.ok("GET", var_path(box))["variables"]}
    assert {"data", "n", "public"} <= set(listed)
    assert not {"_private", "os", "llm_query", "tools"} & set(listed)
    assert listed["data"]["type"] == "dict" and listed["data"]["size"] == 2
    got = server.ok("GET", var_path(box, "public"))
    assert got["value"] is None and got["repr"].startswith("<object object")


def test_variable_errors(server, box):
    r = server.request("GET", var_path(box, "missing"))
    assert r.status == 404 and r.error_code() == "not_found"
    assert server.request("GET", var_path(box, "1bad")).status == 400
    assert server.request("GET", var_path(box, "class")).status == 400
    assert server.request("PUT", var_path(box, "x%2Dy"), {"a": 1}).status == 400
    r = server.request("PUT", var_path(box, "x"), b"<p>", headers={"Content-Type": "text/html"})
    assert r.status == 415 and r.error_code() == "unsupported_media_type"
    r = server.request("PUT", var_path(box, "x"), b"{bad", headers={"Content-Type": "application/json"})
    assert r.status == 400
    r = server.request("PUT", var_path(box, "x"), b"\xff\xfe",
                       headers={"Content-Type": "text/plain"})
    assert r.status == 400
    assert server.request("GET", var_path(new_name(), "x")).status == 404


def test_json_too_large_for_the_session_is_refused(server, box):
    run(server, box, "kept = 1")
    r = server.request("PUT", var_path(box, "big"), json.dumps("x" * (17 * MIB)).encode(),
                       headers={"Content-Type": "application/json"})
    assert r.status == 413 and "text/plain" in r.json["error"]["message"], r.body
    res = run(server, box, "kept")
    assert res["return_value"] == 1 and res["state_lost"] is False


def test_large_text_context(server):
    name = create(server, memory_mib=1024)
    try:
        body = b"a" * (100 * MIB - 2) + "\u00e9".encode()
        r = server.request("PUT", var_path(name, "context"), body,
                           headers={"Content-Type": "text/plain; charset=utf-8"}, timeout=300)
        assert r.status == 200, r.body
        res = run(server, name, "[len(context), context[-1], context[:3]]")
        assert res["return_value"] == [100 * MIB - 1, "\u00e9", "aaa"], res
    finally:
        server.request("DELETE", f"/v1/sandboxes/{name}")


def test_load_workspace_file(server, box):
    r = server.request("PUT", f"/v1/sandboxes/{box}/files/data/notes.txt", b"line1\nline2\n")
    assert r.status == 200, r.body
    r = server.request("POST", var_path(box, "notes") + "/load", {"path": "data/notes.txt"})
    assert r.status == 200 and r.json == {"name": "notes", "path": "data/notes.txt"}, r.body
    assert run(server, box, "notes.splitlines()")["return_value"] == ["line1", "line2"]
    r = server.request("POST", var_path(box, "notes") + "/load", {"path": "missing.txt"})
    assert r.status == 404 and "missing.txt" in r.json["error"]["message"], r.body
    r = server.request("POST", var_path(box, "notes") + "/load", {"path": "../etc/passwd"})
    assert r.status == 400
    r = server.request("POST", var_path(box, "notes") + "/load", {"path": "a", "mode": "x"})
    assert r.status == 400 and "mode" in r.json["error"]["message"]
    assert server.request("POST", var_path(box, "notes"), {"path": "a"}).status == 404


# ---- one-shot runs and the warm pool ----

def pool(server):
    return server.ok("GET", "/v1/pool")


def wait_pool_ready(server, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = pool(server)
        if stats["ready"] >= 1:
            return stats
        time.sleep(0.1)
    raise AssertionError(f"the pool did not fill: {pool(server)}")


def test_oneshot_runs_leave_nothing_behind(server):
    wait_pool_ready(server)
    first = oneshot(server, "open('/tmp/leak.txt', 'w').write('x')\n"
                            "open('/workspace/leak.txt', 'w').write('x')\n"
                            "leaked = True\n'written'")
    assert first["status"] == "ok" and first["return_value"] == "written", first
    assert first["pooled"] is True
    wait_pool_ready(server)
    second = oneshot(server, "import os\n[os.path.exists('/tmp/leak.txt'), "
                             "os.path.exists('/workspace/leak.txt'), 'leaked' in globals()]")
    assert second["return_value"] == [False, False, False], second
    assert second["pooled"] is True and second["run_id"] != first["run_id"]


def test_pool_statistics_move(server):
    before = wait_pool_ready(server)
    assert {"size", "ready", "hits", "misses", "cold"} <= set(before)
    assert oneshot(server, "1")["pooled"] is True
    after = pool(server)
    assert after["hits"] == before["hits"] + 1
    res = oneshot(server, "2", memory_mib=256)
    assert res["pooled"] is False and res["return_value"] == 2
    assert pool(server)["cold"] == after["cold"] + 1


def test_oneshot_files_and_artifacts(server):
    res = oneshot(server, "open('output/r.txt', 'w').write(open('in.txt').read().upper())",
                  files=[{"path": "in.txt", "content": "hey"}])
    assert res["status"] == "ok", res
    assert [a["name"] for a in res["artifacts"]] == ["r.txt"]
    r = server.request("GET", f"/v1/runs/{res['run_id']}/files/r.txt")
    assert r.status == 200 and r.body == b"HEY"


def test_oneshot_timeout(server):
    res = oneshot(server, "while True: pass", timeout_s=1)
    assert res["status"] == "timeout", res


# ---- streaming and host calls ----

def test_python_streams_output(server, box):
    calls, out, res = stream_run(
        server, f"/v1/sandboxes/{box}/python",
        {"code": "import time\nprint('one', flush=True)\ntime.sleep(0.5)\nprint('two')\n42"},
        answers=None)
    assert not calls and out == "one\ntwo\n"
    assert res["status"] == "ok" and res["return_value"] == 42 and res["restarted"] is False
    calls, out, res = stream_run(server, "/v1/python", {"code": "print('x')\n'y'"}, None)
    assert out == "x\n" and res["return_value"] == "y" and "run_id" in res


def test_host_calls_answered_by_the_client(server, box):
    def answers(call):
        if call["fn"] == "llm_query":
            return {"value": "42"}
        return {"value": {"hits": [call["kwargs"]["q"]]}}

    code = "a = llm_query('What is 6*7?', model='small')\nb = tools.search(q='cats')\n[a, b]"
    calls, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                               {"code": code, "host_functions": True}, answers)
    assert res["status"] == "ok", res
    assert res["return_value"] == ["42", {"hits": ["cats"]}]
    assert res["host_calls"] == 2
    assert calls[0]["fn"] == "llm_query" and calls[0]["args"] == ["What is 6*7?"]
    assert calls[0]["kwargs"] == {"model": "small"}
    assert calls[1]["fn"] == "tools.search" and calls[1]["args"] == []
    assert len({c["id"] for c in calls}) == 2
    r = answer(server, calls[0]["id"], {"value": "late"})
    assert r.status == 404 and r.error_code() == "not_found"


def test_host_calls_in_oneshot_runs_and_batches(server):
    calls, _, res = stream_run(
        server, "/v1/python",
        {"code": "llm_query_batched(['a', 'b'])", "host_functions": True},
        lambda call: {"value": [p.upper() for p in call["args"][0]]})
    assert calls[0]["fn"] == "llm_query_batched" and calls[0]["args"] == [["a", "b"]]
    assert res["return_value"] == ["A", "B"], res


def test_host_call_error_answer_raises(server, box):
    code = ("try:\n    llm_query('x')\nexcept HostCallError as e:\n    caught = str(e)\n"
            "caught")
    _, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                           {"code": code, "host_functions": True},
                           lambda call: {"error": "model unavailable"})
    assert res["status"] == "ok" and res["return_value"] == "model unavailable", res
    _, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                           {"code": "llm_query('x')", "host_functions": True},
                           lambda call: {"error": "model unavailable"})
    assert res["status"] == "error" and res["error"]["type"] == "HostCallError"


def test_host_calls_carry_nul_and_refuse_what_cannot_cross(server, box):
    deep = "x"
    for _ in range(600):
        deep = [deep]

    def answers(call):
        if call["args"] == ["p\x00"]:
            return {"value": "a\x00"}
        return {"value": deep}

    code = ("a = llm_query('p\\x00')\n"
            "try:\n    llm_query('deep')\nexcept HostCallError as e:\n    b = str(e)\n"
            "try:\n    llm_query(2**64)\nexcept TypeError as e:\n    c = str(e)\n"
            "[a, b, c]")
    calls, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                               {"code": code, "host_functions": True}, answers)
    assert res["status"] == "ok" and res["state_lost"] is False, res
    assert [c["args"] for c in calls] == [["p\x00"], ["deep"]]  # 2**64 never left
    a, b, c = res["return_value"]
    assert a == "a\x00" and "nests" in b and "64 bits" in c, res


def test_host_never_acts_on_a_name_cut_at_nul(server, box):
    """Code that writes its own host_call on the channel, its fn with NUL:
    the server answers "malformed" rather than call what the name's C text
    says (tools.search)."""
    code = ("import json, os, struct\n"
            "msg = {'op': 'host_call', 'id': 999, 'fn': 'tools.search\\x00x', 'args': [],"
            " 'kwargs': {}}\n"
            "data = json.dumps(msg).encode()\n"
            "os.write(3, struct.pack('>II', len(data), 0) + data)\n"
            "n, _ = struct.unpack('>II', os.read(3, 8))\n"
            "json.loads(os.read(3, n))")
    calls, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                               {"code": code, "host_functions": True},
                               lambda call: {"value": "called"})
    assert not calls, calls
    assert res["return_value"] == {"op": "host_reply", "id": 999, "error": "malformed host call"}
    assert run(server, box, "1")["state_lost"] is False


def test_host_budget(server, box):
    code = "out = []\nfor i in range(3):\n    out.append(llm_query(str(i)))\n"
    calls, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                               {"code": code, "host_functions": True, "host_budget": 2},
                               lambda call: {"value": "ok " + call["args"][0]})
    assert len(calls) == 2
    assert res["status"] == "error" and res["error"]["type"] == "HostCallBudgetExceeded", res
    assert run(server, box, "out")["return_value"] == ["ok 0", "ok 1"]


def test_extra_host_functions(server, box):
    calls, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                               {"code": "lookup(1, k='v')", "host_functions": ["lookup"]},
                               lambda call: {"value": "found"})
    assert calls[0]["fn"] == "lookup" and calls[0]["args"] == [1]
    assert calls[0]["kwargs"] == {"k": "v"}
    assert res["return_value"] == "found", res


def test_host_calls_without_host_functions_fail_clearly(server, box):
    res = run(server, box, "llm_query('hi')")
    assert res["status"] == "error" and res["error"]["type"] == "HostCallError", res
    msg = res["error"]["message"]
    assert "host_functions" in msg and "text/event-stream" in msg
    calls, _, res = stream_run(server, f"/v1/sandboxes/{box}/python",
                               {"code": "tools.search(q=1)"}, None)
    assert not calls and res["error"]["type"] == "HostCallError"
    assert "host_functions" in res["error"]["message"]
    res = oneshot(server, "llm_query('hi')")
    assert res["error"]["type"] == "HostCallError" and "host_functions" in res["error"]["message"]


def test_host_functions_requests_are_checked(server, box):
    path = f"/v1/sandboxes/{box}/python"
    r = server.request("POST", path, {"code": "1", "host_functions": True})
    assert r.status == 400 and "text/event-stream" in r.json["error"]["message"]
    for bad in ("yes", 1, ["1bad"], ["a-b"], [7], ["x" * 65], ["f"] * 65):
        r = server.request("POST", path, {"code": "1", "host_functions": bad},
                           headers={"Accept": "text/event-stream"})
        assert r.status == 400 and "host_functions" in r.json["error"]["message"], bad
    for off in (False, None):
        assert run(server, box, "1", host_functions=off)["return_value"] == 1


def test_host_call_answers_are_checked(server):
    unknown = uuid.uuid4().hex
    assert answer(server, unknown, {"value": 1}).status == 404
    assert answer(server, "not-an-id", {"value": 1}).status == 404
    s = Stream(server, "/v1/python", {"code": "llm_query('x')", "host_functions": True})
    try:
        event, call = next(s.events())
        assert event == "host_call"
        for bad in ({}, {"value": 1, "error": "e"}, {"error": 3}, {"value": 1, "x": 2}):
            r = answer(server, call["id"], bad)
            assert r.status == 400, (bad, r.body)
        r = server.request("POST", f"/v1/host_calls/{call['id']}", b'{"value": 1}',
                           headers={"Content-Type": "text/plain"})
        assert r.status == 415
        r = answer(server, call["id"], {"value": "x" * (8 * MIB)})
        assert r.status == 413 and r.error_code() == "too_large"
        assert answer(server, call["id"], {"value": None}).status == 200
        r = answer(server, call["id"], {"value": 2})
        assert r.status in (404, 409)
        result = [d for e, d in s.events() if e == "result"]
        assert result and result[0]["status"] == "ok" and result[0]["return_value"] is None
    finally:
        s.close()


def test_client_leaving_during_a_host_call_cancels_the_run(server, box):
    run(server, box, "kept = 'yes'")
    s = Stream(server, f"/v1/sandboxes/{box}/python",
               {"code": "llm_query('never answered')", "host_functions": True})
    event, call = next(s.events())
    assert event == "host_call"
    s.close()
    # This run waits for the session the cancelled run held. Had the
    # client's leaving not cancelled it, the host call would hold it for 10
    # minutes, and run()'s 120 s read timeout fails the test.
    res = run(server, box, "kept")
    assert res["return_value"] == "yes", res
    assert answer(server, call["id"], {"value": 1}).status == 404


def test_host_calls_belong_to_their_tenant(cage, tmp_path):
    # drain_timeout_s: a stopping server waits that long for running calls
    # (the last one waits for a host call nobody answers), then cancels them.
    s = Server(tmp_path, tenants={"alice": TOKEN_A, "bob": TOKEN_B},
               extra={"pool_size": 0, "drain_timeout_s": 2})
    try:
        stream = Stream(s, "/v1/python", {"code": "llm_query('x')", "host_functions": True},
                        token=TOKEN_A)
        assert stream.resp.status == 200
        event, call = next(stream.events())
        assert event == "host_call"
        r = answer(s, call["id"], {"value": "from bob"}, token=TOKEN_B)
        assert r.status == 404
        assert answer(s, call["id"], {"value": "from alice"}, token=TOKEN_A).status == 200
        result = [d for e, d in stream.events() if e == "result"]
        assert result[0]["return_value"] == "from alice"
        stream.close()
        # A server stopping while a host call waits ends the wait and exits cleanly.
        stream = Stream(s, "/v1/python", {"code": "llm_query('x')", "host_functions": True},
                        token=TOKEN_A)
        assert next(stream.events())[0] == "host_call"
        t0 = time.monotonic()
        s.stop()
        assert time.monotonic() - t0 < 20
        stream.close()
    finally:
        s.stop()


# ---- the OpenAPI document ----

def test_openapi_documents_the_python_routes(server):
    doc = server.ok("GET", "/v1/openapi.json")
    found = {(m, p) for p, ops in doc["paths"].items() for m in ops if m != "parameters"}
    assert {
        ("post", "/v1/python"), ("post", "/v1/sandboxes/{name}/python"),
        ("post", "/v1/sandboxes/{name}/python/reset"),
        ("get", "/v1/sandboxes/{name}/python/variables"),
        ("get", "/v1/sandboxes/{name}/python/variables/{var}"),
        ("put", "/v1/sandboxes/{name}/python/variables/{var}"),
        ("post", "/v1/sandboxes/{name}/python/variables/{var}/load"),
        ("get", "/v1/pool"), ("post", "/v1/host_calls/{id}"),
    } <= found


def server_fds(s):
    import os
    return len(os.listdir(f"/proc/{s.proc.pid}/fd"))


def test_idle_sessions_hold_few_fds_and_wake_intact(cage, tmp_path):
    """An idle sandbox with a session costs the server at most 4 fds (pid 1's
    pidfd, init's socket, the parked pipes and channel), yet its interpreter
    keeps running: its writes to stdout and stderr while idle do not fail,
    and the next call sees its state."""
    s = Server(tmp_path, extra={"pool_size": 0})  # only these sandboxes hold fds
    try:
        # The first sandbox starts the template the others are forked from,
        # which the server keeps (and its fds) once the sandbox is gone.
        s.ok("POST", "/v1/sandboxes", {"name": "first"})
        assert s.request("DELETE", "/v1/sandboxes/first").status in (200, 204)
        base = server_fds(s)
        names = []
        for i in range(6):
            n = new_name()
            s.ok("POST", "/v1/sandboxes", {"name": n})
            code = (f"import threading, sys, time\nx = {i}\nticks = []\nerrors = []\n"
                    "stop = threading.Event()\n"
                    "def tick():\n"
                    "    while not stop.is_set():\n"
                    "        try:\n"
                    "            print('t', flush=True); sys.stderr.write('t\\n'); sys.stderr.flush()\n"
                    "            ticks.append(1)\n"
                    "        except Exception as e:\n"
                    "            errors.append(repr(e)); return\n"
                    "        time.sleep(0.05)\n"
                    "threading.Thread(target=tick, daemon=True).start()\n")
            r = s.ok("POST", f"/v1/sandboxes/{n}/python", {"code": code})
            assert r["status"] == "ok", r
            names.append(n)
        # The server parks idle sandboxes on its own: wait until it has.
        deadline = time.monotonic() + 60
        while (server_fds(s) - base) / len(names) > 4:
            assert time.monotonic() < deadline, f"{server_fds(s) - base} fds for {len(names)} idle"
            time.sleep(0.2)
        for n in names:
            seen = s.ok("POST", f"/v1/sandboxes/{n}/python", {"code": "len(ticks)"})["return_value"]
        time.sleep(0.5)  # the last one ticks on while parked (others already woke)
        for i, n in enumerate(names):
            r = s.ok("POST", f"/v1/sandboxes/{n}/python",
                     {"code": "stop.set()\n(x + 1, errors, len(ticks) > 0)"})
            assert r["status"] == "ok" and r["return_value"] == [i + 1, [], True], r
        assert seen > 0
        for n in names:
            assert s.request("DELETE", f"/v1/sandboxes/{n}").status in (200, 204)
    finally:
        s.stop()


def test_env_of_one_run(server, box):
    """`env` is set in os.environ for that run only; what it replaced comes back."""
    run(server, box, "import os\nos.environ['KEEP'] = 'before'")
    r = run(server, box, "import os\n[os.environ['KEEP'], os.environ['NEW']]",
            env={"KEEP": "during", "NEW": "x"})
    assert r["return_value"] == ["during", "x"], r
    r = run(server, box, "[os.environ.get('KEEP'), os.environ.get('NEW')]")
    assert r["return_value"] == ["before", None], r
    for bad in ({"1X": "v"}, {"A=B": "v"}, {"X": 1}, ["X"]):
        r = server.request("POST", f"/v1/sandboxes/{box}/python", {"code": "1", "env": bad})
        assert r.status == 400 and "env" in r.json["error"]["message"], (bad, r.body)
