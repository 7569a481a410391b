"""Attacks on network egress: sandbox code tries to reach what its allowlist
does not give it, through the egress proxy (127.0.0.1:3128 in its network
namespace) or around it.

Each attack with a debug switch runs twice (the pair pattern of seclib and
test_service_attacks): against a server of the normal build, where it must
fail, and against a server of the unsafe debug build with that protection
switched off (CODECAGE_DEBUG_DISABLE), where it must succeed. "Succeed" is
always judged at the origin server (tests/netlib.py): the request arrived
there. The other attacks run against the normal build only, and say why.

Names resolve through the server's own /etc/hosts (netlib.hosts_prefix):
allowed.test, other.test, blocked.test -> 127.0.0.1 (the origins, reachable
by config: allow_private 127.0.0.1/32), rebind.test -> 127.0.0.2 (an origin
too, but outside allow_private)."""
import json
import os

import pytest

import netlib
from netlib import CA_PATH, connect, get, marker, raw_argv, results_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")


def egress_pair(switch):
    return pytest.mark.parametrize("disable", [
        pytest.param(None, id="protected"),
        pytest.param(switch, id=f"without-{switch}"),
    ])


@pytest.fixture
def start(world, tmp_path, disable):
    """start(**network_config): a server of the normal build, or of the
    unsafe build with `disable` switched off."""
    servers = []

    def make(**config):
        tmp = tmp_path / f"server{len(servers)}"
        tmp.mkdir()
        s = world.server(tmp, disable=disable, **config)
        s.protected = disable is None
        s.ca_pem = world.tls.pem
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def target(start):
    return start()


@pytest.fixture
def server(world, tmp_path):
    s = world.server(tmp_path)
    s.ca_pem = world.tls.pem
    yield s
    s.stop()


def expect(server, succeeded, detail=""):
    if server.protected:
        assert not succeeded, f"attack succeeded against the protected build: {detail}"
    else:
        assert succeeded, ("attack failed even with the protection switched off, so the test "
                           f"does not show that the protection is what stops it: {detail}")


def raw(server, ops, network):
    r = server.request("POST", "/v1/run", {"argv": raw_argv(ops), "network": network,
                                           "timeout_s": 30, "files": [world_ca(server)]})
    assert r.status == 200, (r.status, r.body)
    return results_of(r.json)


def world_ca(server):
    """The CA file for the raw client's TLS ops (the fixtures set ca_pem)."""
    return {"path": "ca.pem", "content": server.ca_pem}


def denied(resp, *words):
    return resp.get("status") == 403 and all(w in resp.get("body", "") for w in words)


# --- pairs --------------------------------------------------------------------------

@egress_pair("egress-policy")
def test_denied_host_is_reached(target, world):
    """A host outside the sandbox's list (allowed by the server, so only the
    sandbox's own list stands in the way)."""
    m = marker()
    res = raw(target, [{"op": "open"},
                       {"op": "send", "data": get(world.http.url("other.test", f"/hello?{m}"))},
                       {"op": "response"}], network=[f"allowed.test:{world.P}"])
    reached = "other.test" in world.http.hosts_for(m)
    expect(target, reached, res[2])
    if target.protected:
        assert denied(res[2], '"other.test"'), res[2]


@egress_pair("egress-policy")
def test_denied_host_is_reached_through_connect(target, world):
    m = marker()
    res = raw(target, [{"op": "open"},
                       {"op": "send", "data": connect(f"other.test:{world.T}")},
                       {"op": "response", "connect": True},
                       {"op": "tls", "sni": "other.test", "cafile": CA_PATH},
                       {"op": "send", "data": f"GET /hello?{m} HTTP/1.1\r\nHost: other.test\r\n\r\n"},
                       {"op": "response"}], network=[f"allowed.test:{world.T}"])
    reached = "other.test" in world.https.hosts_for(m)
    expect(target, reached, res)


