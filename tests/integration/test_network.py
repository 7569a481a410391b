"""Network egress of sandboxes (the contract in docs/NETWORK.md): the proxy
codecage serves at 127.0.0.1:3128 inside each sandbox's network namespace,
the allowlists (the server's network.allow, narrowed by a sandbox's
`network`, and changed by a SIGHUP reload), the address checks, limits,
audit records, and `files` by URL downloaded by the server.

All traffic stays on 127.0.0.x: the server runs with its own /etc/hosts
(tests/netlib.py) that sends allowed.test & co. to local origin servers,
which record every request they get, so "not reached" is checked at the
origin, not only from the client's side."""
import json
import os
import time
import urllib.parse

import pytest

import netlib
from netlib import CA_PATH, NO_PROXY, PROXY, PROXY_VARS, connect, get, marker, raw_argv, results_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

RUN_TIMEOUT = 20  # timeout_s of every sandbox run here


@pytest.fixture(scope="module")
def server(world, tmp_path_factory):
    """The suite's server: every test name allowed on the origins' ports,
    127.0.0.1 reachable (the origins), 127.0.0.2 not (rebind.test)."""
    s = world.server(tmp_path_factory.mktemp("net-server"))
    yield s
    s.stop()


# --- helpers ------------------------------------------------------------------

def run(server, network=None, files=None, **body):
    """POST /v1/run; returns the result (asserting a 200)."""
    req = {"timeout_s": RUN_TIMEOUT, **body}
    if network is not None:
        req["network"] = network
    if files is not None:
        req["files"] = files
    r = server.request("POST", "/v1/run", req)
    assert r.status == 200, (r.status, r.body)
    return r.json


def sh(server, command, network=None, files=None, **body):
    return run(server, network, files, command=command, **body)


def python(server, code, network=None, files=None, **body):
    req = {"code": code, "timeout_s": RUN_TIMEOUT, **body}
    if network is not None:
        req["network"] = network
    if files is not None:
        req["files"] = files
    r = server.request("POST", "/v1/python", req)
    assert r.status == 200, (r.status, r.body)
    return r.json


def raw(server, ops, network):
    """Runs the raw proxy client in a one-shot sandbox; its per-op results."""
    return results_of(run(server, network, argv=raw_argv(ops)))


def curl(url, *args):
    """A shell line: curl through the proxy env, printing the status code
    (the CONNECT status for https) then the body."""
    fmt = "%{http_connect} %{http_code}\\n" if url.startswith("https") else "%{http_code}\\n"
    extra = " ".join(args)
    return (f"curl -sS --max-time 10 {extra} -o /tmp/body -w '{fmt}' '{url}'; "
            f"echo \"rc=$?\"; cat /tmp/body 2>/dev/null")


def assert_denied_body(body, *words):
    assert body.startswith("codecage egress proxy: "), body
    assert body.endswith("\n"), body
    for w in words:
        assert w in body, (w, body)


# --- allowed traffic ------------------------------------------------------------

def test_allowed_host_over_http_with_curl(server, world):
    m = marker()
    r = sh(server, curl(world.http.url("allowed.test", f"/hello?{m}")),
           network=[f"allowed.test:{world.P}"])
    assert r["status"] == "ok", r
    assert r["stdout"] == "200\nrc=0\nhello from http-origin", r
    seen = world.http.matching(m)
    assert len(seen) == 1, seen
    assert seen[0]["host"] in ("allowed.test", f"allowed.test:{world.P}"), seen
    assert seen[0]["peer"] == "127.0.0.1"


def test_allowed_host_over_https_with_curl(server, world):
    m = marker()
    r = sh(server, curl(world.https.url("allowed.test", f"/hello?{m}"), "--cacert", CA_PATH),
           network=[f"allowed.test:{world.T}"], files=[world.tls.file_entry()])
    assert r["stdout"] == "200 200\nrc=0\nhello from tls-origin", r
    assert len(world.https.matching(m)) == 1
    assert "allowed.test" in world.https.snis


def test_python_urllib_http_and_https_in_run_python(server, world):
    m = marker()
    code = f"""
import ssl, urllib.request
ctx = ssl.create_default_context(cafile={CA_PATH!r})
a = urllib.request.urlopen({world.http.url("allowed.test", "/hello?" + m)!r}, timeout=10).read().decode()
b = urllib.request.urlopen({world.https.url("allowed.test", "/hello?" + m)!r}, context=ctx,
                           timeout=10).read().decode()
[a, b]
"""
    r = python(server, code, network=[f"allowed.test:{world.P}", f"allowed.test:{world.T}"],
               files=[world.tls.file_entry()])
    assert r["status"] == "ok", r
    assert r["return_value"] == ["hello from http-origin", "hello from tls-origin"], r
    assert len(world.http.matching(m)) == 1 and len(world.https.matching(m)) == 1


