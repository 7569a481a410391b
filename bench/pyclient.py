#!/usr/bin/env python3
"""The Python client's overhead (clients/python), each against a baseline
measured in the same process, interleaved:

  session    a call into a sandbox's Python session (`x + 1`) through the
             library (async and blocking) against the same HTTP request made
             raw with http.client on a kept-alive Unix-socket connection;
             bar: the async library within raw + 0.2 ms (median).
  one-shot   a pooled one-shot run_python("print(1)") through the library
             against the bare `/usr/bin/python3 -c 'print(1)'` process;
             bar: at most 0.25x the bare process (median). The same request
             made raw (http.client) shows the server's share. The pool is
             refilled before each run, so every run is a pool hit.
  client     the client's own cost, free of the server's: run_python and
             the raw request against a stub on a Unix socket that answers
             every request at once with a pooled run's result.

Starts its own `codecage serve` (build dir: --build, default build) with a
private data directory; imports the client from clients/python/src unless
it is installed.

  sudo bench/pyclient.py [--rounds 1000] [--oneshot-rounds 40] [--json]
"""
import argparse
import asyncio
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "src"))
import codecage  # noqa: E402


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.unix_path)
        self.sock = s


def start_server(build, tmp, pool_size):
    sock = os.path.join(tmp, "api.sock")
    cfg = {"data_dir": os.path.join(tmp, "data"), "listen": {"http": None, "unix": sock},
           "pool_size": pool_size}
    path = os.path.join(tmp, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    log = open(os.path.join(tmp, "serve.log"), "wb")
    proc = subprocess.Popen([os.path.join(build, "codecage"), "serve", "--config", path],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"codecage serve exited: {open(log.name).read()}")
        try:
            c = UnixHTTPConnection(sock)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return proc, sock
        except OSError:
            time.sleep(0.05)
    raise SystemExit("codecage serve did not answer")


def raw_post(conn, path, body):
    data = json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    assert resp.status == 200, out
    return out


def summary(xs):
    xs = sorted(xs)
    return {"median_ms": statistics.median(xs) * 1e3, "p90_ms": xs[int(len(xs) * 0.9)] * 1e3,
            "n": len(xs)}


def bench_session(sock, rounds):
    raw = UnixHTTPConnection(sock)
    sync = codecage.sync.SandboxClient(sock)
    box = sync.create("bench-session")
    raw_post(raw, "/v1/sandboxes/bench-session/python", {"code": "x = 1"})
    times = {"raw": [], "async": [], "sync": []}

    async def main():
        aclient = codecage.SandboxClient(sock)
        s = aclient.handle("bench-session").session()
        ss = box.session()
        for _ in range(20):  # warm every path
            raw_post(raw, "/v1/sandboxes/bench-session/python", {"code": "x + 1"})
            await s.run("x + 1")
            ss.run("x + 1")
        for _ in range(rounds // 20):
            for _ in range(20):
                t = time.perf_counter()
                r = raw_post(raw, "/v1/sandboxes/bench-session/python", {"code": "x + 1"})
                times["raw"].append(time.perf_counter() - t)
                assert r["return_value"] == 2
            for _ in range(20):
                t = time.perf_counter()
                r = await s.run("x + 1")
                times["async"].append(time.perf_counter() - t)
                assert r.return_value == 2
            for _ in range(20):
                t = time.perf_counter()
                r = ss.run("x + 1")
                times["sync"].append(time.perf_counter() - t)
                assert r.return_value == 2
        await aclient.close()

    asyncio.run(main())
    sync.remove("bench-session")
    sync.close()
    raw.close()
    return {k: summary(v) for k, v in times.items()}


def wait_pool_ready(sync, size, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sync.pool()["ready"] >= size:
            time.sleep(0.2)  # let the last one finish warming up
            return
        time.sleep(0.02)
    raise SystemExit(f"the pool did not refill: {sync.pool()}")


def bench_oneshot(sock, rounds, pool_size):
    sync = codecage.sync.SandboxClient(sock)
    raw = UnixHTTPConnection(sock)
    times = {"bare": [], "raw": [], "library": []}

    async def main():
        aclient = codecage.SandboxClient(sock)
        await aclient.run_python("print(1)")  # the first request of a fresh client
        async def run_raw():
            r = raw_post(raw, "/v1/python", {"code": "print(1)"})
            assert r["stdout"] == "1\n" and r["pooled"], r

        async def run_library():
            r = await aclient.run_python("print(1)")
            assert r.stdout == "1\n" and r.pooled, r

        for i in range(rounds):
            t = time.perf_counter()
            subprocess.run(["/usr/bin/python3", "-c", "print(1)"], stdout=subprocess.DEVNULL,
                           check=True)
            times["bare"].append(time.perf_counter() - t)
            order = [("raw", run_raw), ("library", run_library)]
            for key, fn in order if i % 2 == 0 else order[::-1]:  # neither always goes first
                wait_pool_ready(sync, pool_size)
                t = time.perf_counter()
                await fn()
                times[key].append(time.perf_counter() - t)
        await aclient.close()

    asyncio.run(main())
    sync.close()
    raw.close()
    return {k: summary(v) for k, v in times.items()}


STUB_RESULT = json.dumps({
    "status": "ok", "exit_code": 0, "signal": None, "stdout": "1\n", "stderr": "",
    "truncated": None, "duration_ms": 3, "cpu_ms": 1, "peak_memory_bytes": 9125888,
    "artifacts": [], "reason": None, "error": None, "return_value": None, "return_repr": None,
    "host_calls": 0, "run_id": "4be1d0c7a9e84c1f93b0a2d6e5f71c38", "pooled": True}).encode()


def stub_server(path):
    """A thread answering every request on the socket with STUB_RESULT."""
    resp = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(STUB_RESULT) + STUB_RESULT)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(8)

    def conn(c):
        buf = b""
        while True:
            data = c.recv(65536)
            if not data:
                return
            buf += data
            while b"\r\n\r\n" in buf:
                head, rest = buf.split(b"\r\n\r\n", 1)
                n = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        n = int(line.split(b":")[1])
                if len(rest) < n:
                    break
                buf = rest[n:]
                c.sendall(resp)

    def accept():
        while True:
            c, _ = lsock.accept()
            threading.Thread(target=conn, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def bench_client_only(tmp, rounds):
    path = os.path.join(tmp, "stub.sock")
    stub_server(path)
    raw = UnixHTTPConnection(path)
    times = {"raw": [], "library": []}

    async def main():
        aclient = codecage.SandboxClient(path)
        for _ in range(50):
            raw_post(raw, "/v1/python", {"code": "print(1)"})
            await aclient.run_python("print(1)")
        for _ in range(rounds // 20):
            for _ in range(20):
                t = time.perf_counter()
                raw_post(raw, "/v1/python", {"code": "print(1)"})
                times["raw"].append(time.perf_counter() - t)
            for _ in range(20):
                t = time.perf_counter()
                r = await aclient.run_python("print(1)")
                times["library"].append(time.perf_counter() - t)
                assert r.pooled
        await aclient.close()

    asyncio.run(main())
    raw.close()
    return {k: summary(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--oneshot-rounds", type=int, default=40)
    ap.add_argument("--pool-size", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="codecage-bench-pyclient-")
    proc, sock = start_server(a.build, tmp, a.pool_size)
    try:
        sess = bench_session(sock, a.rounds)
        one = bench_oneshot(sock, a.oneshot_rounds, a.pool_size)
        stub = bench_client_only(tmp, a.rounds)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    over = sess["async"]["median_ms"] - sess["raw"]["median_ms"]
    ratio = one["library"]["median_ms"] / one["bare"]["median_ms"]
    out = {"session": sess, "oneshot": one, "client_only": stub, "session_overhead_ms": over,
           "oneshot_ratio": ratio, "session_bar_ok": over <= 0.2, "oneshot_bar_ok": ratio <= 0.25}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    def ln(label, s):
        print(f"  {label:34} median {s['median_ms']:9.3f} ms   p90 {s['p90_ms']:9.3f} ms   (n={s['n']})")
    print(f"session call x + 1 ({a.rounds} rounds, interleaved in blocks of 20):")
    ln("raw HTTP (http.client, keep-alive)", sess["raw"])
    ln("codecage.SandboxClient (async)", sess["async"])
    ln("codecage.sync.SandboxClient", sess["sync"])
    print(f"  library overhead {over:+.3f} ms (bar: <= +0.2 ms)   "
          f"sync {sess['sync']['median_ms'] - sess['raw']['median_ms']:+.3f} ms")
    print(f"one-shot run_python('print(1)'), pooled ({a.oneshot_rounds} rounds):")
    ln("bare python3 -c 'print(1)'", one["bare"])
    ln("raw HTTP POST /v1/python", one["raw"])
    ln("codecage.SandboxClient.run_python", one["library"])
    print(f"  ratio library/bare {ratio:.2f}x (bar: <= 0.25x)   raw/bare "
          f"{one['raw']['median_ms'] / one['bare']['median_ms']:.2f}x   library - raw "
          f"{one['library']['median_ms'] - one['raw']['median_ms']:+.3f} ms")
    print(f"client only: run_python against a stub answering at once ({a.rounds} rounds):")
    ln("raw HTTP (http.client, keep-alive)", stub["raw"])
    ln("codecage.SandboxClient.run_python", stub["library"])
    print(f"  library overhead {stub['library']['median_ms'] - stub['raw']['median_ms']:+.3f} ms")


if __name__ == "__main__":
    main()
