"""What tenants share and what they do not, and what the audit log says about
it: attempts on another tenant's sandboxes and runs (auth.deny "forbidden"
over HTTP and MCP, the client seeing only "not found"), artifact reads
(file.read), the peer of refused requests, credentials in query strings,
the operator-only pool statistics, and the per-tenant secret allowlist
(tenants[].secrets)."""
import json
import os

import pytest

from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef01"
OPS = "ops-token-0123456789abcdef012"
ALICE_KEY = "ak-7f3a9c0e5b1d4a28c6e1"
BOB_KEY = "bk-0e5b1d4a28c6e17f3a9c"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    extra = {
        "secrets": {"ALICE_KEY": {"value": ALICE_KEY}, "BOB_KEY": {"value": BOB_KEY}},
        "tenants": [
            {"name": "alice", "token": ALICE, "secrets": ["ALICE_KEY"]},
            {"name": "bob", "token": BOB, "secrets": ["BOB_KEY"]},
            {"name": "ops", "token": OPS, "operator": True},
        ],
    }
    s = Server(tmp_path_factory.mktemp("tenancy"), extra=extra)
    yield s
    s.stop()


def records(server, event, **match):
    return [r for r in server.audit_records()
            if r["event"] == event and all(r.get(k) == v for k, v in match.items())]


def test_bobs_attempts_on_alices_sandbox_are_audited(server):
    server.ok("POST", "/v1/sandboxes", {"name": "ledger"}, token=ALICE)
    attempts = [("GET", "/v1/sandboxes/ledger", None),
                ("POST", "/v1/sandboxes/ledger/exec", {"script": "cat /workspace/*"}),
                ("GET", "/v1/sandboxes/ledger/files/notes.txt", None),
                ("DELETE", "/v1/sandboxes/ledger", None)]
    for method, path, body in attempts:
        r = server.request(method, path, body, token=BOB)
        assert r.status == 404 and r.error_code() == "not_found", (path, r.body)
    denied = records(server, "auth.deny", tenant="bob", sandbox="ledger")
    assert [(d["method"], d["route"]) for d in denied] == [(m, p) for m, p, _ in attempts]
    assert all(d["reason"] == "forbidden" and d["remote"] == "unix:uid=0" for d in denied)
    # A name nobody has is only "not found", and alice's sandbox is intact.
    assert server.request("GET", "/v1/sandboxes/nobody-has-it", token=BOB).status == 404
    assert records(server, "auth.deny", sandbox="nobody-has-it") == []
    assert server.ok("GET", "/v1/sandboxes/ledger", token=ALICE)["state"] == "running"


def test_a_tenant_with_its_own_sandbox_of_that_name_is_no_attempt(server):
    server.ok("POST", "/v1/sandboxes", {"name": "shared-name"}, token=ALICE)
    server.ok("POST", "/v1/sandboxes", {"name": "shared-name"}, token=BOB)
    r = server.request("GET", "/v1/sandboxes/shared-name/files/missing.txt", token=BOB)
    assert r.status == 404
    assert records(server, "auth.deny", sandbox="shared-name") == []


def test_artifact_reads_and_attempts_on_runs_are_audited(server):
    run = server.ok("POST", "/v1/run", {"command": "mkdir -p output && echo 42 > output/r.txt"},
                    token=ALICE)
    path = f"/v1/runs/{run['run_id']}/files/output/r.txt"
    assert server.request("GET", path, token=ALICE).body == b"42\n"
    read = records(server, "file.read", tenant="alice", sandbox=run["run_id"])
    assert [(r["path"], r["size"]) for r in read] == [("output/r.txt", 3)]
    assert server.request("GET", path, token=BOB).status == 404
    denied = records(server, "auth.deny", tenant="bob", sandbox=run["run_id"])
    assert len(denied) == 1 and denied[0]["reason"] == "forbidden" and denied[0]["route"] == path
    assert records(server, "file.read", tenant="bob") == []


def mcp(server, token, method, params, sid=None):
    headers = {"Accept": "application/json"}
    if sid:
        headers["Mcp-Session-Id"] = sid
    r = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": method,
                                        "params": params}, token=token, headers=headers,
                       unix=False)
    assert r.status == 200, r.body
    return r.json, r.headers.get("Mcp-Session-Id") or sid