def test_post_body_passes_both_ways(server, world):
    n = 300000
    m = marker()
    head = (f"POST {world.http.url('allowed.test', '/echo?' + m)} HTTP/1.1\r\n"
            f"Host: allowed.test:{world.P}\r\nContent-Length: {n}\r\n\r\n")
    res = raw(server, [{"op": "open"}, {"op": "send", "data": head, "fill": n},
                       {"op": "response"}], network=[f"allowed.test:{world.P}"])
    assert res[2]["status"] == 200 and res[2]["body_len"] == n, \
        {k: v for k, v in res[2].items() if k != "body"}
    assert res[2]["body"] == "u" * 4000
    assert world.http.matching(m)[0]["body_len"] == n


# --- denied traffic ---------------------------------------------------------------

def test_denied_host_gets_403_naming_it(server, world):
    m = marker()
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(world.http.url("other.test", f"/hello?{m}"))},
                       {"op": "response"},
                       {"op": "open", "id": "t"},
                       {"op": "send", "id": "t", "data": connect(f"other.test:{world.T}")},
                       {"op": "response", "id": "t", "connect": True}],
              network=[f"allowed.test:{world.P}", f"allowed.test:{world.T}"])
    for resp in (res[2], res[5]):
        assert resp["status"] == 403 and resp["reason"] == "Forbidden", resp
        assert resp["headers"].get("content-type", "").startswith("text/plain"), resp
        assert_denied_body(resp["body"], '"other.test"', "allowlist")
    assert world.http.matching(m) == []


def test_denied_host_with_curl_http_and_https(server, world):
    m = marker()
    net = [f"allowed.test:{world.P}", f"allowed.test:{world.T}"]
    r = sh(server, curl(world.http.url("other.test", f"/hello?{m}")), network=net)
    status, rest = r["stdout"].split("\n", 1)
    assert status == "403", r
    assert_denied_body(rest.split("\n", 1)[1], "other.test")
    r = sh(server, curl(world.https.url("other.test", f"/hello?{m}"), "--cacert", CA_PATH),
           network=net, files=[world.tls.file_entry()])
    assert r["stdout"].startswith("403 "), r
    assert "rc=0" not in r["stdout"], r
    assert world.http.matching(m) == [] and world.https.matching(m) == []


def test_python_urllib_denied_host_raises_403(server, world):
    code = f"""
import urllib.error, urllib.request
try:
    urllib.request.urlopen({world.http.url("other.test", "/hello")!r}, timeout=10)
    out = "reached"
except urllib.error.HTTPError as e:
    out = [e.code, e.read().decode()]
out
"""
    r = python(server, code, network=[f"allowed.test:{world.P}"])
    assert r["return_value"][0] == 403, r
    assert_denied_body(r["return_value"][1], "other.test")


DIRECT = """
import json, socket, sys, time
out = {}
for name, addr in [("origin", ("127.0.0.1", int(sys.argv[1]))), ("public", ("192.0.2.1", 80)),
                   ("public6", ("2001:db8::1", 80))]:
    t0 = time.monotonic()
    try:
        s = socket.socket(socket.AF_INET6 if ":" in addr[0] else socket.AF_INET)
        s.settimeout(3)
        s.connect(addr)
        out[name] = ["connected", 0]
    except OSError as e:
        out[name] = [type(e).__name__ + ": " + str(e), time.monotonic() - t0]
out["links"] = sorted(name for _, name in socket.if_nameindex())
print(json.dumps(out))
"""


@pytest.mark.parametrize("with_network", [False, True], ids=["no-network", "network"])
def test_direct_connections_fail_fast(server, world, with_network):
    """Without the proxy there is no way out: the origin's port on the
    sandbox's own loopback has nobody listening, and there is no route to
    anything else (fails at once, not after a timeout)."""
    net = [f"allowed.test:{world.P}"] if with_network else []
    r = run(server, net, argv=[netlib.SANDBOX_PY, "-c", DIRECT, str(world.P)])
    out = netlib.last_json(r["stdout"])
    assert out, r
    assert out["origin"][0].startswith("ConnectionRefusedError"), out
    for name in ("public", "public6"):
        assert out[name][0] != "connected", out
        assert out[name][1] < 1.5, f"{name}: took {out[name][1]:.1f}s, expected to fail at once"
    assert out["links"] == ["lo"], out


