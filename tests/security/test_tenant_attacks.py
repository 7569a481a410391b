"""Attacks of one tenant on another's one-shot runs: bob learns the id of a
run alice made (from a log, a shared link, a model's transcript) and asks
for its artifacts through the HTTP API and through MCP's resources/read.

Each attack runs twice (the pair pattern of seclib and
test_service_attacks): against a server of the normal build, where bob must
get "not found", and against a server of the unsafe debug build with the
run's tenant check switched off (CODECAGE_DEBUG_DISABLE=run-tenant), where
he reads alice's file. Alice reads her own in both."""
import os

import pytest

from conftest import BUILD, DEBUG_BUILD
from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef01"
PRIVATE = "alice's quarterly numbers"
INIT = {"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "tenant-attacks", "version": "1"}}


@pytest.fixture(params=["protected", "run-tenant"])
def target(request, tmp_path):
    """Two tenants on a server that binds runs to their tenant, or (the
    unsafe build) one that serves any run to whoever knows its id."""
    tenants = {"alice": ALICE, "bob": BOB}
    if request.param == "protected":
        server = Server(tmp_path, tenants=tenants, build=BUILD)
    else:
        server = Server(tmp_path, tenants=tenants, build=DEBUG_BUILD,
                        env=dict(os.environ, CODECAGE_DEBUG_DISABLE=request.param))
    server.protected = request.param == "protected"
    yield server
    server.stop()


def alice_run(server, route, body):
    """A one-shot run of alice's that leaves output/report.txt; its id."""
    r = server.ok("POST", route, body, token=ALICE)
    assert [a["path"] for a in r["artifacts"]] == ["output/report.txt"], r
    return r["run_id"]


RUNS = {
    "run": ("/v1/run", {"command": f"mkdir -p output && printf %s \"{PRIVATE}\" > output/report.txt"}),
    "python": ("/v1/python", {"code": "import os\nos.makedirs('output', exist_ok=True)\n"
                                      f"open('output/report.txt', 'w').write({PRIVATE!r})"}),
}


@pytest.mark.parametrize("kind", RUNS)
def test_artifacts_of_another_tenants_run_over_http(target, kind):
    run_id = alice_run(target, *RUNS[kind])
    own = target.request("GET", f"/v1/runs/{run_id}/files/output/report.txt", token=ALICE)
    assert own.status == 200 and own.body == PRIVATE.encode()
    theirs = target.request("GET", f"/v1/runs/{run_id}/files/output/report.txt", token=BOB)
    leaked = theirs.status == 200 and theirs.body == PRIVATE.encode()
    assert leaked != target.protected, (theirs.status, theirs.body)
    if target.protected:  # exactly like a run that does not exist
        missing = target.request("GET", "/v1/runs/" + "0" * 32 + "/files/output/report.txt",
                                 token=BOB)
        assert theirs.status == missing.status == 404
        assert theirs.error_code() == missing.error_code() == "not_found"


class McpClient:
    """A Streamable HTTP session of one tenant on the server's TCP listener."""

    def __init__(self, server, token):
        self.server, self.token, self.sid, self.next_id = server, token, None, 1
        doc = self.call("initialize", INIT)
        assert "result" in doc, doc

    def call(self, method, params):
        headers = {"Accept": "application/json"}  # answers as plain JSON
        if self.sid:
            headers["Mcp-Session-Id"] = self.sid
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.next_id += 1
        r = self.server.request("POST", "/mcp", msg, token=self.token, headers=headers,
                                unix=False)
        assert r.status == 200, (r.status, r.body)
        self.sid = self.sid or r.headers["Mcp-Session-Id"]
        return r.json


def test_artifacts_of_another_tenants_run_over_mcp(target):
    run_id = alice_run(target, *RUNS["python"])
    uri = f"codecage://runs/{run_id}/output/report.txt"
    own = McpClient(target, ALICE).call("resources/read", {"uri": uri})
    assert own["result"]["contents"][0]["text"] == PRIVATE, own
    theirs = McpClient(target, BOB).call("resources/read", {"uri": uri})
    leaked = "result" in theirs and theirs["result"]["contents"][0].get("text") == PRIVATE
    assert leaked != target.protected, theirs
    if target.protected:
        assert theirs["error"]["code"] == -32002, theirs


def stateless_read(server, token, uri):
    """resources/read in revision 2026-07-28: no session, one request."""
    msg = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {
        "uri": uri, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                              "io.modelcontextprotocol/clientCapabilities": {}}}}
    r = server.request("POST", "/mcp", msg, token=token, unix=False, headers={
        "Accept": "application/json", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "resources/read", "Mcp-Name": uri})
    return r


def test_artifacts_of_another_tenants_run_over_stateless_mcp(target):
    run_id = alice_run(target, *RUNS["python"])
    uri = f"codecage://runs/{run_id}/output/report.txt"
    assert stateless_read(target, None, uri).status == 401
    own = stateless_read(target, ALICE, uri).json
    assert own["result"]["contents"][0]["text"] == PRIVATE, own
    theirs = stateless_read(target, BOB, uri).json
    leaked = "result" in theirs and theirs["result"]["contents"][0].get("text") == PRIVATE
    assert leaked != target.protected, theirs
    if target.protected:
        assert theirs["error"]["code"] == -32602 and theirs["error"]["data"] == {"uri": uri}


def test_a_run_made_over_mcp_is_bound_too(target):
    """run_shell over MCP keeps its artifacts for its own tenant only."""
    alice = McpClient(target, ALICE)
    res = alice.call("tools/call", {"name": "run_shell", "arguments": {
        "command": f"mkdir -p output && printf %s \"{PRIVATE}\" > output/report.txt"}})
    run_id = res["result"]["structuredContent"]["run_id"]
    theirs = target.request("GET", f"/v1/runs/{run_id}/files/output/report.txt", token=BOB)
    leaked = theirs.status == 200 and theirs.body == PRIVATE.encode()
    assert leaked != target.protected, (theirs.status, theirs.body)
    own = target.request("GET", f"/v1/runs/{run_id}/files/output/report.txt", token=ALICE)
    assert own.status == 200 and own.body == PRIVATE.encode()
