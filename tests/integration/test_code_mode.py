"""Code mode: upstream MCP servers named in the server config appear inside
Python sessions as tools.<name>(...), called by codecage as their MCP
client, within the config's allowlist and the run's host-call budget."""
import json
import os

import pytest

from serverlib import Server

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "upstream_mcp_server.py")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")


@pytest.fixture
def server(tmp_path):
    calls = tmp_path / "upstream-calls.jsonl"
    s = Server(tmp_path, extra={"upstream_servers": [{
        "name": "demo", "command": ["/usr/bin/python3", FIXTURE, str(calls)],
        "allow": ["add", "echo", "fail"]}]})
    s.calls = calls
    yield s
    s.stop()


def py(server, code, **kw):
    return server.ok("POST", "/v1/python", {"code": code, **kw})


def upstream_calls(server):
    if not server.calls.exists():
        return []
    return [json.loads(line) for line in server.calls.read_text().splitlines()]


def test_tools_are_called_through_the_upstream_server(server):
    r = py(server, "r = tools.add(a=2, b=40)\nprint(tools.echo(text='hi'))\nr['sum']")
    assert r["status"] == "ok", r
    assert r["return_value"] == 42 and r["stdout"] == "hi\n"
    assert upstream_calls(server) == [{"tool": "add", "arguments": {"a": 2, "b": 40}},
                                      {"tool": "echo", "arguments": {"text": "hi"}}]


def test_list_shows_only_allowed_tools(server):
    r = py(server, "sorted(t['name'] for t in tools.list())")
    assert r["return_value"] == ["add", "echo", "fail"]


def test_a_tool_outside_the_allowlist_never_reaches_the_upstream(server):
    r = py(server, "tools.forbidden()")
    assert r["status"] == "error" and r["error"]["type"] == "HostCallError"
    assert "no upstream MCP server has this tool" in r["error"]["message"]
    assert upstream_calls(server) == []


def test_tool_errors_raise_in_python(server):
    r = py(server, "try:\n    tools.fail()\nexcept Exception as e:\n    msg = str(e)\nmsg")
    assert "always fails" in r["return_value"]


def test_the_budget_stops_calls_before_they_reach_the_upstream(server):
    r = py(server, "[tools.add(a=i, b=0) for i in range(5)]", host_budget=3)
    assert r["error"]["type"] == "HostCallBudgetExceeded"
    assert len(upstream_calls(server)) == 3


def test_sessions_of_named_sandboxes_use_the_tools_too(server):
    server.ok("POST", "/v1/sandboxes", {"name": "cm"})
    r = server.ok("POST", "/v1/sandboxes/cm/python", {"code": "tools.add(a=1, b=1)['sum']"})
    assert r["return_value"] == 2
