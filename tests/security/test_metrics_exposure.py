"""The metrics listener (listen.metrics) asks for no token: it must serve
/metrics, /healthz and /readyz and nothing else, or anyone on the machine
could run code as any tenant through it; and a web page that rebinds its
name to 127.0.0.1 must not read it (Host check). /metrics itself must not
carry a token or a secret value.

Pair pattern (seclib, test_rebinding_attacks): each attack on the normal
build must be refused, and must succeed on the unsafe debug build with the
protection switched off (CODECAGE_DEBUG_DISABLE=metrics-routes, http-host),
so the test shows which check stops it."""
import http.client
import json
import os

import pytest

from conftest import BUILD, DEBUG_BUILD
from serverlib import Server, free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

TOKEN = "alice-token-0123456789abcdef"
SECRET = "sk-metrics-7f3a9c0e5b1d4a28"


@pytest.fixture(params=["protected", "metrics-routes", "http-host"])
def target(request, tmp_path):
    port = free_port()
    extra = {"tenants": [{"name": "alice", "token": TOKEN}],
             "secrets": {"API_KEY": {"value": SECRET}},
             "listen": {"http": f"127.0.0.1:{free_port()}", "unix": str(tmp_path / "api.sock"),
                        "metrics": f"127.0.0.1:{port}"}}
    if request.param == "protected":
        s = Server(tmp_path, extra=extra, build=BUILD)
    else:
        s = Server(tmp_path, extra=extra, build=DEBUG_BUILD,
                   env=dict(os.environ, CODECAGE_DEBUG_DISABLE=request.param))
    s.mode = request.param
    s.metrics_port = port
    yield s
    s.stop()


def on_metrics_listener(s, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", s.metrics_port, timeout=60)
    h = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    return r.status, r.read()


def test_the_metrics_listener_runs_nothing(target):
    status, body = on_metrics_listener(target, "POST", "/v1/run",
                                       {"command": "echo metrics-pwned"})
    ran = [r for r in target.audit_records() if r["event"] == "run.start"]
    if target.mode == "metrics-routes":
        assert status == 200 and "metrics-pwned" in body.decode(), body
        assert ran
    else:
        assert status == 404, body
        assert not ran


def test_a_rebinding_page_cannot_read_metrics(target):
    evil = {"Host": f"rebind.attacker.example:{target.metrics_port}"}
    status, body = on_metrics_listener(target, "GET", "/metrics", headers=evil)
    if target.mode == "http-host":
        assert status == 200 and b"codecage_runs_total" in body
    else:
        assert status == 403, body


def test_metrics_carry_no_token_or_secret(target):
    target.ok("POST", "/v1/run", {"command": "true", "secrets": ["API_KEY"]}, token=TOKEN)
    status, body = on_metrics_listener(target, "GET", "/metrics")
    assert status == 200
    text = body.decode()
    assert TOKEN not in text and SECRET not in text
    assert 'tenant="alice"' in text
