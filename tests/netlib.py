"""Test fixtures for sandbox network egress (the proxy, `files` by URL and pip
`requirements`), used by tests/integration/test_network.py,
tests/integration/test_requirements.py and tests/security/test_egress_attacks.py.

Everything stays on the host's loopback (127.0.0.x): nothing here ever
needs or touches the internet.

- Names: the server runs in a private mount namespace whose /etc/hosts is
  ours (hosts_prefix), so allowed.test & co. resolve to 127.0.0.x for the
  server (the proxy and the URL fetcher) without changing the host's files.
- OriginServer: a threaded HTTP/1.1 server (keep-alive, optional TLS) that
  records every request it gets, so a test can tell "reached" from "not".
- TLS: one self-signed certificate (openssl CLI) for allowed.test,
  *.allowed.test and other.test, the sandbox's CA file.
- RAW_CLIENT: a Python program run inside a sandbox that talks to the proxy
  at 127.0.0.1:3128 with hand-written bytes (pipelined requests, CONNECT then
  a TLS ClientHello with any SNI, non-TLS bytes in a tunnel, ...).
- SimpleIndex: a PEP 503 package index serving wheels built here, counting
  downloads.

Run `python3 tests/netlib.py` (as root) to check the fixtures themselves with
host tools (curl, getent under unshare, pip); it needs no codecage.
"""
import base64
import hashlib
import html
import http.client
import http.server
import io
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import zipfile
from pathlib import Path

from conftest import last_json, wait_until  # noqa: F401 (the suites call them through netlib)

PROXY = "http://127.0.0.1:3128"
PROXY_VARS = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"]
NO_PROXY = "localhost,127.0.0.1,::1"
SANDBOX_PY = "/usr/bin/python3"
CA_PATH = "/workspace/ca.pem"  # where tests put the CA file inside a sandbox

# The names the server resolves (its own /etc/hosts). blocked.test is in no
# allowlist ever: it resolves so that a wrong "allow" would really reach
# the origin, which the tests would see.
HOSTS = {
    "allowed.test": "127.0.0.1",
    "sub.allowed.test": "127.0.0.1",
    "other.test": "127.0.0.1",
    "allowed.test.evil.test": "127.0.0.1",
    "evilallowed.test": "127.0.0.1",
    "blocked.test": "127.0.0.1",
    "pypi.test": "127.0.0.1",
    "rebind.test": "127.0.0.2",
}
# The loopback address the origins live on and the server may reach
# (network.allow_private); rebind.test's 127.0.0.2 stays outside it.
ORIGIN_ADDR = "127.0.0.1"
REBIND_ADDR = "127.0.0.2"
ALLOW_PRIVATE = [f"{ORIGIN_ADDR}/32"]

TIMEOUT = 10  # seconds, every socket of the fixtures


def write_hosts(path, extra=None):
    """Writes an /etc/hosts for the server's mount namespace."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    for name, addr in {**HOSTS, **(extra or {})}.items():
        lines.append(f"{addr} {name}")
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def hosts_prefix(hosts_path):
    """argv to put in front of a command so that it runs in a private mount
    namespace where hosts_path is bound over /etc/hosts (Server(prefix=...))."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts_path)]


def resolve_in_prefix(hosts_path, name, timeout=10):
    """What `getent hosts name` answers under hosts_prefix (fixture self-check)."""
    proc = subprocess.run([*hosts_prefix(hosts_path), "getent", "hosts", name],
                          capture_output=True, text=True, timeout=timeout)
    return proc.stdout.split()[0] if proc.returncode == 0 and proc.stdout else None


# --- TLS --------------------------------------------------------------------

class TLSMaterial:
    """A self-signed certificate (it is its own CA) for allowed.test,
    *.allowed.test and other.test, made with the openssl CLI."""

    NAMES = ["allowed.test", "*.allowed.test", "other.test"]

    def __init__(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.cert = directory / "cert.pem"
        self.key = directory / "key.pem"
        san = ",".join(f"DNS:{n}" for n in self.NAMES)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-days", "3", "-subj", "/CN=allowed.test", "-keyout", str(self.key),
             "-out", str(self.cert), "-addext", f"subjectAltName={san}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,digitalSignature,keyCertSign"],
            check=True, capture_output=True, timeout=60)
        self.pem = self.cert.read_text()

    def server_context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx

    def client_context(self):
        return ssl.create_default_context(cafile=str(self.cert))

    def file_entry(self, path="ca.pem"):
        """A `files` entry that puts the CA file at /workspace/<path>."""
        return {"path": path, "content": self.pem}