@egress_pair("egress-address")
def test_dns_rebinding_to_a_loopback_address(target, world):
    """rebind.test is on the lists, but resolves to 127.0.0.2 (loopback,
    outside allow_private): the resolved address must be checked."""
    m = marker()
    res = raw(target, [{"op": "open"},
                       {"op": "send", "data": get(world.rebind.url("rebind.test", f"/hello?{m}"))},
                       {"op": "response"}], network=[f"rebind.test:{world.R}"])
    reached = len(world.rebind.matching(m)) > 0
    expect(target, reached, res[2])
    if target.protected:
        assert denied(res[2], '"rebind.test"', "127.0.0.2", "loopback"), res[2]
    else:
        assert res[2]["body"] == "hello from rebind-origin", res[2]


@egress_pair("egress-sni")
def test_connect_to_an_allowed_name_with_another_sni(target, world):
    """CONNECT allowed.test, then a ClientHello for other.test: the TLS
    origin serves both names, so without the SNI check the tunnel reaches
    other.test's site."""
    snis_before = len(world.https.snis)
    connect_naming_other_test(target, world, "allowed.test")
    if target.protected:
        assert "other.test" not in world.https.snis[snis_before:], \
            "the ClientHello went to the origin"


def connect_naming_other_test(target, world, host):
    """CONNECT host (allowed), then TLS naming other.test through it: the
    attack must reach other.test's site only with the check switched off."""
    m = marker()
    res = raw(target, [{"op": "open"},
                       {"op": "send", "data": connect(f"{host}:{world.T}")},
                       {"op": "response", "connect": True},
                       {"op": "tls", "sni": "other.test", "cafile": CA_PATH},
                       {"op": "send", "data": f"GET /hello?{m} HTTP/1.1\r\nHost: other.test\r\n\r\n"},
                       {"op": "response"}], network=[f"{host}:{world.T}"])
    reached = "other.test" in world.https.hosts_for(m)
    expect(target, reached, res)
    if target.protected:
        assert res[2]["status"] == 200, res[2]  # the CONNECT itself was allowed
        assert not res[3]["ok"], res[3]  # the tunnel closed on the ClientHello


@egress_pair("egress-sni")
def test_connect_to_an_allowed_address_with_a_server_name(start, world):
    """CONNECT to an allowed IP literal, then a ClientHello naming other.test:
    the TLS origin at that address serves every name, so without the check
    the tunnel reaches a site the sandbox's list never named."""
    target = start(allow=world.server_allow() + [f"{netlib.ORIGIN_ADDR}:{world.T}"])
    connect_naming_other_test(target, world, netlib.ORIGIN_ADDR)


@egress_pair("egress-sni")
def test_connect_without_sni(target, world):
    """A ClientHello without SNI cannot show it names the CONNECT host."""
    m = marker()
    code = f"""
import json, socket, ssl
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT allowed.test:{world.T} HTTP/1.1\\r\\nHost: allowed.test:{world.T}\\r\\n\\r\\n")
head = b""
while b"\\r\\n\\r\\n" not in head:
    d = s.recv(1)
    if not d:
        break
    head += d
out = {{"connect": head.decode("latin-1").split("\\r\\n")[0]}}
try:
    ctx = ssl.create_default_context(cafile={CA_PATH!r})
    ctx.check_hostname = False
    t = ctx.wrap_socket(s, server_hostname=None)
    t.sendall(b"GET /hello?{m} HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n")
    out["got"] = t.recv(4096).decode("latin-1")
except Exception as e:
    out["error"] = repr(e)
print(json.dumps(out))
"""
    r = target.ok("POST", "/v1/run", {"argv": [netlib.SANDBOX_PY, "-c", code], "timeout_s": 30,
                                      "network": [f"allowed.test:{world.T}"],
                                      "files": [world_ca(target)]})
    out = netlib.last_json(r["stdout"])
    reached = len(world.https.matching(m)) > 0
    expect(target, reached, (out, r["stderr"]))


