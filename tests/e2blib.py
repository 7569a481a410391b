"""A raw client of codecage's E2B listener (docs/E2B.md), for the tests that
drive the E2B HTTP API without an SDK (tests/security/test_e2b_attacks.py,
tests/integration/test_e2b_images.py): the control plane with an API key,
envd's Process/Start and /files with a sandbox's envd token, the code
interpreter's /execute with its traffic token."""
import base64
import http.client
import json
import struct
from urllib.parse import quote


class E2B:
    def __init__(self, port, key):
        self.port = port
        self.key = key

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def control(self, method, path, body=None, key=None):
        """A control-plane call: (status, parsed JSON body or None)."""
        headers = {"X-API-Key": key or self.key}
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(body)
        status, raw = self.request(method, path, body, headers)
        return status, json.loads(raw) if raw else None

    def create(self, key=None, **fields):
        status, body = self.control("POST", "/v2/sandboxes", {"templateID": "base", **fields},
                                    key=key)
        assert status == 201, (status, body)
        return body

    @staticmethod
    def sandbox_headers(sbx, port, token_header, token):
        return {"E2b-Sandbox-Id": sbx["sandboxID"], "E2b-Sandbox-Port": str(port),
                token_header: token}

    def run(self, sbx, command, token_header="X-Access-Token", token=None, shell="/bin/bash"):
        """Process/Start of `shell -c command`: (HTTP status, stdout)."""
        msg = json.dumps({"process": {"cmd": shell, "args": ["-c", command]}}).encode()
        headers = self.sandbox_headers(sbx, 49983, token_header,
                                       token if token is not None else sbx["envdAccessToken"])
        headers["Content-Type"] = "application/connect+json"
        status, body = self.request("POST", "/process.Process/Start",
                                    struct.pack(">BI", 0, len(msg)) + msg, headers)
        out = b""
        while status == 200 and len(body) >= 5:
            flags, n = struct.unpack(">BI", body[:5])
            frame, body = json.loads(body[5:5 + n]), body[5 + n:]
            data = frame.get("event", {}).get("data", {})
            if "stdout" in data:
                out += base64.b64decode(data["stdout"])
        return status, out.decode(errors="replace")

    def read(self, sbx, path, token_header="X-Access-Token", token=None):
        headers = self.sandbox_headers(sbx, 49983, token_header,
                                       token if token is not None else sbx["envdAccessToken"])
        return self.request("GET", "/files?path=" + quote(path, safe=""), headers=headers)

    def write(self, sbx, path, data):
        """POST /files with an application/octet-stream body."""
        headers = self.sandbox_headers(sbx, 49983, "X-Access-Token", sbx["envdAccessToken"])
        headers["Content-Type"] = "application/octet-stream"
        return self.request("POST", "/files?path=" + quote(path, safe=""), data, headers)

    def execute(self, sbx, code, token=None):
        """The code interpreter's /execute: (HTTP status, its NDJSON lines)."""
        headers = self.sandbox_headers(sbx, 49999, "E2B-Traffic-Access-Token",
                                       token if token is not None else sbx["trafficAccessToken"])
        headers["Content-Type"] = "application/json"
        status, body = self.request("POST", "/execute", json.dumps({"code": code}), headers)
        if status != 200:
            return status, []
        return status, [json.loads(line) for line in body.splitlines() if line.strip()]
