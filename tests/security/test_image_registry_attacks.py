"""Registry requests as a way into the host's network (server-side request
forgery): a registry that redirects a manifest or a blob to a host nothing
lists, and a reference that names a private address itself. codecage
follows redirects one checked hop at a time (src/images/registry.c): every
hop's addresses go through the network policy (network.allow_private; a
host listed in the images config may be private), plain HTTP only to hosts
in images.plain_http. Each target records whether anything connected to it:
a refused request must never reach it, and what was refused is said without
what any other host answered."""
import http.server
import json
import socket
import threading

import pytest

import imagelib as il
from conftest import BUILD

LAYER = il.tar_bytes([il.d("etc"), il.f("etc/motd", b"hello\n")])
SECRET = b'{"AccessKeyId": "AKIA-not-for-you"}'


class Target:
    """A TCP listener on 127.0.0.1 that records every connection and
    answers each HTTP request with body (a cloud metadata service, or a
    second registry serving blobs)."""

    def __init__(self, body=SECRET, blobs=None):
        self.hits = 0
        blobs = blobs or {}
        target = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                data = blobs.get(self.path.rsplit("/", 1)[-1], body)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(http.server.ThreadingHTTPServer):
            def verify_request(self, request, client_address):
                target.hits += 1
                return True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class HostileRegistry(Target):
    """A plain-HTTP registry of one image whose manifest or blobs answer
    with a redirect to where(path)."""

    def __init__(self, redirect_manifest=None, redirect_blobs=None):
        self.blobs, self.manifest = il.oci_blobs([LAYER])
        reg = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, data=b"", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if "/manifests/" in self.path and redirect_manifest:
                    return self.reply(307, headers=[("Location", redirect_manifest)])
                if "/manifests/" in self.path:
                    return self.reply(200, reg.manifest, [
                        ("Content-Type", "application/vnd.oci.image.manifest.v1+json")])
                if "/blobs/" in self.path and redirect_blobs:
                    digest = self.path.rsplit("/", 1)[-1]
                    return self.reply(307, headers=[("Location", redirect_blobs + digest)])
                return self.reply(200, b"{}")

        self.hits = 0
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def servers():
    started = []

    def start(cls, *args, **kw):
        s = cls(*args, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


@pytest.fixture
def images(tmp_path):
    return il.Images(BUILD, tmp_path)


def refused_without_leaking(proc, registry):
    assert proc.returncode != 0, proc.stderr
    for leak in ["AKIA", f"{len(SECRET)} bytes", "announced", "HTTP 200", "has digest"]:
        assert leak not in proc.stderr, proc.stderr
    for size in {len(b) for b in registry.blobs.values()}:
        assert f"{size} bytes" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_blob_redirected_to_an_unlisted_local_port(images, servers, scheme):
    metadata = servers(Target)
    registry = servers(HostileRegistry, redirect_blobs=f"{scheme}://{metadata.host}"
                       "/latest/meta-data/iam/security-credentials/")
    images.write_config({"plain_http": [registry.host]})
    proc = images.run("pull", f"{registry.host}/evil:1")
    refused_without_leaking(proc, registry)
    assert metadata.hits == 0
    assert "refused" in proc.stderr


def test_manifest_redirected_to_an_unlisted_local_port(images, servers):
    metadata = servers(Target)
    registry = servers(HostileRegistry, redirect_manifest=f"https://{metadata.host}/latest/")
    images.write_config({"plain_http": [registry.host]})
    proc = images.run("pull", f"{registry.host}/evil:1")
    refused_without_leaking(proc, registry)
    assert metadata.hits == 0
    assert "loopback" in proc.stderr


def test_a_reference_naming_a_private_address_is_refused_before_connecting(images, servers):
    internal = servers(Target)
    proc = images.run("pull", f"{internal.host}/anything:1")
    assert proc.returncode != 0
    assert internal.hits == 0
    assert "loopback" in proc.stderr and "network.allow_private" in proc.stderr


def test_allow_private_covers_a_tenant_named_host(images, servers):
    """network.allow_private opens the address (here to a TLS handshake
    that fails: the target speaks plain HTTP)."""
    internal = servers(Target)
    c = json.loads(images.config.read_text())
    c["network"] = {"allow_private": ["127.0.0.0/8"]}
    images.config.write_text(json.dumps(c))
    proc = images.run("pull", f"{internal.host}/anything:1")
    assert proc.returncode != 0
    assert internal.hits >= 1


def test_redirect_to_a_listed_plain_http_host_still_pulls(images, servers):
    """Blobs served elsewhere (a CDN, here a second listed host) still work,
    hop by hop."""
    registry = servers(HostileRegistry)
    cdn = servers(Target, blobs={d: b for d, b in registry.blobs.items()})
    registry.stop()
    registry = servers(HostileRegistry, redirect_blobs=f"http://{cdn.host}/blobs/")
    images.write_config({"plain_http": [registry.host, cdn.host]})
    proc = images.run("pull", f"{registry.host}/good:1")
    assert proc.returncode == 0, proc.stderr
    assert cdn.hits >= 1
