"""Images made by the tests (tests/integration/test_images.py,
tests/security/test_image_attacks.py, bench/images.py): layers as tar
bytes, packed as a `docker save` archive or an OCI image layout, a busybox
image from Debian's busybox-static, a local registry (Debian's
docker-registry) with skopeo to push, and a runner for `codecage image`.
Nothing is downloaded."""
import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
APPLETS = ["sh", "ls", "cat", "echo", "true", "id", "env", "pwd"]


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_bytes(entries, fmt=tarfile.PAX_FORMAT):
    """entries: TarInfo fields as dicts {name, type, data, linkname, mode,
    devmajor, devminor}; type is one of tarfile's type constants."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.type = e.get("type", tarfile.REGTYPE)
            info.mode = e.get("mode", 0o755 if info.type == tarfile.DIRTYPE else 0o644)
            info.linkname = e.get("linkname", "")
            info.mtime = e.get("mtime", 1700000000)
            info.devmajor = e.get("devmajor", 0)
            info.devminor = e.get("devminor", 0)
            data = e.get("data", b"")
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if info.size else None)
    return buf.getvalue()


def f(name, data=b"", mode=0o644):
    return {"name": name, "data": data, "mode": mode}


def d(name, mode=0o755):
    return {"name": name, "type": tarfile.DIRTYPE, "mode": mode}


def sym(name, target):
    return {"name": name, "type": tarfile.SYMTYPE, "linkname": target, "mode": 0o777}


def hard(name, target):
    return {"name": name, "type": tarfile.LNKTYPE, "linkname": target}


def busybox_layer():
    entries = [d("bin"), f("bin/busybox", BUSYBOX.read_bytes(), 0o755), d("etc"), d("tmp", 0o1777)]
    entries += [sym(f"bin/{a}", "busybox") for a in APPLETS]
    entries += [f("etc/motd", b"hello from the base layer\n")]
    return tar_bytes(entries)


def image_config(layers, env=None, cmd=None, entrypoint=None, workdir="", user="",
                 arch="amd64"):
    return json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": cmd or ["/bin/sh"], "Entrypoint": entrypoint,
                   "WorkingDir": workdir, "User": user},
        "rootfs": {"type": "layers", "diff_ids": [sha(l) for l in layers]},
    }, sort_keys=True).encode()


def docker_save(path, layers, tags=("busybox:test",), config=None, diff_ids=None):
    """Writes a `docker save` archive; diff_ids overrides the config's."""
    config = config or image_config(layers)
    if diff_ids is not None:
        c = json.loads(config)
        c["rootfs"]["diff_ids"] = diff_ids
        config = json.dumps(c).encode()
    cfg_name = hashlib.sha256(config).hexdigest() + ".json"
    members = {cfg_name: config}
    names = []
    for i, layer in enumerate(layers):
        name = f"layer{i}/layer.tar"
        members[name] = layer
        names.append(name)
    members["manifest.json"] = json.dumps(
        [{"Config": cfg_name, "RepoTags": list(tags), "Layers": names}]).encode()
    Path(path).write_bytes(tar_bytes([f(n, data) for n, data in members.items()],
                                     fmt=tarfile.USTAR_FORMAT))
    return sha(config)


def oci_blobs(layers, config=None, compress=True):
    """(blobs {digest: bytes}, manifest bytes) of an OCI image."""
    config = config or image_config(layers)
    blobs = {sha(config): config}
    descs = []
    for layer in layers:
        data = gzip.compress(layer, mtime=0) if compress else layer
        blobs[sha(data)] = data
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar" +
                      ("+gzip" if compress else ""), "digest": sha(data), "size": len(data)})
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(config), "size": len(config)},
        "layers": descs}).encode()
    blobs[sha(manifest)] = manifest
    return blobs, manifest


def oci_layout(path, layers, ref_name=None, as_tar=False, config=None, blobs_override=None):
    """Writes an OCI image layout (a directory, or a tar of one)."""
    blobs, manifest = oci_blobs(layers, config)
    desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha(manifest), "size": len(manifest)}
    if ref_name:
        desc["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": json.dumps({"schemaVersion": 2, "manifests": [desc]}).encode()}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest[7:]] = data
    files.update(blobs_override or {})
    if as_tar:
        Path(path).write_bytes(tar_bytes([f(n, data) for n, data in files.items()]))
    else:
        for name, data in files.items():
            p = Path(path) / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    return sha(manifest)