# --- origin servers ---------------------------------------------------------

class _OriginHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle kept-alive connection is closed after this
    server_version = "codecage-test-origin"

    def log_message(self, *args):
        pass

    def _record(self, body=b""):
        self.server.origin._record({
            "method": self.command, "path": self.path, "host": self.headers.get("Host"),
            "headers": dict(self.headers.items()), "peer": self.client_address[0],
            "tls": self.server.origin.tls is not None, "body_len": len(body),
            "local": self.connection.getsockname()[0]})

    def _send(self, status, body=b"", ctype="text/plain", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(n) if n > 0 else b""

    def do_GET(self):
        body = self._body() if self.command in ("POST", "PUT") else b""
        self._record(body)
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        route = url.path
        name = self.server.origin.name
        try:
            if route == "/hello":
                self._send(200, f"hello from {name}".encode())
            elif route == "/redirect":
                self._send(int(q.get("code", 302)), b"", headers={"Location": q.get("to", "/hello")})
            elif route == "/bytes":
                self._bytes(int(q.get("n", 0)))
            elif route == "/echo":
                self._send(200, body, ctype="application/octet-stream")
            elif route == "/slow":
                self._slow(float(q.get("s", 1)))
            elif route == "/host":
                self._send(200, (self.headers.get("Host") or "").encode())
            else:
                self._send(404, b"not found\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
            self.close_connection = True

    do_POST = do_PUT = do_HEAD = do_DELETE = do_GET

    def _bytes(self, n):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = b"x" * 65536
        left = n
        while left > 0:
            part = chunk[:min(left, len(chunk))]
            self.wfile.write(part)
            left -= len(part)

    def _slow(self, seconds):
        """Content-Length: N (seconds, at least 1), one byte per second."""
        n = max(1, int(seconds))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        self.wfile.flush()
        for _ in range(n):
            time.sleep(seconds / n)
            self.wfile.write(b".")
            self.wfile.flush()


class _OriginHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def finish_request(self, request, client_address):
        origin = self.origin
        request.settimeout(TIMEOUT * 3)
        if origin.tls_context is not None:
            try:
                request = origin.tls_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                origin._record({"method": None, "path": None, "host": None, "headers": {},
                                "peer": client_address[0], "tls": True, "body_len": 0,
                                "local": None, "handshake_error": str(e)})
                try:
                    request.close()
                except OSError:
                    pass
                return
        try:
            self.RequestHandlerClass(request, client_address, self)
        except (OSError, ssl.SSLError):
            pass

    def handle_error(self, request, client_address):
        pass


class OriginServer:
    """An HTTP/1.1 origin on address:0 (optionally TLS) recording each request:
    {method, path, host (the Host header), headers, peer, tls, body_len}, and
    for TLS the SNI names of the handshakes. Endpoints: /hello ("hello from
    NAME"), /redirect?to=URL[&code=302], /bytes?n=N, /echo (POST body back),
    /slow?s=N (N bytes, one a second), /host (the Host header back)."""

    def __init__(self, name, address=ORIGIN_ADDR, tls=None, port=0):
        self.name = name
        self.address = address
        self.tls = tls
        self.tls_context = None
        self._lock = threading.Lock()
        self._requests = []
        self.snis = []
        if tls is not None:
            self.tls_context = tls.server_context()
            self.tls_context.sni_callback = self._sni
        self.httpd = _OriginHTTPServer((address, port), _OriginHandler)
        self.httpd.origin = self
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True, name=f"origin-{name}")
        self.thread.start()

    def _sni(self, sslobj, name, ctx):
        with self._lock:
            self.snis.append(name)

    def _record(self, rec):
        rec["time"] = time.monotonic()
        with self._lock:
            self._requests.append(rec)

    @property
    def requests(self):
        with self._lock:
            return [r for r in self._requests if r.get("method")]

    @property
    def handshake_errors(self):
        with self._lock:
            return [r for r in self._requests if r.get("handshake_error")]

    def matching(self, marker):
        """The requests whose path contains marker."""
        return [r for r in self.requests if marker in (r["path"] or "")]

    def hosts_for(self, marker):
        """The host names (Host header without port) of the requests with marker."""
        return [host_only(r["host"]) for r in self.matching(marker)]

    def clear(self):
        with self._lock:
            self._requests.clear()
            self.snis.clear()

    def url(self, host, path="/hello"):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def host_only(host):
    """'name:port' -> 'name' ('[::1]:80' -> '::1'); None stays None."""
    if host is None:
        return None
    if host.startswith("["):
        return host[1:host.index("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def marker():
    """A unique query string to tell this test's requests apart."""
    return "m=" + os.urandom(8).hex()


# --- the raw proxy client, run inside a sandbox -----------------------------

RAW_CLIENT = r'''
import json, socket, ssl, sys, time
PROXY = ("127.0.0.1", 3128)
conns, bufs, out = {}, {}, []

def recv_some(c, n=65536):
    return conns[c].recv(n)

def read_head(c):
    while b"\r\n\r\n" not in bufs[c]:
        d = recv_some(c)
        if not d:
            raise EOFError("closed before the response head (got %r)" % bufs[c][:200])
        bufs[c] += d
    head, _, rest = bufs[c].partition(b"\r\n\r\n")
    bufs[c] = rest
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers

def read_n(c, n):
    while len(bufs[c]) < n:
        d = recv_some(c)
        if not d:
            raise EOFError("closed after %d of %d body bytes" % (len(bufs[c]), n))
        bufs[c] += d
    data, bufs[c] = bufs[c][:n], bufs[c][n:]
    return data

def read_line(c):
    while b"\r\n" not in bufs[c]:
        d = recv_some(c)
        if not d:
            raise EOFError("closed in a chunked body")
        bufs[c] += d
    line, _, bufs[c] = bufs[c].partition(b"\r\n")
    return line

def read_close(c):
    data = bufs[c]
    bufs[c] = b""
    while True:
        d = recv_some(c)
        if not d:
            return data
        data += d

def response(c, method="GET", connect=False):
    r = {}
    got = b""
    try:
        status, reason, headers = read_head(c)
        r.update(status=status, reason=reason, headers=headers)
        if connect and status == 200:
            return r
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "content-length" in headers:
            body = read_n(c, int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(read_line(c).split(b";")[0], 16)
                if size == 0:
                    while read_line(c):
                        pass
                    break
                body += read_n(c, size)
                read_n(c, 2)
        else:
            body = read_close(c)
        got = body
        r["complete"] = True
    except Exception as e:
        got = bufs.get(c, b"")
        r["error"] = "%s: %s" % (type(e).__name__, e)
        r["complete"] = False
    r["body_len"] = len(got)
    r["body"] = got[:4000].decode("utf-8", "replace")
    return r

def op(o):
    c = o.get("id", "c")
    kind = o["op"]
    t0 = time.monotonic()
    r = {"op": kind, "id": c}
    try:
        if kind == "open":
            s = socket.create_connection(tuple(o.get("addr", PROXY)), timeout=o.get("timeout", 10))
            conns[c], bufs[c] = s, b""
        elif kind == "send":
            # fill: that many more bytes ("u") after data (bodies over argv's limit)
            conns[c].sendall(o["data"].encode("latin-1"))
            left = o.get("fill", 0)
            while left > 0:
                n = min(left, 65536)
                conns[c].sendall(b"u" * n)
                left -= n
        elif kind == "response":
            if "timeout" in o:
                conns[c].settimeout(o["timeout"])
            r.update(response(c, o.get("method", "GET"), o.get("connect", False)))
        elif kind == "tls":
            assert not bufs[c], "bytes left before the TLS handshake"
            ctx = ssl.create_default_context(cafile=o["cafile"]) if o.get("cafile") else ssl._create_unverified_context()
            conns[c] = ctx.wrap_socket(conns[c], server_hostname=o["sni"])
            r["version"] = conns[c].version()
        elif kind == "recv_close":
            conns[c].settimeout(o.get("timeout", 5))
            data = b""
            try:
                while True:
                    d = conns[c].recv(65536)
                    if not d:
                        r["closed"] = True
                        break
                    data += d
            except socket.timeout:
                r["closed"] = False
            except (ConnectionResetError, ssl.SSLError) as e:
                r["closed"] = True
                r["reset"] = str(e)
            r["data"] = data[:2000].decode("utf-8", "replace")
        elif kind == "sleep":
            time.sleep(o["s"])
        elif kind == "close":
            conns.pop(c).close()
        else:
            raise ValueError("unknown op " + kind)
        r["ok"] = True
    except Exception as e:
        r["ok"] = False
        r["error"] = "%s: %s" % (type(e).__name__, e)
    r["ms"] = int((time.monotonic() - t0) * 1000)
    return r

for o in json.loads(sys.argv[1]):
    out.append(op(o))
print(json.dumps({"results": out}))
'''


def raw_argv(ops):
    """argv for a /v1/run body that runs RAW_CLIENT over ops, a list of
    {"op": "open"|"send"|"response"|"tls"|"recv_close"|"sleep"|"close",
    "id": connection name, ...}. Its stdout's last line is
    {"results": [one dict per op]}."""
    return [SANDBOX_PY, "-c", RAW_CLIENT, json.dumps(ops)]


def get(url, host=None, extra_headers="", method="GET", body=""):
    """An absolute-form proxy request as text (Host header = the URL's host
    unless host is given)."""
    u = urllib.parse.urlsplit(url)
    hdr_host = host if host is not None else u.netloc
    length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
    return f"{method} {url} HTTP/1.1\r\nHost: {hdr_host}\r\n{length}{extra_headers}\r\n{body}"


def connect(authority):
    return f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"


def results_of(result):
    """The RAW_CLIENT results from a run result (asserts it printed them)."""
    doc = last_json(result.get("stdout", ""))
    assert doc and "results" in doc, result
    return doc["results"]


# --- config and the shared world of a test session --------------------------

def allow_entries(names, ports):
    """Allowlist entries for every name on every port ("name:port")."""
    return [f"{n}:{p}" for n in names for p in ports]


# The names (and wildcard) a server of the suites allows on the origins'
# ports; a sandbox's own list narrows this. blocked.test is never allowed.
SERVER_NAMES = ["allowed.test", "*.allowed.test", "other.test", "allowed.test.evil.test",
                "evilallowed.test"]


class World:
    """What every egress test needs: the hosts file (and the prefix that
    makes the server use it), the TLS certificate, and three origins:
    `http` and `https` on 127.0.0.1 (the https one serves every name of the
    certificate) and `rebind` on 127.0.0.2 (where rebind.test points)."""

    def __init__(self, tmp):
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.hosts = write_hosts(self.tmp / "hosts")
        self.prefix = hosts_prefix(self.hosts)
        self.tls = TLSMaterial(self.tmp / "tls")
        self.http = OriginServer("http-origin")
        self.https = OriginServer("tls-origin", tls=self.tls)
        self.rebind = OriginServer("rebind-origin", address=REBIND_ADDR)
        self.P = self.http.port
        self.T = self.https.port
        self.R = self.rebind.port

    def server_allow(self):
        """The network.allow of the suites' servers."""
        return ["*", *allow_entries(SERVER_NAMES, [self.P, self.T]), f"rebind.test:{self.R}"]

    def config(self, allow=None, allow_private=None, pip=None, fetch=None, **network):
        """Top-level config keys (Server(extra=...)) for these origins."""
        net = {"allow": self.server_allow() if allow is None else allow,
               "allow_private": ALLOW_PRIVATE if allow_private is None else allow_private}
        net.update(network)
        cfg = {"network": net}
        if pip is not None:
            cfg["pip"] = pip
        if fetch is not None:
            cfg["fetch"] = fetch
        return cfg

    def server(self, tmp, disable=None, extra=None, **config):
        """A codecage server resolving names through our hosts file. disable:
        CODECAGE_DEBUG_DISABLE switches (then the unsafe debug build)."""
        from conftest import BUILD, DEBUG_BUILD
        from serverlib import Server
        import pytest
        cfg = self.config(**config)
        cfg.update(extra or {})
        if disable:
            if not (DEBUG_BUILD / "codecage").exists():
                pytest.fail(f"{DEBUG_BUILD}/codecage is missing: "
                            f"meson setup {DEBUG_BUILD} -Dunsafe_debug=true")
            return Server(Path(tmp), extra=cfg, build=DEBUG_BUILD, prefix=self.prefix,
                          env=dict(os.environ, CODECAGE_DEBUG_DISABLE=disable))
        return Server(Path(tmp), extra=cfg, build=BUILD, prefix=self.prefix)

    def close(self):
        for o in (self.http, self.https, self.rebind):
            o.close()


def require_root():
    import pytest
    if os.geteuid() != 0:
        pytest.skip("needs root: the server's sandboxes, and unshare -m for its /etc/hosts")


def make_world(tmp_path_factory):
    """Body of the session fixture `world` of the suites."""
    require_root()
    for tool in ("unshare", "openssl", "curl"):
        assert shutil.which(tool), f"{tool} is missing: scripts/deps.sh installs it"
    return World(tmp_path_factory.mktemp("egress-world"))


def audit_network(server, event=None, **match):
    """The server's network.* audit records (event: "network.allow" /
    "network.deny"), those whose fields equal match."""
    out = []
    for r in server.audit_records():
        if not r.get("event", "").startswith("network."):
            continue
        if event and r["event"] != event:
            continue
        if all(r.get(k) == v for k, v in match.items()):
            out.append(r)
    return out


# --- MCP ----------------------------------------------------------------------

def mcp_call(server, tool, arguments):
    """One MCP tools/call over the server's /mcp (a fresh session)."""
    hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Host": f"127.0.0.1:{server.port}"}

    def post(msg, extra=None):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            conn.request("POST", "/mcp", json.dumps(msg), {**hdrs, **(extra or {})})
            resp = conn.getresponse()
            return resp, resp.read()
        finally:
            conn.close()

    resp, data = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "pytest", "version": "1"}}})
    assert resp.status == 200, data
    sid = resp.getheader("Mcp-Session-Id")
    extra = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25",
             "Accept": "application/json"}
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, extra)
    resp, data = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}, extra)
    assert resp.status == 200, data
    return json.loads(data)["result"]