@egress_pair("egress-recheck")
def test_second_request_on_a_kept_alive_connection(target, world):
    """The first request is for an allowed host, the second, on the same
    client connection, for another: each request must be checked."""
    m = marker()
    res = raw(target, [{"op": "open"},
                       {"op": "send", "data": get(world.http.url("allowed.test", f"/hello?{m}"))},
                       {"op": "response"},
                       {"op": "send", "data": get(world.http.url("other.test", f"/hello?{m}"))},
                       {"op": "response"}], network=[f"allowed.test:{world.P}"])
    assert res[2]["status"] == 200, res[2]
    reached = "other.test" in world.http.hosts_for(m)
    expect(target, reached, res[4])
    if target.protected:
        assert denied(res[4], '"other.test"'), res[4]


@egress_pair("egress-recheck")
def test_pipelined_requests_are_each_checked(target, world):
    """Both requests in one write, before any answer."""
    m = marker()
    both = (get(world.http.url("allowed.test", f"/hello?{m}")) +
            get(world.http.url("other.test", f"/hello?{m}")))
    res = raw(target, [{"op": "open"}, {"op": "send", "data": both},
                       {"op": "response"}, {"op": "response"}],
              network=[f"allowed.test:{world.P}"])
    reached = "other.test" in world.http.hosts_for(m)
    expect(target, reached, res)


@egress_pair("egress-limits")
def test_more_connections_than_the_limit(start, world):
    target = start(max_connections=2)
    m = marker()
    n = 4
    ops = []
    for i in range(n):
        ops += [{"op": "open", "id": str(i)},
                {"op": "send", "id": str(i),
                 "data": get(world.http.url("allowed.test", f"/slow?s=1&{m}&c={i}"))},
                {"op": "sleep", "s": 0.1}]
    ops += [{"op": "response", "id": str(i), "timeout": 10} for i in range(n)]
    res = raw(target, ops, network=[f"allowed.test:{world.P}"])
    statuses = [x.get("status") for x in res[-n:]]
    reached = len(world.http.matching(m)) > 2
    expect(target, reached and statuses == [200] * n, statuses)
    if target.protected:
        assert statuses.count(200) == 2 and statuses.count(403) == 2, res[-n:]
        assert all(denied(x, "connections") for x in res[-n:] if x.get("status") == 403), res[-n:]


@egress_pair("egress-limits")
def test_more_bytes_than_the_limit(start, world):
    target = start(max_bytes=1 << 20)
    n = 3 << 20
    res = raw(target, [{"op": "open"},
                       {"op": "send", "data": get(world.http.url("allowed.test", f"/bytes?n={n}"))},
                       {"op": "response", "timeout": 10}], network=[f"allowed.test:{world.P}"])
    got = res[2]["body_len"]
    expect(target, got == n and res[2].get("complete"), got)


@egress_pair("egress-limits")
def test_more_bytes_than_the_limit_upwards(start, world):
    """Bytes the sandbox sends count too (exfiltration)."""
    target = start(max_bytes=1 << 20)
    n = 3 << 20
    m = marker()
    head = (f"POST {world.http.url('allowed.test', '/echo?' + m)} HTTP/1.1\r\n"
            f"Host: allowed.test:{world.P}\r\nContent-Length: {n}\r\n\r\n")
    res = raw(target, [{"op": "open"},
                       {"op": "send", "data": head, "fill": n},
                       {"op": "response", "timeout": 10}], network=[f"allowed.test:{world.P}"])
    arrived = [r["body_len"] for r in world.http.matching(m)]
    expect(target, arrived == [n], (arrived, {k: v for k, v in res[2].items() if k != "body"}))


# --- normal build only ----------------------------------------------------------------

def test_direct_connection_without_the_proxy(server, world):
    # The sandbox's network namespace holds only lo: no switch gives it a
    # route out, so there is nothing to switch off here.
    m = marker()
    code = f"""
import json, socket
out = []
for addr in [("127.0.0.1", {world.P}), ("127.0.0.2", {world.R}), ("192.0.2.1", 80)]:
    try:
        s = socket.create_connection(addr, timeout=3)
        s.sendall(b"GET /hello?{m} HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n")
        out.append(s.recv(100).decode("latin-1"))
    except OSError as e:
        out.append(type(e).__name__)
print(json.dumps(out))
"""
    r = server.ok("POST", "/v1/run", {"argv": [netlib.SANDBOX_PY, "-c", code], "timeout_s": 30,
                                      "network": [f"allowed.test:{world.P}"]})
    out = json.loads(r["stdout"].strip().splitlines()[-1])
    assert len(out) == 3 and all(x.endswith("Error") for x in out), out
    assert world.http.matching(m) == [] and world.rebind.matching(m) == []


