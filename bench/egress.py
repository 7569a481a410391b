#!/usr/bin/python3
"""Network egress and pip requirements against their baselines, measured in
one process (run as root: the server needs it):

  start      a one-shot `true` with `network` (listener made in the sandbox's
             namespace, proxy attached) vs the same run without network
  request    N HTTP GETs, one connection each, from inside a sandbox through
             the egress proxy vs the same script on the host, direct
  pip        a run whose requirements are installed (first time: a new layer)
             vs bare `pip install --target` on the host, and a run whose
             layer is cached vs a run without requirements

Everything stays on 127.0.0.1: an origin server and a PEP 503 index served
here, names resolved through a private /etc/hosts of the server's mount
namespace. Usage: sudo bench/egress.py [--rounds N] [--requests N] [--build DIR]
"""
import argparse
import base64
import hashlib
import http.client
import http.server
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

GET_SCRIPT = """
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
for _ in range(n):
    urllib.request.urlopen(url, timeout=10).read()
print((time.perf_counter() - t0) * 1000 / n)
"""


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve_dir(path):
    handler = lambda *a, **kw: Quiet(*a, directory=path, **kw)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd.server_address[1]


def make_wheel(index, name):
    ver = "1.0"
    files = {f"{name}/__init__.py": b"VALUE = 1\n",
             f"{name}-{ver}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n".encode(),
             f"{name}-{ver}.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    files[f"{name}-{ver}.dist-info/RECORD"] = (record + f"{name}-{ver}.dist-info/RECORD,,\n").encode()
    wheel = f"{name}-{ver}-py3-none-any.whl"
    os.makedirs(f"{index}/simple/{name}", exist_ok=True)
    with zipfile.ZipFile(f"{index}/{wheel}", "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    sha = hashlib.sha256(open(f"{index}/{wheel}", "rb").read()).hexdigest()
    with open(f"{index}/simple/{name}/index.html", "w") as f:
        f.write(f'<a href="../../{wheel}#sha256={sha}">{wheel}</a>')


class Server:
    def __init__(self, build, tmp, port, index_port):
        self.sock = f"{tmp}/api.sock"
        hosts = f"{tmp}/hosts"
        with open(hosts, "w") as f:
            f.write("127.0.0.1 localhost bench.test pypi.bench.test\n")
        config = {"data_dir": f"{tmp}/data", "listen": {"http": None, "unix": self.sock},
                  "audit_log": f"{tmp}/audit.jsonl", "pool_size": 0,
                  "network": {"allow": [f"bench.test:{port}"], "allow_private": ["127.0.0.1/32"],
                              "max_connections": 64},
                  "pip": {"index_url": f"http://pypi.bench.test:{index_port}/simple"}}
        with open(f"{tmp}/config.json", "w") as f:
            json.dump(config, f)
        self.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount --bind "$0" /etc/hosts && exec "$@"', hosts,
             f"{build}/codecage", "serve", "--config", f"{tmp}/config.json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            if os.path.exists(self.sock):
                return
            time.sleep(0.05)
        sys.exit("codecage serve did not start")

    def call(self, path, body):
        conn = http.client.HTTPConnection("localhost", timeout=600)
        conn.sock = socket.socket(socket.AF_UNIX)
        conn.sock.connect(self.sock)
        t0 = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        doc = json.loads(conn.getresponse().read())
        ms = (time.perf_counter() - t0) * 1000
        conn.close()
        if doc.get("status") != "ok":
            sys.exit(f"benchmark call failed: {path} {body} -> {doc}")
        return ms, doc

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def report(title, a_name, a, b_name, b):
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{title}")
    print(f"  {a_name:28s} median {ma:9.2f} ms")
    print(f"  {b_name:28s} median {mb:9.2f} ms")
    print(f"  ratio {ma / mb:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(f"{tmp}/www")
        with open(f"{tmp}/www/hello", "w") as f:
            f.write("hello\n")
        port = serve_dir(f"{tmp}/www")
        index = f"{tmp}/index"
        for i in range(args.rounds + 1):
            make_wheel(index, f"benchpkg{i}")
        index_port = serve_dir(index)
        srv = Server(build, tmp, port, index_port)
        try:
            net = {"network": [f"bench.test:{port}"]}
            start_net, start_plain = [], []
            for _ in range(args.rounds):
                start_net.append(srv.call("/v1/run", {"command": "true", **net})[0])
                start_plain.append(srv.call("/v1/run", {"command": "true"})[0])
            report("start: one-shot `true`", "with network", start_net, "without", start_plain)

            url = f"http://bench.test:{port}/hello"
            proxied, direct = [], []
            for _ in range(max(3, args.rounds // 4)):
                _, doc = srv.call("/v1/run", {"argv": ["/usr/bin/python3", "-c", GET_SCRIPT, url,
                                                       str(args.requests)], **net})
                proxied.append(float(doc["stdout"]))
                host = subprocess.run(["/usr/bin/python3", "-c", GET_SCRIPT,
                                       f"http://127.0.0.1:{port}/hello", str(args.requests)],
                                      capture_output=True, text=True, check=True,
                                      env={"PATH": "/usr/bin:/bin"})
                direct.append(float(host.stdout))
            report(f"request: GET, new connection each ({args.requests} per sample)",
                   "sandbox through the proxy", proxied, "host, direct", direct)

            cold, bare, cached, plain = [], [], [], []
            for i in range(args.rounds):
                req = [f"benchpkg{i}==1.0"]
                cold.append(srv.call("/v1/run", {"command": "true", "requirements": req})[0])
                cached.append(srv.call("/v1/run", {"command": "true", "requirements": req})[0])
                plain.append(srv.call("/v1/run", {"command": "true"})[0])
                with tempfile.TemporaryDirectory() as target:
                    t0 = time.perf_counter()
                    subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "-q",
                                    "--no-cache-dir", "--disable-pip-version-check",
                                    "--target", target, "--index-url",
                                    f"http://127.0.0.1:{index_port}/simple",
                                    "--trusted-host", f"127.0.0.1:{index_port}",
                                    f"benchpkg{args.rounds}==1.0"],
                                   check=True, capture_output=True)
                    bare.append((time.perf_counter() - t0) * 1000)
            report("pip: a new requirement set", "run installing a layer", cold,
                   "bare pip install --target", bare)
            report("pip: the same set again", "run with the cached layer", cached,
                   "run without requirements", plain)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