# --- a PEP 503 package index ------------------------------------------------

def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def build_wheel(dest, name, version="1.0", value=None):
    """A pure-Python wheel: package `name` whose __init__ has VALUE (default
    "<name>-<version>"). Returns its path."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    value = value if value is not None else f"{name}-{version}"
    files = {
        f"{dist}/__init__.py": f"VALUE = {value!r}\n".encode(),
        f"{dist}-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: codecage test package\n".encode(),
        f"{dist}-{version}.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: codecage-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}-{version}.dist-info/top_level.txt": f"{dist}\n".encode(),
    }
    record_name = f"{dist}-{version}.dist-info/RECORD"
    record = io.StringIO()
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{path},sha256={digest},{len(data)}\n")
    record.write(f"{record_name},,\n")
    files[record_name] = record.getvalue().encode()
    wheel = dest / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel


class _IndexHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="text/html"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        index = self.server.index
        path = urllib.parse.urlsplit(self.path).path
        index._record(self.command, self.path, self.headers.get("Host"))
        parts = [p for p in path.split("/") if p]
        try:
            if parts == ["simple"]:
                links = "".join(f'<a href="/simple/{normalize(n)}/">{html.escape(n)}</a>\n'
                                for n in sorted(index.projects))
                self._send(200, f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode())
            elif len(parts) == 2 and parts[0] == "simple":
                files = index.projects.get(normalize(parts[1]))
                if files is None:
                    self._send(404, b"<html><body>not found</body></html>\n")
                    return
                links = "".join(
                    f'<a href="/files/{f.name}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">'
                    f'{f.name}</a>\n' for f in files)
                self._send(200, f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode())
            elif len(parts) == 2 and parts[0] == "files" and parts[1] in index.files:
                index._count(parts[1])
                self._send(200, index.files[parts[1]].read_bytes(), "application/octet-stream")
            else:
                self._send(404, b"not found\n", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_HEAD = do_GET


class SimpleIndex:
    """A PEP 503 simple index on address:0 serving the given wheels:
    /simple/, /simple/<project>/ (links with #sha256=...), /files/<wheel>.
    downloads[wheel file name] counts the file's downloads."""

    def __init__(self, wheels, address=ORIGIN_ADDR):
        self.files = {Path(w).name: Path(w) for w in wheels}
        self.projects = {}
        for w in self.files.values():
            self.projects.setdefault(normalize(w.name.split("-")[0]), []).append(w)
        self._lock = threading.Lock()
        self.downloads = {}
        self._requests = []
        self.httpd = http.server.ThreadingHTTPServer((address, 0), _IndexHandler)
        self.httpd.daemon_threads = True
        self.httpd.index = self
        self.address = address
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True, name="simple-index")
        self.thread.start()

    def _record(self, method, path, host):
        with self._lock:
            self._requests.append({"method": method, "path": path, "host": host})

    def _count(self, name):
        with self._lock:
            self.downloads[name] = self.downloads.get(name, 0) + 1

    @property
    def requests(self):
        with self._lock:
            return list(self._requests)

    def download_count(self, project):
        with self._lock:
            return sum(n for f, n in self.downloads.items()
                       if normalize(f.split("-")[0]) == normalize(project))

    def url(self, host=None):
        return f"http://{host or self.address}:{self.port}/simple"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def host_pip_install(index_url, trusted_host, requirement, target, timeout=120):
    """Installs with the host's pip (fixture self-check of SimpleIndex)."""
    return subprocess.run(
        ["/usr/bin/python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
         "--no-input", "--target", str(target), "--index-url", index_url,
         "--trusted-host", trusted_host, requirement],
        capture_output=True, text=True, timeout=timeout,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(target),
             "PIP_CONFIG_FILE": os.devnull})