IP_FORMS = ["127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7f.0.0.1", "0177.0.0.1",
            "127.000.000.001", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]", "[::]", "0.0.0.0",
            "0", "127.0.0.1.", "%31%32%37.0.0.1"]
MALFORMED = {"%31%32%37.0.0.1"}  # not a host name at all: 400 is right too


def test_ip_literal_forms_never_reach_anything(server, world):
    # Two layers stop these (the literal is refused before DNS, and the
    # address would be checked after); switching either off alone still
    # leaves the other, and egress-policy + egress-address together would
    # test nothing about literals. So the normal build only.
    m = marker()
    ops = []
    for i, host in enumerate(IP_FORMS):
        ops += [{"op": "open", "id": f"g{i}"},
                {"op": "send", "id": f"g{i}", "data": get(f"http://{host}:{world.P}/hello?{m}&f={i}",
                                                         host=f"allowed.test:{world.P}")},
                {"op": "response", "id": f"g{i}"},
                {"op": "open", "id": f"c{i}"},
                {"op": "send", "id": f"c{i}", "data": connect(f"{host}:{world.T}")},
                {"op": "response", "id": f"c{i}", "connect": True}]
    res = raw(server, ops, network=["*", f"allowed.test:{world.P}", f"allowed.test:{world.T}"])
    for i, host in enumerate(IP_FORMS):
        for resp in (res[6 * i + 2], res[6 * i + 5]):
            assert resp.get("status") in ((400, 403) if host in MALFORMED else (403,)), (host, resp)
            assert resp["body"].startswith("codecage egress proxy: "), (host, resp)
    assert world.http.matching(m) == []


def test_host_header_fronting(server, world):
    # The proxy decides on the request line and rewrites Host to it; there is
    # no switch for the rewrite (egress-policy would let other.test through
    # anyway), so the normal build only.
    m = marker()
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(world.http.url("allowed.test", f"/host?{m}"),
                                                  host=f"other.test:{world.P}")},
                       {"op": "response"},
                       {"op": "send", "data": get(world.http.url("allowed.test", f"/host?{m}"),
                                                  host=f"other.test:{world.P}",
                                                  extra_headers=f"Host: other.test:{world.P}\r\n")},
                       {"op": "response"}], network=[f"allowed.test:{world.P}"])
    assert res[2]["status"] == 200, res[2]
    assert netlib.host_only(res[2]["body"]) == "allowed.test", res[2]
    # two Host headers: refused or rewritten to one, never passed on
    assert res[4].get("status") in (200, 400, None), res[4]
    assert all(h == "allowed.test" for h in world.http.hosts_for(m)), world.http.matching(m)
    for r in world.http.matching(m):
        assert list(k.lower() for k in r["headers"]).count("host") == 1, r


SMUGGLE = [
    # Content-Length and Transfer-Encoding together
    "POST {allowed}/echo?{m} HTTP/1.1\r\nHost: allowed.test:{P}\r\nContent-Length: {n}\r\n"
    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{inner}",
    # two different Content-Lengths
    "POST {allowed}/echo?{m} HTTP/1.1\r\nHost: allowed.test:{P}\r\nContent-Length: 5\r\n"
    "Content-Length: {n}\r\n\r\n0\r\n\r\n{inner}",
    # a transfer coding other than chunked
    "POST {allowed}/echo?{m} HTTP/1.1\r\nHost: allowed.test:{P}\r\n"
    "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{inner}",
    # obsolete line folding hiding a Transfer-Encoding
    "POST {allowed}/echo?{m} HTTP/1.1\r\nHost: allowed.test:{P}\r\nX-A: b\r\n"
    " Transfer-Encoding: chunked\r\nContent-Length: {n}\r\n\r\n0\r\n\r\n{inner}",
    # bare LF line ends
    "POST {allowed}/echo?{m} HTTP/1.1\nHost: allowed.test:{P}\nContent-Length: {n}\n"
    "Transfer-Encoding: chunked\n\n0\n\n{inner}",
]