def test_ip_literal_is_denied(server, world):
    m = marker()
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(f"http://127.0.0.1:{world.P}/hello?{m}")},
                       {"op": "response"},
                       {"op": "open", "id": "t"},
                       {"op": "send", "id": "t", "data": connect(f"127.0.0.1:{world.T}")},
                       {"op": "response", "id": "t", "connect": True}],
              network=["*", f"allowed.test:{world.P}", f"allowed.test:{world.T}"])
    for resp in (res[2], res[5]):
        assert resp["status"] == 403, resp
        assert_denied_body(resp["body"], "IP address 127.0.0.1")
    assert world.http.matching(m) == []


def test_wrong_port_is_denied(server, world):
    m = marker()
    # an entry with a port allows that port only ...
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(f"http://allowed.test:{world.T}/hello?{m}")},
                       {"op": "response"},
                       {"op": "open", "id": "b"},
                       {"op": "send", "id": "b", "data": connect("allowed.test:22")},
                       {"op": "response", "id": "b", "connect": True}],
              network=[f"allowed.test:{world.P}"])
    assert res[2]["status"] == 403, res[2]
    assert_denied_body(res[2]["body"], f"port {world.T}", '"allowed.test"')
    assert res[5]["status"] == 403, res[5]
    assert_denied_body(res[5]["body"], "port 22", '"allowed.test"')
    # ... and one without a port allows 80 and 443 only
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(world.http.url("allowed.test", f"/hello?{m}"))},
                       {"op": "response"}], network=["allowed.test"])
    assert res[2]["status"] == 403, res[2]
    assert_denied_body(res[2]["body"], f"port {world.P}", '"allowed.test"')
    assert world.http.matching(m) == [] and world.https.matching(m) == []


@pytest.mark.parametrize("entry", ["allowed.test", "*.allowed.test"])
def test_lookalike_names_are_denied(server, world, entry):
    m = marker()
    names = ["allowed.test.evil.test", "evilallowed.test", "xallowed.test"]
    ops = []
    for i, name in enumerate(names):
        ops += [{"op": "open", "id": str(i)},
                {"op": "send", "id": str(i), "data": get(world.http.url(name, f"/hello?{m}"))},
                {"op": "response", "id": str(i)}]
    res = raw(server, ops, network=[f"{entry}:{world.P}"])
    for i, name in enumerate(names):
        resp = res[3 * i + 2]
        assert resp["status"] == 403, (name, resp)
        assert_denied_body(resp["body"], f'"{name}"')
    assert world.http.matching(m) == []


def test_wildcard_allows_subdomains_not_the_apex(server, world):
    m = marker()
    net = [f"*.allowed.test:{world.P}", f"*.allowed.test:{world.T}"]
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(world.http.url("sub.allowed.test", f"/hello?{m}"))},
                       {"op": "response"},
                       {"op": "send", "data": get(world.http.url("allowed.test", f"/hello?{m}"))},
                       {"op": "response"}], network=net)
    assert res[2]["status"] == 200 and res[2]["body"] == "hello from http-origin", res[2]
    assert res[4]["status"] == 403, res[4]
    assert_denied_body(res[4]["body"], '"allowed.test"')
    assert world.http.hosts_for(m) == ["sub.allowed.test"]
    # and over TLS, with curl
    r = sh(server, curl(world.https.url("sub.allowed.test", "/hello"), "--cacert", CA_PATH),
           network=net, files=[world.tls.file_entry()])
    assert r["stdout"] == "200 200\nrc=0\nhello from tls-origin", r


# --- layering: a sandbox may only narrow the server's list -------------------------

@pytest.fixture(scope="module")
def narrow_server(world, tmp_path_factory):
    s = world.server(tmp_path_factory.mktemp("net-narrow"), allow=[f"allowed.test:{world.P}"])
    yield s
    s.stop()


@pytest.mark.parametrize("route", ["/v1/run", "/v1/python", "/v1/sandboxes"])
@pytest.mark.parametrize("entry", ["other.test:{P}", "*", "allowed.test", "*.allowed.test:{P}",
                                   "allowed.test:{T}", "127.0.0.1:{P}"])
def test_a_sandbox_cannot_ask_for_more_than_the_server_allows(narrow_server, world, route, entry):
    entry = entry.format(P=world.P, T=world.T)
    body = {"network": [f"allowed.test:{world.P}", entry]}
    if route == "/v1/run":
        body["command"] = "true"
    elif route == "/v1/python":
        body["code"] = "1"
    else:
        body["name"] = "wide" + os.urandom(4).hex()
    r = narrow_server.request("POST", route, body)
    assert r.status == 403, (r.status, r.body)
    assert r.json["error"]["code"] == "forbidden", r.body
    assert entry in r.json["error"]["message"] and "network" in r.json["error"]["message"], r.body
    if route == "/v1/sandboxes":
        assert narrow_server.ok("GET", "/v1/sandboxes")["sandboxes"] == []


