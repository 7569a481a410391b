"""Hostile bytes in the parts of a request the server quotes back or logs:
names in the URL that decode to invalid UTF-8 get a 400 with a JSON body
(not a closed connection), and a method full of terminal escapes reaches
the server's log escaped."""
import os
import socket

import pytest

from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("http-input"), unix=False)
    s.ok("POST", "/v1/sandboxes", {"name": "box"})
    yield s
    s.stop()


@pytest.mark.parametrize("path", [
    "/v1/sandboxes/%FF",
    "/v1/sandboxes/a%FFb/files",
    "/v1/sandboxes/%C3%28/exec",
    "/v1/runs/%FF/files/output/x",
    "/v1/sandboxes/box/python/variables/%FF",
    "/v1/sandboxes/box/python/variables/x%FE%FF",
])
def test_invalid_utf8_in_a_name_is_a_400(server, path):
    method = "POST" if path.endswith("/exec") else "GET"
    body = {"script": "true"} if method == "POST" else None
    r = server.request(method, path, body)
    assert r.status == 400, (path, r.status, r.body)
    assert r.error_code() == "invalid_request"
    message = r.json["error"]["message"]
    assert "\ufffd" in message or "%" in message, message
    assert server.alive()


def raw_request(server, data):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out
    finally:
        s.close()


def test_terminal_escapes_in_the_method_are_escaped_in_the_log(server):
    method = b"G\x1b]0;x\x07\x1b[2J\x9bT"  # the log keeps 15 bytes of a method
    raw_request(server, method + b" /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    raw_request(server, b"GET /v1/\x1b[31mred HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert server.alive()
    log = server.log_path.read_bytes()
    assert b"\x1b" not in log and b"\x07" not in log and b"\x9b" not in log
    assert b"method=G%1B]0;x%07%1B[2J%9BT " in log, log[-2000:]


def test_error_messages_quote_bytes_escaped(server):
    r = server.request("GET", "/v1/sandboxes/%1B%5B2J")
    assert r.status == 400 and "\x1b" not in r.json["error"]["message"]


def test_invalid_utf8_in_a_file_path_is_answered(server):
    """File names are bytes: a path that decodes to invalid UTF-8 is looked
    up (and not found here); the error quoting it still goes out as JSON."""
    r = server.request("GET", "/v1/sandboxes/box/files/%FF")
    assert r.status == 404 and r.error_code() == "not_found"


@pytest.mark.parametrize("uri", [
    "codecage://sandboxes/box/files/%FF",
    "codecage://sandboxes/box/files/a%C3%28b",
    "codecage://runs/" + "a" * 32 + "/output/%FF",
])
def test_invalid_utf8_in_a_resource_uri_is_answered(server, uri):
    headers = {"Accept": "application/json"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}
    r = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                        "params": init}, headers=headers)
    headers["Mcp-Session-Id"] = r.headers["Mcp-Session-Id"]
    r = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                                        "params": {"uri": uri}}, headers=headers)
    assert r.status == 200 and r.json["error"]["code"] == -32002, r.body