@pytest.mark.parametrize("form", range(len(SMUGGLE)))
def test_request_smuggling_is_refused(server, world, form):
    # Strict framing has no switch (a lenient parser would be a different
    # parser), so the normal build only. The smuggled request goes to
    # other.test, which the sandbox may not reach.
    m = marker()
    inner = get(world.http.url("other.test", f"/hello?{m}"))
    data = SMUGGLE[form].format(allowed=f"http://allowed.test:{world.P}", P=world.P, m=m,
                                n=len("0\r\n\r\n" + inner), inner=inner)
    res = raw(server, [{"op": "open"}, {"op": "send", "data": data},
                       {"op": "response", "timeout": 5}, {"op": "recv_close", "timeout": 3}],
              network=[f"allowed.test:{world.P}"])
    # 400, or 501 for a transfer coding the proxy does not implement (RFC 9112 6.1)
    assert res[2].get("status") in ((400, 501) if form == 2 else (400,)), res[2]
    assert res[3].get("closed"), res[3]
    assert world.http.matching(m) == [], world.http.matching(m)


def test_connect_tunnel_carrying_plain_http_is_closed(server, world):
    # Tunnels must carry TLS: the first bytes must be a ClientHello. The SNI
    # switch might or might not skip this parse, so the normal build only.
    m = marker()
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": connect(f"allowed.test:{world.P}")},
                       {"op": "response", "connect": True},
                       {"op": "send", "data": f"GET /hello?{m} HTTP/1.1\r\nHost: other.test\r\n\r\n"},
                       {"op": "recv_close", "timeout": 5}], network=[f"allowed.test:{world.P}"])
    assert res[4].get("closed") and "hello from" not in res[4].get("data", ""), res
    assert world.http.matching(m) == []


def test_proxy_settings_pointing_elsewhere_do_not_escape(server, world):
    # Only the proxy's own port exists inside: pointing clients at the host's
    # origin "as a proxy", or skipping the proxy, leads nowhere. No switch.
    m = marker()
    script = "; ".join([
        f"curl -sS --max-time 5 -x http://127.0.0.1:{world.P} 'http://other.test:{world.P}/hello?{m}'",
        f"curl -sS --max-time 5 --noproxy '*' 'http://allowed.test:{world.P}/hello?{m}'",
        f"HTTP_PROXY=http://127.0.0.2:{world.R} http_proxy=http://127.0.0.2:{world.R} "
        f"curl -sS --max-time 5 'http://other.test:{world.P}/hello?{m}'",
        f"curl -sS --max-time 2 -x socks5h://127.0.0.1:3128 'http://other.test:{world.P}/hello?{m}'",
        f"curl -sS --max-time 2 -x socks4a://127.0.0.1:3128 'http://other.test:{world.P}/hello?{m}'",
        "echo done"])
    r = server.ok("POST", "/v1/run", {"command": script, "timeout_s": 30,
                                      "network": [f"allowed.test:{world.P}"]})
    assert r["stdout"].endswith("done\n") and "hello from" not in r["stdout"], r
    assert world.http.matching(m) == [] and world.rebind.matching(m) == []


def test_proxy_cannot_reach_the_codecage_api(server, world):
    # The server's own listener is on loopback: by IP it is a literal, by
    # name (localhost) not on any list. Several layers, the normal build only.
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(f"http://127.0.0.1:{server.port}/healthz")},
                       {"op": "response"},
                       {"op": "open", "id": "b"},
                       {"op": "send", "id": "b", "data": get(f"http://localhost:{server.port}/healthz")},
                       {"op": "response", "id": "b"}],
              network=["*", f"allowed.test:{world.P}"])
    for resp in (res[2], res[5]):
        assert resp.get("status") == 403, resp
        assert '"status":"ok"' not in resp.get("body", ""), resp