def oci_layout_multi(path, platforms):
    """An OCI layout whose index lists one manifest per platform:
    platforms = {"linux/amd64": [layers], ...}."""
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode()}
    entries = []
    for plat, layers in platforms.items():
        os_, arch = plat.split("/")[:2]
        blobs, manifest = oci_blobs(layers, image_config(layers, arch=arch))
        for digest, data in blobs.items():
            files["blobs/sha256/" + digest[7:]] = data
        entries.append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": sha(manifest), "size": len(manifest),
                        "platform": {"os": os_, "architecture": arch}})
    index = json.dumps({"schemaVersion": 2,
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": entries}).encode()
    files["blobs/sha256/" + sha(index)[7:]] = index
    top = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": sha(index),
           "size": len(index), "annotations": {"org.opencontainers.image.ref.name": "multi"}}
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": [top]}).encode()
    for name, data in files.items():
        p = Path(path) / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return sha(index)


class Images:
    """`codecage image` of one build against one store (data_dir)."""

    def __init__(self, build, tmp_path, images=None, env=None):
        self.binary = Path(build) / "codecage"
        self.data_dir = Path(tmp_path) / "data"
        self.config = Path(tmp_path) / "config.json"
        self.env = env
        self.write_config(images)

    @property
    def store(self):
        return self.data_dir / "images"

    def write_config(self, images=None):
        cfg = {"data_dir": str(self.data_dir)}
        if images is not None:
            cfg["images"] = images
        self.config.write_text(json.dumps(cfg))

    def run(self, *args, timeout=300):
        return subprocess.run([str(self.binary), "image", "--config", str(self.config), *args],
                              capture_output=True, text=True, timeout=timeout, env=self.env)

    def ok(self, *args, **kw):
        p = self.run(*args, **kw)
        assert p.returncode == 0, f"codecage image {args}: {p.returncode}: {p.stderr}"
        return p

    def json(self, *args):
        return json.loads(self.ok(*args, "--json").stdout)

    def rootfs(self, ref):
        return Path(self.json("inspect", ref)["rootfs"])

    def snapshot(self):
        """Everything in the store but lock files: a failed operation must
        leave it exactly as it was."""
        if not self.store.exists():
            return {}
        out = {}
        for p in sorted(self.store.rglob("*")):
            rel = str(p.relative_to(self.store))
            if rel.endswith(".lock") or rel.startswith("leases/") or rel == "lock":
                continue
            st = p.lstat()
            out[rel] = (st.st_mode, st.st_size if p.is_file() and not p.is_symlink() else 0)
        return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    """Debian's docker-registry on 127.0.0.1 (plain HTTP), optionally with
    htpasswd basic auth or token auth."""

    def __init__(self, tmp_path, htpasswd=None, token=None):
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.root = Path(tmp_path) / f"registry-{self.port}"
        self.root.mkdir()
        auth = ""
        if htpasswd:
            auth = (f"auth:\n  htpasswd:\n    realm: codecage-test\n"
                    f"    path: {htpasswd}\n")
        if token:
            auth = (f"auth:\n  token:\n    realm: {token['realm']}\n"
                    f"    service: {token['service']}\n    issuer: {token['issuer']}\n"
                    f"    rootcertbundle: {token['cert']}\n")
        cfg = self.root / "config.yml"
        cfg.write_text(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root}/data\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n{auth}")
        self.log = open(self.root / "log", "wb")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(cfg)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not start: {(self.root / 'log').read_text()}")

    def push(self, source, repo, creds=None):
        """skopeo copy from source ('oci:DIR', 'docker-archive:PATH', ...)."""
        cmd = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--insecure-policy"]
        if creds:
            cmd += ["--dest-creds", creds]
        cmd += [source, f"docker://{self.host}/{repo}"]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def push_all(self, source, repo):
        subprocess.run(["skopeo", "copy", "--quiet", "--all", "--dest-tls-verify=false",
                        "--insecure-policy", source, f"docker://{self.host}/{repo}"],
                       check=True, capture_output=True, timeout=120)

    def blob_path(self, digest):
        hexd = digest[7:]
        return self.root / "data/docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def htpasswd_file(path, user, password):
    subprocess.run(["htpasswd", "-Bbc", str(path), user, password], check=True,
                   capture_output=True)
    return path


class TokenServer:
    """A Bearer token service for the registry (the distribution token
    spec): RS256 JWTs whose x5c header carries a self-signed certificate
    the registry trusts (rootcertbundle). Requests with the right basic
    credentials get the actions they ask for; others get a token that
    grants nothing. Signed with the openssl tool; no library needed."""

    def __init__(self, tmp_path, user, password, service="codecage-test-registry",
                 issuer="codecage-test-issuer"):
        import http.server
        import threading
        self.dir = Path(tmp_path) / "token"
        self.dir.mkdir()
        self.key, self.cert = self.dir / "key.pem", self.dir / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        str(self.key), "-out", str(self.cert), "-days", "1", "-subj",
                        "/CN=codecage-test-token"], check=True, capture_output=True)
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"],
                             check=True, capture_output=True).stdout
        self.x5c = base64.b64encode(der).decode()
        self.service, self.issuer = service, issuer
        self.basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                from urllib.parse import parse_qs, urlparse
                q = parse_qs(urlparse(self.path).query)
                authed = self.headers.get("Authorization") == server.basic
                server.requests.append({"authed": authed, "scope": q.get("scope", [""])[0],
                                        "service": q.get("service", [""])[0]})
                body = json.dumps({"token": server.token(q.get("scope", [""])[0], authed)})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.realm = f"http://127.0.0.1:{self.port}/token"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def token(self, scope, authed):
        def b64(data):
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
        access = []
        if authed and scope.startswith("repository:"):
            _, name, actions = scope.split(":", 2)
            access = [{"type": "repository", "name": name, "actions": actions.split(",")}]
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {"iss": self.issuer, "sub": "alice" if authed else "", "aud": self.service,
                  "exp": now + 300, "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(),
                  "access": access}
        signing = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                             input=signing.encode(), check=True, capture_output=True).stdout
        return f"{signing}.{b64(sig)}"

    def registry_auth(self):
        return {"realm": self.realm, "service": self.service, "issuer": self.issuer,
                "cert": str(self.cert)}

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
