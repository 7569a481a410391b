"""Attacks through subscriptions/listen of MCP revision 2026-07-28
(src/server/mcp_listen.c): a subscription names files of sandboxes by URI
(codecage://sandboxes/<name>/files/<path>) and hears when they change.
Sandbox names belong to their tenant, so bob may name a sandbox of
alice's; he must never hear of her files changing (which would tell him
what she works on and when), whether she changes them through the HTTP
API, an MCP tool or a run in the sandbox.

The pair pattern of test_tenant_attacks: against the normal build bob's
stream carries only his own sandbox's update; against the unsafe debug
build with the tenant check switched off
(CODECAGE_DEBUG_DISABLE=mcp-listen-tenant) alice's changes reach it first.
No timing is involved: the server tells subscriptions of changes in the
order they happened, and alice's come before bob's own write."""
import http.client
import json
import os

import pytest

from conftest import BUILD, DEBUG_BUILD
from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef01"
V2026 = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": {}}
SUB_ID = "io.modelcontextprotocol/subscriptionId"


@pytest.fixture(params=[None, "mcp-listen-tenant"])
def target(request, tmp_path):
    tenants = {"alice": ALICE, "bob": BOB}
    if request.param is None:
        server = Server(tmp_path, tenants=tenants, build=BUILD)
    else:
        server = Server(tmp_path, tenants=tenants, build=DEBUG_BUILD,
                        env=dict(os.environ, CODECAGE_DEBUG_DISABLE=request.param))
    server.protected = request.param is None
    yield server
    server.stop()


def modern(server, token, method, params, id=1):
    """One request of revision 2026-07-28 over HTTP: its JSON-RPC answer."""
    headers = {"Accept": "application/json", "MCP-Protocol-Version": V2026, "Mcp-Method": method}
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    r = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": id, "method": method,
                                        "params": {**params, "_meta": META}},
                       token=token, headers=headers, unix=False)
    assert r.status == 200, (r.status, r.body)
    return r.json


def tool(server, token, name, arguments):
    doc = modern(server, token, "tools/call", {"name": name, "arguments": arguments})
    assert doc["result"].get("isError") is not True, doc
    return doc["result"]


def events(resp):
    data = []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if line.startswith(b"data: "):
            data.append(line[6:])
        elif not line and data:
            yield json.loads(b"".join(data))
            data = []


def listen(server, token, uris):
    """A subscription of token's tenant to uris: (connection, its events)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/mcp", json.dumps({
        "jsonrpc": "2.0", "id": "spy", "method": "subscriptions/listen",
        "params": {"notifications": {"resourceSubscriptions": uris}, "_meta": META}}), {
        "Content-Type": "application/json", "Accept": "text/event-stream",
        "Authorization": f"Bearer {token}", "MCP-Protocol-Version": V2026,
        "Mcp-Method": "subscriptions/listen"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    stream = events(resp)
    ack = next(stream)
    # The acknowledgement says nothing of whose sandbox a name is.
    assert ack["params"] == {"notifications": {"resourceSubscriptions": uris},
                             "_meta": {SUB_ID: "spy"}}, ack
    return conn, stream


CHANGES = {
    "http-api": lambda s: s.ok("POST", "/v1/sandboxes/shared/files", {
        "path": "plans.txt", "content": "alice's plans"}, token=ALICE),
    "mcp-tool": lambda s: tool(s, ALICE, "file_write", {
        "sandbox": "shared", "path": "plans.txt", "content": "alice's plans"}),
    "run": lambda s: tool(s, ALICE, "run_shell", {
        "sandbox": "shared", "command": "echo alice > plans.txt"}),
}


@pytest.mark.parametrize("change", CHANGES)
def test_another_tenants_file_changes_never_reach_a_subscription(target, change):
    tool(target, ALICE, "sandbox_create", {"name": "shared"})
    tool(target, BOB, "sandbox_create", {"name": "mine"})
    theirs = "codecage://sandboxes/shared/files/plans.txt"
    own = "codecage://sandboxes/mine/files/notes.txt"
    conn, stream = listen(target, BOB, [theirs, own])
    try:
        CHANGES[change](target)  # alice changes her file...
        tool(target, BOB, "file_write", {"sandbox": "mine", "path": "notes.txt",
                                         "content": "x"})  # ...then bob his
        first = next(stream)
        assert first["method"] == "notifications/resources/updated"
        assert first["params"]["_meta"] == {SUB_ID: "spy"}
        leaked = first["params"]["uri"] == theirs
        assert leaked != target.protected, first
        if target.protected:
            assert first["params"]["uri"] == own
    finally:
        conn.close()


def test_a_subscriber_that_never_reads_holds_up_no_one_else(tmp_path):
    """One thread tells every subscription of its changes. Bob subscribes
    64 long names of one file of his, never reads his stream and changes
    the file until his stream's queue (4 MiB) is full: a server that then
    waited for room held every other tenant's updates until bob's
    connection timed out (a minute). Now bob loses his stream and alice
    hears of her change at once. No debug switch: the normal build only."""
    import socket
    import threading
    server = Server(tmp_path, tenants={"alice": ALICE, "bob": BOB}, build=BUILD)
    hog = socket.socket()
    try:
        tool(server, BOB, "sandbox_create", {"name": "mine"})
        tool(server, ALICE, "sandbox_create", {"name": "hers"})
        tool(server, BOB, "file_write", {"sandbox": "mine", "path": "f.txt", "content": "0"})
        # 64 names of one file, each ~8 KiB (distinct: equal ones count once)
        uris = ["codecage://sandboxes/mine/files/" + "./" * (3990 + i) + "f.txt" for i in range(64)]
        body = json.dumps({"jsonrpc": "2.0", "id": "hog", "method": "subscriptions/listen",
                           "params": {"notifications": {"resourceSubscriptions": uris},
                                      "_meta": META}}).encode()
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.connect(("127.0.0.1", server.port))
        hog.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % server.port +
                    b"Content-Type: application/json\r\nAccept: text/event-stream\r\n" +
                    b"Authorization: Bearer " + BOB.encode() + b"\r\n" +
                    b"MCP-Protocol-Version: " + V2026.encode() + b"\r\n" +
                    b"Mcp-Method: subscriptions/listen\r\n" +
                    b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head = b""  # the acknowledgement, whole: subscribed; then bob reads no more
        while b"acknowledged" not in head or b"\n\n" not in head[head.index(b"acknowledged"):]:
            chunk = hog.recv(65536)
            assert chunk, head[:300]
            head += chunk
        assert b" 200 " in head.split(b"\r\n")[0], head[:300]
        for i in range(40):  # ~512 KiB of updates each: past the 4 MiB queue
            server.ok("POST", "/v1/sandboxes/mine/files", {"path": "f.txt", "content": str(i)},
                      token=BOB)
        conn, stream = listen(server, ALICE, ["codecage://sandboxes/hers/files/a.txt"])
        got = []
        reader = threading.Thread(target=lambda: got.append(next(stream)), daemon=True)
        try:
            reader.start()
            tool(server, ALICE, "file_write", {"sandbox": "hers", "path": "a.txt",
                                               "content": "x"})
            reader.join(30)  # a held-up hub: ~60 s, bob's idle timeout
            assert got and got[0]["params"]["uri"].endswith("/hers/files/a.txt"), got
        finally:
            conn.close()
    finally:
        hog.close()
        server.stop()