def test_denial_is_not_an_oracle_for_other_tenants_hosts(server, world):
    # A denied name is never resolved (the decision comes before DNS): a
    # name that does not exist gets the same 403 as one that does.
    res = raw(server, [{"op": "open"},
                       {"op": "send", "data": get(f"http://blocked.test:{world.P}/")},
                       {"op": "response"},
                       {"op": "open", "id": "b"},
                       {"op": "send", "id": "b", "data": get(f"http://nonexistent.test:{world.P}/")},
                       {"op": "response", "id": "b"}],
              network=[f"allowed.test:{world.P}"])
    assert res[2]["status"] == 403 and res[5]["status"] == 403, res
    assert res[2]["body"].replace("blocked.test", "X") == res[5]["body"].replace("nonexistent.test", "X")




class _SendAfterEof:
    """An origin that reads one connection until the client's EOF, then
    sends n bytes and closes: a server streaming an answer to a client that
    has half-closed."""

    def __init__(self, n):
        import socket
        import threading
        self.n = n
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            c, _ = self.sock.accept()
        except OSError:
            return
        with c:
            while c.recv(65536):
                pass
            try:
                c.sendall(b"x" * self.n)
            except OSError:
                pass

    def close(self):
        self.sock.close()


def _half_closed_tunnel(server, origin, hold_s):
    """A sandbox opens a tunnel to origin, sends a ClientHello, half-closes
    and holds the tunnel hold_s seconds without reading: the tunnel's audit
    record."""
    code = f"""
import socket, ssl, time
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT allowed.test:{origin.port} HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n")
head = b""
while b"\\r\\n\\r\\n" not in head:
    head += s.recv(1)
print(head.split(b"\\r\\n")[0].decode(), flush=True)
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ssl.create_default_context().wrap_bio(inc, out, server_hostname="allowed.test")
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
s.sendall(out.read())
s.shutdown(socket.SHUT_WR)
time.sleep({hold_s})
"""
    r = server.ok("POST", "/v1/run", {"argv": [netlib.SANDBOX_PY, "-c", code], "timeout_s": 60,
                                      "network": [f"allowed.test:{origin.port}"]})
    assert "200" in r["stdout"], r
    recs = netlib.wait_until(lambda: netlib.audit_network(
        server, event="network.allow", kind="connect", port=origin.port), timeout=10)
    assert recs, netlib.audit_network(server)
    return recs[0]


def test_a_tunnel_shut_down_both_ways_still_times_out(world, tmp_path):
    """The sandbox half-closes a tunnel and never reads; the origin sends a
    little more than the way to the sandbox holds, and closes. The proxy's
    socket to the origin is then shut down both ways while the proxy waits
    for nothing from it (what it read is stuck on the way to the sandbox):
    poll() still reports POLLHUP on such a socket at once, so a proxy that
    kept polling it spun a server thread, outside every sandbox limit, for
    as long as the sandbox held the tunnel, and its idle timeout never came.
    How much the way to the sandbox holds depends on the kernel's buffer
    tuning, so a first tunnel measures it (no debug switch: the normal
    build only). On a machine so slow that the probe's origin sends nothing
    within the idle timeout there is nothing to measure: skipped."""
    probe, origin = _SendAfterEof(256 << 20), _SendAfterEof(0)
    server = world.server(tmp_path, idle_timeout_s=3, allow=world.server_allow() + [
        f"allowed.test:{probe.port}", f"allowed.test:{origin.port}"])
    try:
        held = _half_closed_tunnel(server, probe, 8)["bytes_received"]
        if held == 0:
            pytest.skip("the probe's origin sent nothing within the idle timeout")
        origin.n = held + (256 << 10)  # read once the sandbox's EOF came
        rec = _half_closed_tunnel(server, origin, 20)
        assert rec["duration_ms"] < 14000, rec  # the sandbox held it 20 s
        assert "timed out" in rec.get("error", ""), rec
    finally:
        server.stop()
        probe.close()
        origin.close()