# --- self-test --------------------------------------------------------------

def selftest():
    """Checks the fixtures with host tools only (no codecage)."""
    assert os.geteuid() == 0, "run as root (unshare -m)"
    tmp = Path(tempfile.mkdtemp(prefix="netlib-"))
    try:
        hosts = write_hosts(tmp / "hosts")
        for name, addr in HOSTS.items():
            got = resolve_in_prefix(hosts, name)
            assert got == addr, (name, got)
        assert subprocess.run(["getent", "hosts", "allowed.test"], capture_output=True,
                              timeout=10).returncode != 0, "the host itself must not know allowed.test"
        print("hosts override: ok")

        tls = TLSMaterial(tmp / "tls")
        plain = OriginServer("plain")
        secure = OriginServer("tls", tls=tls)
        rebind = OriginServer("rebind", address=REBIND_ADDR)
        try:
            def curl(*args):
                p = subprocess.run(["curl", "-sS", "--max-time", "10", "--noproxy", "*", *args],
                                   capture_output=True, text=True, timeout=20)
                return p.returncode, p.stdout, p.stderr

            rc, out, err = curl("--resolve", f"allowed.test:{plain.port}:127.0.0.1",
                                plain.url("allowed.test"))
            assert (rc, out) == (0, "hello from plain"), (rc, out, err)
            for name in ["allowed.test", "sub.allowed.test", "other.test"]:
                rc, out, err = curl("--cacert", str(tls.cert), "--resolve",
                                    f"{name}:{secure.port}:127.0.0.1", secure.url(name))
                assert (rc, out) == (0, "hello from tls"), (name, rc, out, err)
            assert secure.snis[-3:] == ["allowed.test", "sub.allowed.test", "other.test"], secure.snis
            rc, out, err = curl("--cacert", str(tls.cert), "--resolve",
                                f"evilallowed.test:{secure.port}:127.0.0.1",
                                secure.url("evilallowed.test"))
            assert rc != 0, "the certificate must not cover evilallowed.test"
            rc, out, err = curl(f"http://{REBIND_ADDR}:{rebind.port}/hello")
            assert out == "hello from rebind", (rc, out, err)
            print("origins and TLS: ok")

            # keep-alive: two requests on one connection, Host recorded
            plain.clear()
            conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=10)
            conn.request("GET", "/hello?k=1", headers={"Host": "allowed.test"})
            assert conn.getresponse().read() == b"hello from plain"
            conn.request("POST", "/echo?k=2", body=b"ping", headers={"Host": "other.test"})
            assert conn.getresponse().read() == b"ping"
            peers = {(r["path"], r["host"]) for r in plain.requests}
            assert peers == {("/hello?k=1", "allowed.test"), ("/echo?k=2", "other.test")}, peers
            conn.request("GET", "/bytes?n=200000")
            assert len(conn.getresponse().read()) == 200000
            conn.request("GET", "/redirect?to=http%3A%2F%2Fother.test%2Fhello")
            r = conn.getresponse()
            r.read()
            assert r.status == 302 and r.getheader("Location") == "http://other.test/hello"
            t0 = time.monotonic()
            conn.request("GET", "/slow?s=2")
            assert conn.getresponse().read() == b".."
            assert 1.5 < time.monotonic() - t0 < 5
            conn.close()
            print("endpoints and keep-alive: ok")

            # the raw client, straight at the origins (no proxy): origin-form
            # requests, TLS with a chosen SNI, reading until close
            ops = [{"op": "open", "addr": ["127.0.0.1", plain.port]},
                   {"op": "send", "data": "GET /hello?raw=1 HTTP/1.1\r\nHost: a\r\n\r\n"
                                          "GET /bytes?n=100000 HTTP/1.1\r\nHost: b\r\n\r\n"},
                   {"op": "response"}, {"op": "response"},
                   {"op": "open", "id": "t", "addr": ["127.0.0.1", secure.port]},
                   {"op": "tls", "id": "t", "sni": "other.test", "cafile": str(tls.cert)},
                   {"op": "send", "id": "t", "data": "GET /host HTTP/1.1\r\nHost: other.test\r\n"
                                                     "Connection: close\r\n\r\n"},
                   {"op": "response", "id": "t"},
                   {"op": "open", "id": "x", "addr": ["127.0.0.1", secure.port]},
                   {"op": "tls", "id": "x", "sni": "evilallowed.test", "cafile": str(tls.cert)},
                   {"op": "open", "id": "p", "addr": ["127.0.0.1", plain.port]},
                   {"op": "send", "id": "p", "data": "junk\r\n\r\n"},
                   {"op": "recv_close", "id": "p", "timeout": 5}]
            p = subprocess.run(raw_argv(ops), capture_output=True, text=True, timeout=30)
            res = last_json(p.stdout)["results"]
            assert res[2]["status"] == 200 and res[2]["body"] == "hello from plain", res
            assert res[3]["body_len"] == 100000 and res[3]["complete"], res[3]
            assert res[5]["ok"] and res[7]["body"] == "other.test", res
            assert not res[9]["ok"] and "CERTIFICATE_VERIFY_FAILED" in res[9]["error"], res[9]
            assert res[12]["closed"] and "400" in res[12]["data"], res[12]
            print("raw client: ok")
        finally:
            plain.close()
            secure.close()
            rebind.close()

        wheel = build_wheel(tmp / "wheels", "cageselftest", "1.0")
        with zipfile.ZipFile(wheel) as z:
            assert z.testzip() is None
        index = SimpleIndex([wheel])
        try:
            target = tmp / "target"
            p = host_pip_install(index.url("127.0.0.1"), "127.0.0.1", "cageselftest==1.0", target)
            assert p.returncode == 0, p.stdout + p.stderr
            assert (target / "cageselftest" / "__init__.py").read_text() == \
                "VALUE = 'cageselftest-1.0'\n"
            assert index.download_count("cageselftest") == 1, index.downloads
            p = host_pip_install(index.url("127.0.0.1"), "127.0.0.1", "nonexistentpkg==1.0",
                                 tmp / "target2")
            assert p.returncode != 0 and "No matching distribution" in p.stderr, p.stderr
            print("package index with the host's pip: ok")
        finally:
            index.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("netlib self-test passed")


if __name__ == "__main__":
    selftest()