def test_attempts_over_mcp_are_audited(server):
    server.ok("POST", "/v1/sandboxes", {"name": "vault"}, token=ALICE)
    _, sid = mcp(server, BOB, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                             "clientInfo": {"name": "bob", "version": "1"}})
    doc, _ = mcp(server, BOB, "tools/call",
                 {"name": "file_read", "arguments": {"sandbox": "vault", "path": "a.txt"}}, sid)
    assert doc["result"]["isError"] is True
    doc, _ = mcp(server, BOB, "resources/read",
                 {"uri": "codecage://sandboxes/vault/files/a.txt"}, sid)
    assert doc["error"]["code"] == -32002
    denied = records(server, "auth.deny", tenant="bob", sandbox="vault")
    assert [d["call"] for d in denied] == ["tools/call file_read", "resources/read"]
    assert all(d["reason"] == "forbidden" and d["remote"].startswith("127.0.0.1:") and
               d["route"] == "/mcp" for d in denied)


def test_a_refused_token_is_audited_with_the_peer_and_without_the_query(server):
    leak = "hunter2-in-a-query-string"
    assert server.request("GET", f"/v1/sandboxes?access_token={leak}", unix=False).status == 401
    assert server.request("GET", f"/v1/pool?token={leak}", token="x" * 20).status == 401
    denied = records(server, "auth.deny", reason="missing_token", route="/v1/sandboxes")
    assert denied and denied[-1]["remote"].startswith("127.0.0.1:"), denied
    assert denied[-1]["method"] == "GET" and denied[-1]["tenant"] is None
    bad = records(server, "auth.deny", reason="bad_token", route="/v1/pool")
    assert bad and bad[-1]["remote"] == "unix:uid=0"
    assert leak not in server.audit_path.read_text()
    assert leak not in server.log_text()


def test_pool_statistics_are_for_operators(server):
    for token in (ALICE, BOB):
        r = server.request("GET", "/v1/pool", token=token)
        assert r.status == 403 and "operator" in r.json["error"]["message"], r.body
    assert records(server, "auth.deny", tenant="alice", route="/v1/pool")[0]["reason"] == \
        "forbidden"
    stats = server.ok("GET", "/v1/pool", token=OPS)
    assert {"size", "ready", "hits", "misses"} <= set(stats)


def test_pool_statistics_without_tenants(tmp_path):
    s = Server(tmp_path)
    try:
        assert "hits" in s.ok("GET", "/v1/pool")
    finally:
        s.stop()


@pytest.mark.parametrize("route,body", [
    ("/v1/run", {"command": "echo $ALICE_KEY | rev"}),
    ("/v1/python", {"code": "import os; os.environ['ALICE_KEY'][::-1]"}),
    ("/v1/sandboxes", {"name": "thief"}),
])
def test_a_tenant_cannot_name_another_tenants_secret(server, route, body):
    r = server.request("POST", route, dict(body, secrets=["ALICE_KEY"]), token=BOB)
    assert r.status == 403 and "secrets[0]" in r.json["error"]["message"], r.body
    assert ALICE_KEY[::-1] not in r.body.decode()
    assert records(server, "secret.inject", tenant="bob") == []
    deny = [d for d in records(server, "policy.deny", tenant="bob") if d.get("field") == "secrets[0]"]
    assert deny, server.audit_records()[-3:]


def test_each_tenant_uses_its_own_secret(server):
    r = server.ok("POST", "/v1/run", {"command": "echo $BOB_KEY | rev", "secrets": ["BOB_KEY"]},
                  token=BOB)
    assert r["stdout"].strip()[::-1] == BOB_KEY
    r = server.ok("POST", "/v1/python", {"code": "import os; os.environ['ALICE_KEY'][::-1]",
                                         "secrets": ["ALICE_KEY"]}, token=ALICE)
    assert r["return_value"][::-1] == ALICE_KEY
    # A tenant whose entry lists no secrets may use all of them.
    r = server.ok("POST", "/v1/run", {"command": "echo $ALICE_KEY | rev", "secrets": ["ALICE_KEY"]},
                  token=OPS)
    assert r["stdout"].strip()[::-1] == ALICE_KEY


def test_a_stored_sandbox_rechecks_its_secrets_when_the_config_changes(tmp_path):
    """bob's sandbox keeps its spec across restarts; once the operator takes
    the secret away from bob, the sandbox no longer starts with it."""
    cfg = {"secrets": {"KEY": {"value": BOB_KEY}}, "tenants": [{"name": "bob", "token": BOB}]}
    s = Server(tmp_path, extra=cfg)
    try:
        s.ok("POST", "/v1/sandboxes", {"name": "keeper", "secrets": ["KEY"]}, token=BOB)
        s.stop()
        cfg["tenants"][0]["secrets"] = []
        config = json.loads(s.config_path.read_text())
        config.update(cfg)
        s.config_path.write_text(json.dumps(config))
        s.start()
        r = s.request("POST", "/v1/sandboxes/keeper/exec", {"script": "echo $KEY | rev"}, token=BOB)
        assert r.status == 403 and "secrets[0]" in r.json["error"]["message"], r.body
        assert BOB_KEY[::-1] not in r.body.decode()
    finally:
        s.stop()
