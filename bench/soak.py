#!/usr/bin/env python3
"""Soak and fault test of `codecage serve` (docs/OPERATIONS.md), run by hand:

  load    --duration s (default 600) of --clients (default 8) threads, half
          over HTTP (the Unix socket), half over MCP (Streamable HTTP at
          /mcp), mixing one-shot shell and Python runs, named sandboxes
          with a Python session (created, used, removed: --sessions, default
          1000, over the run), workspace file writes read back, timeouts
          and OOMs (over HTTP a one-shot run of 64 MiB, over MCP a 64 MiB
          sandbox's session and an exec in it; each client of this phase
          does every kind once first). Every answer is checked: a run
          echoes a random token, a session returns what was set, a file
          reads back byte for byte, a timeout says "timeout", an OOM "oom"
          (and the session answers again after it). Lost (no answer, 5xx)
          and wrong answers must both be 0, and all of the --sessions must
          have been completed. The server's RSS, fds and threads are
          sampled from /proc; after a warm-up (the first fifth) none may
          grow by more than 10%. At the end: no process, cgroup, mount or
          loop device of the server left.
  faults  --kills (default 100) SIGKILLs of the server at random moments
          under load, each followed by a restart that must answer
          (/healthz and a list of sandboxes) within 2 s; every workspace
          file whose write was acknowledged must read back whole afterwards
          (each write has a path of its own, so it is there entire or the
          write was never acknowledged); nothing left after the sweep.

Starts its own server (build dir --build, default build) on a private data
directory; needs root. Prints the numbers, and exits 1 when a bar is missed.

  sudo bench/soak.py [--duration 600] [--clients 8] [--sessions 1000] [--kills 100] [--json]
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---- the server -------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path_ = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path_)
        self.sock = s


class Server:
    def __init__(self, base, build):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.build = Path(build)
        self.port = free_port()
        self.sock = str(self.base / "api.sock")
        self.data = self.base / "data"
        self.config = self.base / "config.json"
        self.config.write_text(json.dumps({
            "data_dir": str(self.data),
            "listen": {"http": f"127.0.0.1:{self.port}", "unix": self.sock},
            "audit_log": str(self.base / "audit.jsonl"),
            "pool_size": 2,
            "limits": {"timeout_s_max": 60},
        }))
        self.log = open(self.base / "serve.log", "ab")
        self.proc = None
        self.pids = []  # every server pid, for the leftover checks

    def start(self, deadline_s=30):
        """Starts the server; returns the seconds until it answered."""
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(self.build / "codecage"), "serve", "--config", str(self.config)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.pids.append(self.proc.pid)
        while time.monotonic() - t0 < deadline_s:
            if self.proc.poll() is not None:
                raise RuntimeError("codecage serve exited; see serve.log")
            try:
                if (self.request("GET", "/healthz", timeout=2)[0] == 200 and
                        self.request("GET", "/v1/sandboxes", timeout=2)[0] == 200):
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError("codecage serve did not answer")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        return self.proc.returncode

    def request(self, method, path, body=None, timeout=120, raw=False):
        conn = UnixConnection(self.sock, timeout)
        try:
            headers = {}
            data = body
            if body is not None and not raw:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            payload = r.read()
            if raw or not payload:
                return r.status, payload
            return r.status, json.loads(payload)
        finally:
            conn.close()

    def usage(self):
        """(rss bytes, fds, threads) of the server process."""
        pid = self.proc.pid
        status = Path(f"/proc/{pid}/status").read_text()
        rss = threads = 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
        return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


class Mcp:
    """A Streamable HTTP MCP client: one session, JSON or SSE answers."""

    def __init__(self, port):
        self.port = port
        self.sid = None
        self.next_id = 0
        r, doc = self.post({"method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "soak", "version": "1"}}})
        self.sid = r.getheader("Mcp-Session-Id")
        self.post({"method": "notifications/initialized"}, notification=True)

    def post(self, msg, notification=False, timeout=120):
        msg = dict(msg, jsonrpc="2.0")
        if not notification:
            self.next_id += 1
            msg["id"] = self.next_id
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self.sid:
            headers["Mcp-Session-Id"] = self.sid
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", "/mcp", json.dumps(msg), headers)
            r = conn.getresponse()
            body = r.read().decode()
        finally:
            conn.close()
        if notification:
            return r, None
        if r.status != 200:
            raise Lost(f"mcp http {r.status}: {body[:200]}")
        if r.getheader("Content-Type", "").startswith("text/event-stream"):
            for line in body.splitlines():
                if line.startswith("data:"):
                    doc = json.loads(line[5:])
                    if doc.get("id") == msg["id"]:
                        return r, doc
            raise Lost("mcp: no answer in the stream")
        return r, json.loads(body)

    def call(self, tool, args):
        _, doc = self.post({"method": "tools/call", "params": {"name": tool, "arguments": args}})
        if "error" in doc:
            raise Lost(f"mcp error: {doc['error']}")
        res = doc["result"]
        return res.get("structuredContent") or {}, res.get("isError", False), res


class Lost(Exception):
    """No answer, or a failure of the server itself."""


class Wrong(Exception):
    """An answer that is not what the request must get."""


# ---- one client's operations -------------------------------------------------

def token():
    return os.urandom(8).hex()


class Client:
    def __init__(self, server, over_mcp, n, session_budget, stats, every_kind_first=False):
        self.s = server
        self.every_kind_first = every_kind_first
        self.mcp = Mcp(server.port) if over_mcp else None
        self.n = n
        self.session_budget = session_budget
        self.stats = stats
        self.rng = random.Random(n)
        self.count = 0

    # Each returns normally when the answer was right; raises Lost / Wrong.
    def http(self, method, path, body=None, ok=(200, 201), raw=False):
        status, doc = self.s.request(method, path, body, raw=raw)
        if status >= 500 or status not in ok:
            raise Lost(f"{method} {path}: {status} {str(doc)[:200]}")
        return doc

    def oneshot_shell(self):
        t = token()
        if self.mcp:
            res, err, _ = self.mcp.call("run_shell", {"command": f"echo {t}"})
        else:
            res, err = self.http("POST", "/v1/run", {"command": f"echo {t}"}), False
        if err or res.get("status") != "ok" or res.get("stdout") != f"{t}\n":
            raise Wrong(f"shell: {str(res)[:200]}")

    def oneshot_python(self):
        a, b = self.rng.randint(1, 10**6), self.rng.randint(1, 10**6)
        if self.mcp:
            res, err, _ = self.mcp.call("run_python", {"code": f"{a} * {b}"})
        else:
            res, err = self.http("POST", "/v1/python", {"code": f"{a} * {b}"}), False
        if err or res.get("status") != "ok" or res.get("return_value") != a * b:
            raise Wrong(f"python: {str(res)[:200]}")

    def session_lifecycle(self):
        name = f"soak-{self.n}-{self.count}"
        t = token()
        data = os.urandom(self.rng.randint(1, 256 * 1024))
        if self.mcp:
            self.mcp_session(name, t, data)
        else:
            self.http("POST", "/v1/sandboxes", {"name": name, "memory_mib": 256})
            self.http("POST", f"/v1/sandboxes/{name}/python", {"code": f"x = '{t}'"})
            res = self.http("POST", f"/v1/sandboxes/{name}/python", {"code": "x"})
            if res.get("return_value") != t:
                raise Wrong(f"session: {str(res)[:200]}")
            self.http("PUT", f"/v1/sandboxes/{name}/files/d/blob.bin", data, raw=True)
            back = self.http("GET", f"/v1/sandboxes/{name}/files/d/blob.bin", raw=True)
            res = self.http("POST", f"/v1/sandboxes/{name}/exec",
                            {"script": "sha256sum < d/blob.bin"})
            if back != data or not res.get("stdout", "").startswith(
                    hashlib.sha256(data).hexdigest()):
                raise Wrong("file: read back differs")
            self.http("DELETE", f"/v1/sandboxes/{name}")
        self.stats.add("sessions", 1)

    def mcp_session(self, name, t, data):
        call = self.mcp.call
        res, err, _ = call("sandbox_create", {"name": name, "memory_mib": 256})
        if err:
            raise Lost(f"sandbox_create: {str(res)[:200]}")
        call("run_python", {"sandbox": name, "code": f"x = '{t}'"})
        res, err, _ = call("run_python", {"sandbox": name, "code": "x"})
        if err or res.get("return_value") != t:
            raise Wrong(f"mcp session: {str(res)[:200]}")
        import base64
        res, err, _ = call("file_write", {"sandbox": name, "path": "d/blob.bin",
                                          "content": base64.b64encode(data).decode(),
                                          "encoding": "base64"})
        if err or res.get("size") != len(data):
            raise Wrong(f"file_write: {str(res)[:200]}")
        res, err, _ = call("run_shell", {"sandbox": name, "command": "sha256sum < d/blob.bin"})
        if err or not res.get("stdout", "").startswith(hashlib.sha256(data).hexdigest()):
            raise Wrong(f"mcp file: {str(res)[:200]}")
        res, err, _ = call("sandbox_remove", {"name": name})
        if err:
            raise Lost(f"sandbox_remove: {str(res)[:200]}")

    def timeout(self):
        body = {"command": "sleep 30", "timeout_s": 1}
        if self.mcp:
            res, _, _ = self.mcp.call("run_shell", body)
        else:
            res = self.http("POST", "/v1/run", body)
        if res.get("status") != "timeout":
            raise Wrong(f"timeout: {str(res)[:200]}")

    OOM_CODE = "b = bytearray(512 << 20); b[::4096] = b'x' * len(b[::4096])"

    def oom(self):
        if self.mcp:
            return self.mcp_oom()
        res = self.http("POST", "/v1/python", {"code": self.OOM_CODE, "memory_mib": 64})
        if res.get("status") != "oom":
            raise Wrong(f"oom: {str(res)[:200]}")

    def mcp_oom(self):
        """Over MCP (whose one-shot runs take no memory_mib): a sandbox of
        64 MiB whose session, then an exec, runs out of memory; the
        session must come back for the next call."""
        call = self.mcp.call
        name = f"soak-oom-{self.n}-{token()}"  # unique across the fault phase's rounds
        res, err, _ = call("sandbox_create", {"name": name, "memory_mib": 64})
        if err:
            raise Lost(f"sandbox_create: {str(res)[:200]}")
        res, _, _ = call("run_python", {"sandbox": name, "code": self.OOM_CODE})
        if res.get("status") != "oom" or res.get("state_lost") is not True:
            raise Wrong(f"mcp session oom: {str(res)[:200]}")
        a = self.rng.randint(1, 10**6)
        res, err, _ = call("run_python", {"sandbox": name, "code": f"{a} + 1"})
        if err or res.get("return_value") != a + 1:
            raise Wrong(f"mcp session after oom: {str(res)[:200]}")
        res, _, _ = call("run_shell", {"sandbox": name,
                                       "command": f'python3 -c "{self.OOM_CODE}"'})
        if res.get("status") != "oom":
            raise Wrong(f"mcp exec oom: {str(res)[:200]}")
        res, err, _ = call("sandbox_remove", {"name": name})
        if err:
            raise Lost(f"sandbox_remove: {str(res)[:200]}")

    def one(self):
        self.count += 1
        ops = [(self.oneshot_shell, 30), (self.oneshot_python, 30), (self.timeout, 3),
               (self.oom, 3)]
        fns, weights = zip(*ops)
        if self.every_kind_first and self.count <= len(fns):
            # Each kind once first, so even a short run has every kind
            # over both transports.
            fn = fns[self.count - 1]
        elif self.rng.random() < 0.5 and self.session_budget.take():
            # A session lifecycle whenever the budget has one due, else a mix.
            fn = self.session_lifecycle
        else:
            fn = self.rng.choices(fns, weights)[0]
        try:
            fn()
            self.stats.add("ok", 1)
            self.stats.add(fn.__name__, 1)
            self.stats.add(f"{fn.__name__}/{'mcp' if self.mcp else 'http'}", 1)
        except Wrong as e:
            self.stats.fail("wrong", e)
        except (Lost, OSError, ValueError, KeyError) as e:
            self.stats.fail("lost", e)


class Budget:
    """How many session lifecycles are left to spread over the run."""

    def __init__(self, n, duration):
        self.n, self.duration, self.t0 = n, duration, time.monotonic()
        self.lock = threading.Lock()
        self.taken = 0

    def take(self):
        with self.lock:
            due = self.n * min(1.0, (time.monotonic() - self.t0) / (self.duration * 0.9))
            if self.taken < self.n and self.taken < due + 1:
                self.taken += 1
                return True
            return False


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []

    def add(self, key, n):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, key, e):
        self.add(key, 1)
        with self.lock:
            if len(self.failures) < 20:
                self.failures.append(f"{key}: {e}")


# ---- leftovers ------------------------------------------------------------

def leftovers(server):
    """Processes, cgroups, mounts and loop devices of this server still on
    the host."""
    left = {"processes": [], "cgroups": [], "mounts": [], "loops": []}
    marks = [f"/codecage/run-{pid}-" for pid in server.pids]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cg = Path(f"/proc/{entry}/cgroup").read_text()
            except OSError:
                continue
            if any(m in cg for m in marks):
                left["processes"].append(int(entry))
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if os.path.basename(root) == "codecage":
            left["cgroups"] += [d for d in dirs
                                if any(d.startswith(f"run-{pid}-") for pid in server.pids)]
            dirs[:] = []
    data = str(server.data)
    left["mounts"] = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                      if data in line]
    p = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    left["loops"] = [line for line in p.stdout.splitlines() if data in line]
    return {k: v for k, v in left.items() if v}


def wait_no_leftovers(server, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(server)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# ---- the phases ------------------------------------------------------------

def run_clients(server, clients, duration, sessions, stats, stop, sample=None,
                every_kind_first=False):
    budget = Budget(sessions, duration)
    threads = []

    def loop(i):
        try:
            c = Client(server, i % 2 == 1, i, budget, stats, every_kind_first)
        except (Lost, OSError) as e:
            stats.fail("lost", e)
            return
        while not stop.is_set():
            c.one()

    for i in range(clients):
        t = threading.Thread(target=loop, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    t0 = time.monotonic()
    while time.monotonic() - t0 < duration:
        time.sleep(1)
        if sample:
            sample(time.monotonic() - t0)
    stop.set()
    for t in threads:
        t.join(timeout=180)
    return budget.taken


def load_phase(base, build, duration, clients, sessions):
    server = Server(base, build)
    server.start()
    stats = Stats()
    samples = []

    def sample(t):
        if int(t) % 5 == 0:
            samples.append((t, *server.usage()))

    taken = run_clients(server, clients, duration, sessions, stats, threading.Event(), sample,
                        every_kind_first=True)
    # Growth: the mean of the last fifth against the mean of the fifth after warm-up.
    warm = [s for s in samples if duration * 0.2 <= s[0] < duration * 0.4]
    last = [s for s in samples if s[0] >= duration * 0.8]
    growth = {}
    for i, what in ((1, "rss_bytes"), (2, "fds"), (3, "threads")):
        a = sum(s[i] for s in warm) / max(1, len(warm))
        b = sum(s[i] for s in last) / max(1, len(last))
        growth[what] = {"after_warmup": round(a), "end": round(b),
                        "growth": round((b - a) / a, 4) if a else 0.0}
    rc = server.stop()
    left = wait_no_leftovers(server)
    return {"duration_s": duration, "clients": clients, "calls": stats.counts,
            "sessions_requested": sessions, "sessions_done": stats.counts.get("sessions", 0),
            "sessions_started": taken,
            "lost": stats.counts.get("lost", 0), "wrong": stats.counts.get("wrong", 0),
            "failures": stats.failures, "usage": growth, "exit_code": rc, "leftovers": left}


def writer(server, ledger, stop, n, round_):
    """Writes files with paths of their own into fixed sandboxes; an
    acknowledged write goes into the ledger."""
    rng = random.Random(1000 * round_ + n)
    i = 0
    while not stop.is_set():
        i += 1
        name = f"ledger-{n % 2}"
        path = f"r{round_}-w{n}/{i}.bin"
        data = os.urandom(rng.randint(1, 64 * 1024))
        try:
            status, _ = server.request("PUT", f"/v1/sandboxes/{name}/files/{path}", data,
                                       raw=True, timeout=30)
        except OSError:
            time.sleep(0.05)
            continue
        if status == 200:
            with ledger["lock"]:
                ledger["files"].append((name, path, hashlib.sha256(data).hexdigest()))


def fault_phase(base, build, kills, clients):
    server = Server(base, build)
    server.start()
    for n in range(2):
        server.request("POST", "/v1/sandboxes", {"name": f"ledger-{n}"})
    ledger = {"lock": threading.Lock(), "files": []}
    recoveries = []
    stats = Stats()
    for k in range(kills):
        stop = threading.Event()
        threads = [threading.Thread(target=writer, args=(server, ledger, stop, n, k), daemon=True)
                   for n in range(2)]
        for t in threads:
            t.start()
        load = threading.Thread(target=run_clients, daemon=True,
                                args=(server, max(2, clients - 2), random.uniform(0.3, 3.0), 0,
                                      stats, stop))
        load.start()
        load.join()
        server.kill9()
        stop.set()
        for t in threads:
            t.join(timeout=60)
        recoveries.append(server.start())
    lost_files = []
    with ledger["lock"]:
        files = list(ledger["files"])
    for name, path, digest in files:
        status, data = server.request("GET", f"/v1/sandboxes/{name}/files/{path}", raw=True)
        if status != 200 or hashlib.sha256(data).hexdigest() != digest:
            lost_files.append((name, path, status))
    rc = server.stop()
    left = wait_no_leftovers(server)
    return {"kills": kills, "recovery_s": {"max": round(max(recoveries), 3),
                                           "mean": round(sum(recoveries) / len(recoveries), 3),
                                           "over_2s": sum(r > 2 for r in recoveries)},
            "files_acknowledged": len(files), "files_lost_or_torn": len(lost_files),
            "lost_examples": lost_files[:5], "exit_code": rc, "leftovers": left,
            "calls_between_kills": stats.counts.get("ok", 0)}


def verdict(load, faults):
    problems = []
    if load:
        if load["lost"] or load["wrong"]:
            problems.append(f"load: {load['lost']} lost, {load['wrong']} wrong")
        if load["sessions_done"] < load["sessions_requested"]:
            problems.append(f"load: {load['sessions_done']} of {load['sessions_requested']} "
                            f"sessions completed")
        for what, g in load["usage"].items():
            if g["growth"] > 0.10:
                problems.append(f"load: {what} grew {g['growth']:.1%}")
        if load["leftovers"]:
            problems.append(f"load: leftovers {load['leftovers']}")
    if faults:
        if faults["recovery_s"]["over_2s"]:
            problems.append(f"faults: {faults['recovery_s']['over_2s']} restarts over 2 s")
        if faults["files_lost_or_torn"]:
            problems.append(f"faults: {faults['files_lost_or_torn']} files lost or torn")
        if faults["leftovers"]:
            problems.append(f"faults: leftovers {faults['leftovers']}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="codecage-soak-"))
    os.chmod(base, 0o700)
    load = None if a.skip_load else load_phase(base / "load", a.build, a.duration, a.clients,
                                               a.sessions)
    faults = fault_phase(base / "faults", a.build, a.kills, a.clients) if a.kills else None
    problems = verdict(load, faults)
    report = {"load": load, "faults": faults, "problems": problems}
    print(json.dumps(report, indent=None if a.json else 2))
    if not problems:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"kept {base} (serve.log)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
