"""DNS rebinding and cross-site requests against the HTTP API: a web page the
user visits re-points its own name at 127.0.0.1, so the browser sends the
page's requests to the local, token-less server with `Host:
rebind.attacker.example`; or the page simply posts cross-site, with its
`Origin`. Both are tried on the /v1 routes a page would want (run code and
read a configured secret out; create a sandbox; list) and on /mcp.

Each attack runs twice (the pair pattern of seclib and
test_service_attacks): against a server of the normal build, where it must
be refused with 403 before anything runs, and against a server of the
unsafe debug build with the Host / Origin policy switched off
(CODECAGE_DEBUG_DISABLE=http-host), where it must succeed."""
import os

import pytest

from conftest import BUILD, DEBUG_BUILD
from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

SECRET = "sk-rebind-7f3a9c0e5b1d4a28"
EVIL_HOST = "rebind.attacker.example"
EVIL_ORIGIN = "http://rebind.attacker.example"


@pytest.fixture(params=["protected", "http-host"])
def target(request, tmp_path):
    """The default setup (no tenants, loopback, a configured secret), from
    the normal build or the unsafe one with the policy off."""
    extra = {"secrets": {"API_KEY": {"value": SECRET}}}
    if request.param == "protected":
        server = Server(tmp_path, extra=extra, build=BUILD, unix=False)
    else:
        server = Server(tmp_path, extra=extra, build=DEBUG_BUILD, unix=False,
                        env=dict(os.environ, CODECAGE_DEBUG_DISABLE=request.param))
    server.protected = request.param == "protected"
    yield server
    server.stop()


def rebound(server, **headers):
    """The headers of a page's request: its Host (with the port the page
    used) or its Origin."""
    h = {}
    if "host" in headers:
        h["Host"] = f"{headers['host']}:{server.port}"
    if "origin" in headers:
        h["Origin"] = headers["origin"]
    return h


def runs_started(server):
    return [r for r in server.audit_records() if r["event"] == "run.start"]


@pytest.mark.parametrize("via", ["host", "origin"])
def test_a_page_runs_code_and_reads_a_secret(target, via):
    page = rebound(target, **{via: EVIL_HOST if via == "host" else EVIL_ORIGIN})
    # Output is redacted, so the page asks for the secret reversed.
    r = target.request("POST", "/v1/run", {"command": "echo $API_KEY | rev", "secrets": ["API_KEY"]},
                       headers=page)
    stolen = r.status == 200 and r.json["stdout"].strip()[::-1] == SECRET
    assert stolen != target.protected, (r.status, r.body)
    if target.protected:
        assert r.status == 403 and r.error_code() == "forbidden"
        assert runs_started(target) == []  # refused before anything ran
        denied = [a for a in target.audit_records() if a["event"] == "auth.deny"]
        assert denied and denied[-1]["reason"] == f"bad_{via}", denied
        assert denied[-1]["route"] == "/v1/run" and denied[-1]["remote"].startswith("127.0.0.1:")


@pytest.mark.parametrize("via", ["host", "origin"])
def test_a_page_creates_and_lists_sandboxes(target, via):
    page = rebound(target, **{via: EVIL_HOST if via == "host" else EVIL_ORIGIN})
    made = target.request("POST", "/v1/sandboxes", {"name": "planted"}, headers=page)
    listed = target.request("GET", "/v1/sandboxes", headers=page)
    succeeded = made.status == 201 and listed.status == 200
    assert succeeded != target.protected, (made.status, made.body, listed.status)
    if target.protected:
        assert made.status == listed.status == 403
        assert target.ok("GET", "/v1/sandboxes")["sandboxes"] == []


def test_a_page_opens_an_mcp_session(target):
    page = rebound(target, host=EVIL_HOST)
    page.update({"Accept": "application/json"})
    msg = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                      "clientInfo": {"name": "page", "version": "1"}}}
    r = target.request("POST", "/mcp", msg, headers=page)
    opened = r.status == 200 and "Mcp-Session-Id" in r.headers
    assert opened != target.protected, (r.status, r.body)


def test_a_page_runs_code_over_stateless_mcp(target):
    """Revision 2026-07-28 needs no session: one request runs code."""
    page = rebound(target, origin=EVIL_ORIGIN)
    page.update({"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28",
                 "Mcp-Method": "tools/call", "Mcp-Name": "run_shell"})
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "run_shell", "arguments": {"command": "echo $API_KEY | rev",
                                           "secrets": ["API_KEY"]},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}}
    r = target.request("POST", "/mcp", msg, headers=page)
    ran = r.status == 200 and "result" in r.json
    assert ran != target.protected, (r.status, r.body)
    if target.protected:
        assert r.status == 403 and runs_started(target) == []


def test_what_stays_open_in_both_builds(target):
    """Local clients addressing the server by a local name, the Unix socket
    whatever its Host, and /healthz for a health checker's Host."""
    for host in ["localhost", "127.0.0.1", "[::1]"]:
        r = target.request("GET", "/v1/sandboxes", headers={"Host": f"{host}:{target.port}"})
        assert r.status == 200, (host, r.status)
    r = target.request("GET", "/v1/sandboxes", headers={"Origin": f"http://localhost:{target.port}"})
    assert r.status == 200
    r = target.request("GET", "/v1/sandboxes", headers={"Host": EVIL_HOST}, unix=True)
    assert r.status == 200
    r = target.request("GET", "/healthz", headers={"Host": "10.1.2.3:8080"})
    assert r.status == 200 and r.json["status"] == "ok"
    # ... but a web page's request to /healthz is refused like any other.
    r = target.request("GET", "/healthz", headers={"Origin": EVIL_ORIGIN})
    assert (r.status == 403) == target.protected