def test_the_exact_server_entry_works(narrow_server, world):
    r = sh(narrow_server, curl(world.http.url("allowed.test")), network=[f"allowed.test:{world.P}"])
    assert r["stdout"] == "200\nrc=0\nhello from http-origin", r


def test_cidr_ranges_are_config_only(server):
    r = server.request("POST", "/v1/run", {"command": "true", "network": ["127.0.0.0/8"]})
    assert r.status in (400, 403), (r.status, r.body)
    assert "network" in r.json["error"]["message"], r.body


def test_empty_network_means_no_proxy_at_all(server):
    probe = ("import json, os, socket\n"
             "s = socket.socket(); s.settimeout(3)\n"
             "try:\n    s.connect(('127.0.0.1', 3128)); up = True\n"
             "except OSError:\n    up = False\n"
             "print(json.dumps({'env': {k: v for k, v in os.environ.items() if 'proxy' in k.lower()},"
             " 'listening': up}))\n")
    for body in ({}, {"network": []}):
        out = netlib.last_json(run(server, argv=[netlib.SANDBOX_PY, "-c", probe], **body)["stdout"])
        assert out == {"env": {}, "listening": False}, out


def test_proxy_env_vars_are_set(server, world):
    net = [f"allowed.test:{world.P}"]
    r = sh(server, "env", network=net)
    env = dict(line.split("=", 1) for line in r["stdout"].splitlines() if "=" in line)
    for var in PROXY_VARS:
        assert env.get(var) == PROXY, (var, env)
    assert env.get("NO_PROXY") == NO_PROXY and env.get("no_proxy") == NO_PROXY, env
    r = python(server, "import os\n{k: v for k, v in os.environ.items() if 'proxy' in k.lower()}",
               network=net)
    assert r["return_value"] == {**{v: PROXY for v in PROXY_VARS},
                                 "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}, r


# --- redirects, audit, limits -----------------------------------------------------

def test_redirects_are_returned_not_followed(server, world):
    m = marker()
    for target in (world.http.url("allowed.test", f"/hello?{m}"),
                   world.http.url("other.test", f"/hello?{m}")):
        url = world.http.url("allowed.test", "/redirect?to=" + urllib.parse.quote(target, safe=""))
        r = sh(server, f"curl -sS --max-time 10 -o /dev/null -w '%{{http_code}} %{{redirect_url}}' '{url}'",
               network=[f"allowed.test:{world.P}"])
        assert r["stdout"] == f"302 {target}", r
    time.sleep(0.2)
    assert world.http.matching(m) == [], "the proxy followed a redirect"


def _wait_records(server, count, **match):
    return netlib.wait_until(lambda: len(netlib.audit_network(server, **match)) >= count
                           and netlib.audit_network(server, **match), timeout=5)


def test_every_decision_is_audited(server, world):
    m = marker()
    name = "aud" + os.urandom(4).hex()
    server.ok("POST", "/v1/sandboxes", {
        "name": name, "labels": {"team": "net"},
        "network": [f"allowed.test:{world.P}", f"allowed.test:{world.T}"]})
    server.ok("POST", f"/v1/sandboxes/{name}/files", world.tls.file_entry())
    script = "; ".join([
        curl(world.http.url("allowed.test", f"/bytes?n=1234&{m}")),
        curl(world.https.url("allowed.test", f"/hello?{m}"), "--cacert", CA_PATH),
        curl(world.http.url("other.test", f"/hello?{m}")),
        curl(world.https.url("blocked.test", f"/hello?{m}"), "--cacert", CA_PATH)])
    r = server.ok("POST", f"/v1/sandboxes/{name}/exec", {"script": script})
    assert r["stdout"].count("rc=0") == 3, r  # the denied CONNECT fails curl
    recs = _wait_records(server, 4, sandbox=name)
    assert recs and len(recs) == 4, netlib.audit_network(server)
    for rec in recs:
        assert rec["tenant"] == "default" and rec["labels"] == {"team": "net"}, rec
    allow = [x for x in recs if x["event"] == "network.allow"]
    deny = [x for x in recs if x["event"] == "network.deny"]
    http_allow = [x for x in allow if x["kind"] == "http"]
    conn_allow = [x for x in allow if x["kind"] == "connect"]
    assert len(http_allow) == 1 and len(conn_allow) == 1, allow
    h = http_allow[0]
    assert (h["host"], h["port"], h["method"], h["address"]) == \
        ("allowed.test", world.P, "GET", "127.0.0.1"), h
    assert h["bytes_received"] >= 1234 and h["bytes_sent"] > 0, h
    assert isinstance(h["duration_ms"], int) and h["duration_ms"] >= 0, h
    c = conn_allow[0]
    assert (c["host"], c["port"], c["address"]) == ("allowed.test", world.T, "127.0.0.1"), c
    assert c["bytes_received"] > 0 and c["bytes_sent"] > 0, c
    kinds = sorted((x["kind"], x["host"], x["port"]) for x in deny)
    assert kinds == [("connect", "blocked.test", world.T), ("http", "other.test", world.P)], deny
    for x in deny:
        assert x["host"] in x["reason"], x


def test_one_shot_runs_are_audited_without_a_sandbox_name(server, world):
    m = marker()
    r = sh(server, curl(world.http.url("other.test", f"/hello?{m}")),
           network=[f"allowed.test:{world.P}"], labels={"k": m})
    recs = _wait_records(server, 1, event="network.deny", labels={"k": m})
    assert recs, netlib.audit_network(server)
    rec = recs[0]
    assert rec["sandbox"] is None and rec["tenant"] == "default", rec
    assert (rec["kind"], rec["host"], rec["port"]) == ("http", "other.test", world.P), rec
    if "run_id" in rec:
        assert rec["run_id"] == r["run_id"], rec


@pytest.fixture(scope="module")
def limited_server(world, tmp_path_factory):
    s = world.server(tmp_path_factory.mktemp("net-limits"), max_connections=2,
                     max_bytes=1 << 20)
    yield s
    s.stop()


def slow_connections(world, n, seconds, m):
    ops = []
    for i in range(n):
        ops += [{"op": "open", "id": str(i)},
                {"op": "send", "id": str(i),
                 "data": get(world.http.url("allowed.test", f"/slow?s={seconds}&{m}&c={i}"))},
                {"op": "sleep", "s": 0.2}]
    ops += [{"op": "response", "id": str(i), "timeout": 10} for i in range(n)]
    return ops


def test_connection_limit(limited_server, world):
    m = marker()
    net = [f"allowed.test:{world.P}"]
    res = raw(limited_server, slow_connections(world, 3, 2, m), network=net)
    resp = res[-3:]
    assert [x.get("status") for x in resp[:2]] == [200, 200], resp
    assert resp[2]["status"] == 403, resp
    assert_denied_body(resp[2]["body"], "connections")
    # the limit is on concurrent connections: once they are done, more may come
    res = raw(limited_server, [{"op": "open"},
                               {"op": "send", "data": get(world.http.url("allowed.test"))},
                               {"op": "response"}], network=net)
    assert res[2]["status"] == 200, res
    recs = _wait_records(limited_server, 1, event="network.deny")
    assert any("connections" in x["reason"] for x in recs), recs


def test_byte_limit(limited_server, world):
    n = 4 << 20
    res = raw(limited_server, [{"op": "open"},
                               {"op": "send", "data": get(world.http.url("allowed.test", f"/bytes?n={n}"))},
                               {"op": "response", "timeout": 10},
                               {"op": "open", "id": "b"},
                               {"op": "send", "id": "b", "data": get(world.http.url("allowed.test"))},
                               {"op": "response", "id": "b"}],
              network=[f"allowed.test:{world.P}"])
    big = res[2]
    assert not big.get("complete") and big["body_len"] < n, \
        {k: v for k, v in big.items() if k != "body"}
    assert big["body_len"] <= (1 << 20) + 256 * 1024, big["body_len"]
    assert res[5]["status"] == 403, res[5]
    assert_denied_body(res[5]["body"], "bytes")


def test_limits_are_per_sandbox_run(limited_server, world):
    """A fresh run starts with fresh counters: 900 KiB twice, in two runs."""
    for _ in range(2):
        res = raw(limited_server, [{"op": "open"},
                                   {"op": "send", "data": get(world.http.url("allowed.test",
                                                                             "/bytes?n=921600"))},
                                   {"op": "response"}], network=[f"allowed.test:{world.P}"])
        assert res[2]["status"] == 200 and res[2]["body_len"] == 921600


def test_idle_timeout(world, tmp_path):
    s = world.server(tmp_path, idle_timeout_s=1)
    try:
        res = raw(s, [{"op": "open"},
                      {"op": "send", "data": get(world.http.url("allowed.test"))},
                      {"op": "response"},
                      {"op": "recv_close", "timeout": 5},
                      {"op": "open", "id": "t"},
                      {"op": "send", "id": "t", "data": connect(f"allowed.test:{world.T}")},
                      {"op": "response", "id": "t", "connect": True},
                      {"op": "recv_close", "id": "t", "timeout": 5}],
                  network=[f"allowed.test:{world.P}", f"allowed.test:{world.T}"])
    finally:
        s.stop()
    assert res[2]["status"] == 200, res[2]
    assert res[6]["status"] == 200, res[6]
    for idle in (res[3], res[7]):
        assert idle["closed"] and 500 <= idle["ms"] <= 4000, idle


# --- named sandboxes --------------------------------------------------------------

def test_named_sandbox_network_survives_stop_and_start(server, world):
    name = "net" + os.urandom(4).hex()
    info = server.ok("POST", "/v1/sandboxes", {"name": name, "network": [f"allowed.test:{world.P}"]})
    assert info["spec"]["network"] == [f"allowed.test:{world.P}"], info
    cmd = curl(world.http.url("allowed.test"))
    want = "200\nrc=0\nhello from http-origin"
    exe = f"/v1/sandboxes/{name}/exec"
    assert server.ok("POST", exe, {"script": cmd})["stdout"] == want
    assert server.ok("POST", f"/v1/sandboxes/{name}/stop")["state"] == "stopped"
    assert server.ok("POST", f"/v1/sandboxes/{name}/start")["state"] == "running"
    assert server.ok("POST", exe, {"script": cmd})["stdout"] == want
    # an exec that restarts a stopped sandbox gets the proxy too
    server.ok("POST", f"/v1/sandboxes/{name}/stop")
    r = server.ok("POST", exe, {"script": cmd})
    assert r["restarted"] is True and r["stdout"] == want, r
    # and the session of the sandbox
    r = server.ok("POST", f"/v1/sandboxes/{name}/python", {"code": (
        "import urllib.request\n"
        f"urllib.request.urlopen({world.http.url('allowed.test')!r}, timeout=10).read().decode()")})
    assert r["return_value"] == "hello from http-origin", r
    server.ok("DELETE", f"/v1/sandboxes/{name}")


def test_the_proxy_survives_a_server_restart(world, tmp_path):
    s = world.server(tmp_path)
    try:
        s.ok("POST", "/v1/sandboxes", {"name": "keep", "network": [f"allowed.test:{world.P}"]})
        s.stop()
        s.start()
        r = s.ok("POST", "/v1/sandboxes/keep/exec", {"script": curl(world.http.url("allowed.test"))})
        assert r["stdout"] == "200\nrc=0\nhello from http-origin", r
    finally:
        s.stop()


def test_a_reload_changes_the_allowlist_of_new_sandboxes(world, tmp_path):
    """network.allow changed by SIGHUP: a host allowed before is refused to
    new sandboxes after, one added is allowed; a sandbox that was running
    stays, with the allowlist it started with (docs/OPERATIONS.md)."""
    before, added = f"allowed.test:{world.P}", f"other.test:{world.P}"
    s = world.server(tmp_path, allow=[before])
    try:
        m = marker()
        r = sh(s, curl(world.http.url("allowed.test", f"/hello?{m}")), network=[before])
        assert r["stdout"] == "200\nrc=0\nhello from http-origin", r
        assert len(world.http.matching(m)) == 1
        r = s.request("POST", "/v1/run", {"command": "true", "network": [added]})
        assert r.status == 403 and added in r.json["error"]["message"], (r.status, r.body)
        s.ok("POST", "/v1/sandboxes", {"name": "kept", "network": [before]})

        def allow_only(entry):
            def change(config):
                config["network"]["allow"] = [entry]
            return change
        s.reload(allow_only(added))

        for route, body in (("/v1/run", {"command": "true"}), ("/v1/python", {"code": "1"}),
                            ("/v1/sandboxes", {"name": "refused"})):
            r = s.request("POST", route, dict(body, network=[before]))
            assert r.status == 403, (route, r.status, r.body)
            assert r.json["error"]["code"] == "forbidden", r.body
            assert before in r.json["error"]["message"], r.body
        m = marker()
        r = sh(s, curl(world.http.url("other.test", f"/hello?{m}")), network=[added])
        assert r["stdout"] == "200\nrc=0\nhello from http-origin", r
        assert world.http.hosts_for(m) == ["other.test"]
        # The running sandbox was not touched by the reload.
        names = [sb["name"] for sb in s.ok("GET", "/v1/sandboxes")["sandboxes"]]
        assert names == ["kept"], names
        m = marker()
        r = s.ok("POST", "/v1/sandboxes/kept/exec",
                 {"script": curl(world.http.url("allowed.test", f"/hello?{m}"))})
        assert r["stdout"] == "200\nrc=0\nhello from http-origin", r
        assert r["restarted"] is False
        assert len(world.http.matching(m)) == 1
    finally:
        s.stop()


# --- files by URL -----------------------------------------------------------------

ROUTES = ["/v1/run", "/v1/python"]


def fetch(server, route, files, network=None, code=None):
    """A run with files; returns the Response (not asserted)."""
    body = {"files": files, "timeout_s": RUN_TIMEOUT}
    if network is not None:
        body["network"] = network
    if route == "/v1/run":
        body["command"] = code or "cat data/x.txt"
    else:
        body["code"] = code or "open('data/x.txt').read()"
    return server.request("POST", route, body)


def fetched(route, r):
    assert r.status == 200, (r.status, r.body)
    doc = r.json
    assert doc["status"] == "ok", doc
    return doc["stdout"] if route == "/v1/run" else doc["return_value"]


def assert_fetch_refused(r, index=0, statuses=(403,), *words):
    assert r.status in statuses, (r.status, r.body)
    msg = r.json["error"]["message"]
    assert f"files[{index}].url" in msg, msg
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_arrive_in_the_workspace(server, world, route):
    m = marker()
    url = world.http.url("allowed.test", f"/hello?{m}")
    r = fetch(server, route, [{"path": "data/x.txt", "url": url}])
    assert fetched(route, r) == "hello from http-origin"
    seen = world.http.matching(m)
    assert len(seen) == 1 and netlib.host_only(seen[0]["host"]) == "allowed.test", seen
    recs = _wait_records(server, 1, event="network.allow", kind="fetch", host="allowed.test")
    assert recs and all(x["port"] == world.P and x["address"] == "127.0.0.1" for x in recs), recs
    writes = [x for x in server.audit_records()
              if x["event"] == "file.write" and x.get("url") == url]
    assert writes and writes[0]["source"] == "url" and writes[0]["path"] == "data/x.txt", writes


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_over_https_and_mixed_with_content(server, world, route):
    """https needs the server to trust the origin's certificate, which only
    the sandbox's CA file does here: the download must fail, naming the URL
    (not fall back to http or skip verification)."""
    r = fetch(server, route, [{"path": "note.txt", "content": "inline"},
                              {"path": "data/x.txt", "url": world.https.url("allowed.test")}])
    assert r.status in (400, 403, 502), (r.status, r.body)
    assert "files[1].url" in r.json["error"]["message"], r.body


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_follow_allowed_redirects(server, world, route):
    m = marker()
    target = world.http.url("sub.allowed.test", f"/hello?{m}")
    url = world.http.url("allowed.test", "/redirect?to=" + urllib.parse.quote(target, safe=""))
    r = fetch(server, route, [{"path": "data/x.txt", "url": url}])
    assert fetched(route, r) == "hello from http-origin"
    assert world.http.hosts_for(m) == ["sub.allowed.test"]


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_denied_host(server, world, route):
    m = marker()
    url = world.http.url("blocked.test", f"/hello?{m}")
    r = fetch(server, route, [{"path": "data/x.txt", "url": url}])
    assert_fetch_refused(r, 0, (403,), "blocked.test")
    assert r.json["error"]["code"] == "forbidden"
    assert world.http.matching(m) == []
    recs = _wait_records(server, 1, event="network.deny", kind="fetch", host="blocked.test")
    assert recs, netlib.audit_network(server)


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_ignore_the_sandbox_list_and_check_the_server_list(server, world, route):
    # other.test is in the server's list, not in the sandbox's: the server fetches it
    r = fetch(server, route, [{"path": "data/x.txt", "url": world.http.url("other.test")}],
              network=[f"allowed.test:{world.P}"])
    assert fetched(route, r) == "hello from http-origin"


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_redirect_to_a_denied_host_is_refused(server, world, route):
    m = marker()
    target = world.http.url("blocked.test", f"/hello?{m}")
    url = world.http.url("allowed.test", "/redirect?to=" + urllib.parse.quote(target, safe=""))
    r = fetch(server, route, [{"path": "data/x.txt", "url": url}])
    assert_fetch_refused(r, 0, (403,), "blocked.test")
    assert world.http.matching(m) == []


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_redirect_to_a_private_address_is_refused(server, world, route):
    """rebind.test is allowed by name but resolves to 127.0.0.2, outside
    allow_private: neither directly nor through a redirect."""
    m = marker()
    target = world.rebind.url("rebind.test", f"/hello?{m}")
    r = fetch(server, route, [{"path": "data/x.txt", "url": target}])
    assert_fetch_refused(r, 0, (403,), "rebind.test")
    url = world.http.url("allowed.test", "/redirect?to=" + urllib.parse.quote(target, safe=""))
    r = fetch(server, route, [{"path": "data/x.txt", "url": url}])
    assert_fetch_refused(r, 0, (403,), "rebind.test")
    assert world.rebind.matching(m) == []


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_ip_literals_and_bad_urls(server, world, route):
    m = marker()
    r = fetch(server, route, [{"path": "data/x.txt", "url": f"http://127.0.0.1:{world.P}/hello?{m}"}])
    assert_fetch_refused(r, 0, (403,))
    for bad in ["file:///etc/shadow", "ftp://allowed.test/x", "gopher://allowed.test:70/",
                "not a url", ""]:
        r = fetch(server, route, [{"path": "data/x.txt", "url": bad}])
        assert r.status in (400, 403), (bad, r.status, r.body)
        assert "files[0].url" in r.json["error"]["message"], (bad, r.body)
    assert world.http.matching(m) == []


@pytest.fixture(scope="module")
def fetch_server(world, tmp_path_factory):
    s = world.server(tmp_path_factory.mktemp("net-fetch"),
                     fetch={"max_bytes": 65536, "timeout_s": 2, "max_redirects": 2})
    yield s
    s.stop()


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_size_limit(fetch_server, world, route):
    r = fetch(fetch_server, route, [{"path": "data/x.txt", "url": world.http.url("allowed.test", "/bytes?n=65536")}],
              code="wc -c < data/x.txt" if route == "/v1/run" else "len(open('data/x.txt').read())")
    out = fetched(route, r)
    assert (out.strip() if isinstance(out, str) else out) in ("65536", 65536)
    r = fetch(fetch_server, route, [{"path": "data/x.txt", "url": world.http.url("allowed.test", "/bytes?n=65537")}])
    assert_fetch_refused(r, 0, (400, 413, 502))


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_time_limit(fetch_server, world, route):
    t0 = time.monotonic()
    r = fetch(fetch_server, route, [{"path": "data/x.txt", "url": world.http.url("allowed.test", "/slow?s=8")}])
    took = time.monotonic() - t0
    assert_fetch_refused(r, 0, (400, 502, 504))
    assert took < 6, f"a 2 s fetch limit took {took:.1f}s"


@pytest.mark.parametrize("route", ROUTES)
def test_files_by_url_redirect_limit(fetch_server, world, route):
    url = world.http.url("allowed.test", "/hello")
    for _ in range(2):
        url = world.http.url("allowed.test", "/redirect?to=" + urllib.parse.quote(url, safe=""))
    assert fetched(route, fetch(fetch_server, route, [{"path": "data/x.txt", "url": url}])) == \
        "hello from http-origin"
    url = world.http.url("allowed.test", "/redirect?to=" + urllib.parse.quote(url, safe=""))
    r = fetch(fetch_server, route, [{"path": "data/x.txt", "url": url}])
    assert_fetch_refused(r, 0, (400, 403, 502), "redirect")


# --- MCP ------------------------------------------------------------------------

def test_mcp_run_shell_and_run_python_with_network_and_file_urls(server, world):
    m = marker()
    res = netlib.mcp_call(server, "run_shell", {
        "command": curl(world.http.url("allowed.test", f"/hello?{m}")) + "; echo; cat data/x.txt",
        "network": [f"allowed.test:{world.P}"],
        "files": [{"path": "data/x.txt", "url": world.http.url("other.test", f"/hello?{m}")}]})
    assert not res.get("isError"), res
    assert res["structuredContent"]["stdout"] == \
        "200\nrc=0\nhello from http-origin\nhello from http-origin", res
    assert sorted(world.http.hosts_for(m)) == ["allowed.test", "other.test"]
    res = netlib.mcp_call(server, "run_python", {
        "code": "import urllib.request\n"
                f"urllib.request.urlopen({world.http.url('allowed.test')!r}, timeout=10).read().decode()",
        "network": [f"allowed.test:{world.P}"]})
    assert res["structuredContent"]["return_value"] == "hello from http-origin", res
    # MCP is bound by the server's list like the HTTP API
    res = netlib.mcp_call(server, "run_shell", {"command": "true", "network": [f"blocked.test:{world.P}"]})
    assert res.get("isError") and "blocked.test" in json.dumps(res["content"]), res
