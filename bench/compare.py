#!/usr/bin/python3
"""The speed table: every row measures codecage and its baseline(s) in this one
process (interleaved where it makes sense, so a busy machine affects both
alike) and prints codecage's number, the baseline's, their ratio and the bar.

Rows (`--only` takes the names or the numbers):

 1 cold        `codecage run -- /usr/bin/python3 -c 'print(1)'` against the bare
               `/usr/bin/python3 -c 'print(1)'` and bubblewrap in the strong
               configuration of bench/cold_start.py (all namespaces, read-only
               /usr, fresh /proc and /dev, tmpfs /tmp, caps dropped, cleared env,
               new session, die-with-parent). posix_spawn + wait, rounds
               interleaved (the order rotates each round). Median and p90.
               Bars: codecage/bare <= 1.10, codecage/bwrap < 1.00.
 2 version     `codecage --version` against `/bin/true`: wall ms, and CPU ms
               (user + system of the child, from os.wait4's rusage). No bar.
 3 true        `codecage run -- /bin/true` against the same bubblewrap config
               running /bin/true (and the bare /bin/true). No bar.
 4 pool        `codecage mcp` (stdio, raw JSON-RPC) with a warm pool: 200
               back-to-back one-shot `run_python` calls of `print(1)`, p50/p90/
               p99, bar p90 <= 2x p50. Then N = 2 and 8 calls kept in flight for
               10 s. "Warm" means the server's pool cgroups (run-<pid>-*) number
               `pool_size` and use no CPU for 0.3 s. Concurrency is N requests
               pipelined over the one stdio connection: `codecage mcp` runs each
               tools/call on its own thread (src/server/mcp_stdio.c), so these
               are N concurrent one-shot runs, each in a fresh pooled sandbox.
 5 throughput  one-shot `run_python("print(1)")` runs per second (fresh sandbox
               per run, pool on) with 1, 2 and 8 in flight as in row 4, against
               N threads each posix_spawn + wait of python3 -c 'print(1)' for
               the same time. Each level: codecage, then bare (the pool is
               waited full before each). Bar: codecage >= 2x bare.
 6 session     `codecage mcp`, a named sandbox (sandbox_create), `x = 1` once,
               then `run_python("x + 1")` in it, round trip median, against the
               floor: a python3 loop over pipes that reads a JSON-RPC line,
               evals the same expression and writes a JSON line, driven with the
               same request encoding and response decoding. Blocks of 20
               interleaved. Bar: codecage <= floor + 0.15 ms.
 7 memory      N named sandboxes (--sessions, default 200) each with one Python
               call done: machine-wide used memory (MemTotal - MemAvailable,
               median of 5 samples after settling; caches are not dropped)
               after minus before, / N. Baselines: N idle python3 eval loops
               (the row 6 loop, one call done), and the same loop under the
               bubblewrap config. Also shown: what the sandboxes' memory cgroups
               are charged. Median of 3 interleaved repetitions (--quick: 1).
               Bar: <= 4.5 MiB per session.
 8 live        only with --live-sessions N: N live sessions as in row 7 (4
               created at a time); the creation rate of the first and last 500
               (or N/2 when N < 1000); a session call's p50 while all are alive
               (calls spread over all sessions; bar < 1 ms); the removal rate.

Every server runs in its own session (Ctrl-C reaches only this script), with
its config and data_dir in a temporary directory; at the end, also on errors
and Ctrl-C, every sandbox is removed, every server stopped and the directory
deleted. A call that answers an error stops the run with a message and exit
status 1: no number is printed for it.

Usage (root): bench/compare.py [--build DIR] [--quick] [--only ROW[,ROW]]
                  [--json] [--sessions N] [--live-sessions N] [--pool-size N]
"""
import argparse
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PY = ["/usr/bin/python3", "-c", "print(1)"]
ENV = {"PATH": "/usr/bin:/bin"}
ROWS = ["cold", "version", "true", "pool", "throughput", "session", "memory", "live"]
BLOCK = 20  # row 6: calls measured in blocks, alternating with the floor
INFLIGHT = 4  # rows 7/8: sandboxes created (and removed) at a time
MIB = 1024 * 1024

# A Python loop over pipes: the smallest thing a session could be. It reads a
# JSON-RPC line, runs the code in one namespace and writes a JSON line.
LOOP = r"""
import sys, json
ns = {}
for line in sys.stdin:
    msg = json.loads(line)
    code = msg["params"]["arguments"]["code"]
    try:
        value = eval(compile(code, "<in>", "eval"), ns)
    except SyntaxError:
        exec(compile(code, "<in>", "exec"), ns)
        value = None
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                 "result": {"return_value": value}}) + "\n")
    sys.stdout.flush()
"""


class BenchError(Exception):
    """A call failed: the run stops without reporting a number for it."""


# ---- statistics and timing ---------------------------------------------------------------


def pct(values, q):
    """The q-th percentile (0..100), linear between the closest ranks."""
    s = sorted(values)
    if not s:
        raise BenchError("no samples")
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def med(values):
    return pct(values, 50)


def now():
    return time.perf_counter()


def spawn(argv):
    """Runs argv (posix_spawn, stdout to /dev/null) and waits: (wall ms, cpu ms)."""
    devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        t0 = now()
        pid = os.posix_spawn(argv[0], argv, ENV, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        _, status, ru = os.wait4(pid, 0)
        wall = (now() - t0) * 1000
    finally:
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise BenchError(f"{' '.join(argv)} exited with status {os.waitstatus_to_exitcode(status)}")
    return wall, (ru.ru_utime + ru.ru_stime) * 1000


def bwrap_argv(program):
    """The bubblewrap strong config of bench/cold_start.py, or None without bwrap."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return None
    return [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
            "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/workspace",
            "--chdir", "/workspace", *program]


def interleaved(cmds, rounds):
    """Each command once per round, the order rotating: {name: [(wall, cpu)]}."""
    names = list(cmds)
    for name in names:  # page cache warm
        spawn(cmds[name])
    samples = {name: [] for name in names}
    for r in range(rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            samples[name].append(spawn(cmds[name]))
    return samples


def used_kib():
    """Machine-wide used memory: MemTotal - MemAvailable (KiB)."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0])
    return info["MemTotal"] - info["MemAvailable"]


def rss_kib(pid):
    """A process's resident memory (VmRSS), KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def settled_used_kib(samples=5, gap=0.3):
    values = []
    for _ in range(samples):
        time.sleep(gap)
        values.append(used_kib())
    return statistics.median(values)


# ---- cgroups of a server -----------------------------------------------------------------

CG_V1 = "/sys/fs/cgroup/{ctrl}/codecage"
CG_V2 = "/sys/fs/cgroup/codecage"


def server_groups(pid, ctrl):
    """The codecage cgroup directories of the server with that pid."""
    for base in (CG_V1.format(ctrl=ctrl), CG_V2):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        return [os.path.join(base, n) for n in names if n.startswith(f"run-{pid}-")]
    return []


def read_int(path, key=None):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return 0  # the group went away while we looked
    if key is None:
        return int(text.split()[0])
    for line in text.splitlines():
        k, v = line.split()
        if k == key:
            return int(v)
    return 0


def groups_cpu_ns(groups):
    total = 0
    for g in groups:
        if os.path.exists(os.path.join(g, "cpuacct.usage")):
            total += read_int(os.path.join(g, "cpuacct.usage"))
        else:
            total += read_int(os.path.join(g, "cpu.stat"), "usage_usec") * 1000
    return total


def groups_memory_bytes(pid):
    total = 0
    for g in server_groups(pid, "memory"):
        v1 = os.path.join(g, "memory.usage_in_bytes")
        total += read_int(v1 if os.path.exists(v1) else os.path.join(g, "memory.current"))
    return total


def wait_pool_full(server, size, timeout=120):
    """Until the server has `size` sandboxes (one more when the shelf forks
    them from a zygote, which is a sandbox too) and none of them uses CPU (the
    pool is full and every entry has finished warming up)."""
    deadline = time.monotonic() + timeout
    last, since = None, None
    while time.monotonic() < deadline:
        server.check_alive()
        groups = server_groups(server.pid, "cpuacct")
        state = (len(groups), groups_cpu_ns(groups))
        if size <= state[0] <= size + 1 and state == last:
            if time.monotonic() - since >= 0.3:
                return
        else:
            last, since = state, time.monotonic()
        time.sleep(0.05)
    raise BenchError(f"the pool did not fill to {size} in {timeout} s "
                     f"(found {len(server_groups(server.pid, 'cpuacct'))} sandboxes)")


# ---- resources to clean up ---------------------------------------------------------------


class Context:
    """What this run started: servers, loop processes, the temporary directory."""

    def __init__(self, args):
        self.args = args
        self.cage = os.path.realpath(os.path.join(args.build, "codecage"))
        if not os.access(self.cage, os.X_OK):
            raise BenchError(f"no codecage binary at {self.cage} (--build DIR)")
        self.tmp = tempfile.mkdtemp(prefix="codecage-compare-")
        self.servers = []
        self.loops = []

    def cleanup(self):
        problems = []
        for loop in self.loops:
            loop.close()
        signal.signal(signal.SIGALRM, raise_timeout)
        for server in self.servers:
            signal.alarm(600)  # a server that stops answering must not hang the cleanup
            try:
                problems += server.close()
            except TimeoutError:
                problems.append(f"codecage mcp {server.pid} stopped answering: killed")
                server.proc.kill()
                server.proc.wait()
            finally:
                signal.alarm(0)
        self.loops, self.servers = [], []
        mounts = mounts_under(self.tmp)
        if mounts:
            problems.append(f"mounts left under {self.tmp}, not deleted: {mounts}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        for p in problems:
            print(f"compare.py: cleanup: {p}", file=sys.stderr)
        return problems


def mounts_under(path):
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point == path or point.startswith(path + "/"):
                found.append(point)
    return found


# ---- the MCP client ----------------------------------------------------------------------


class McpServer:
    """`codecage mcp --config FILE` as a child in its own session, spoken to
    with raw JSON-RPC lines over its stdin and stdout."""

    def __init__(self, ctx, name, config):
        self.ctx = ctx
        self.dir = os.path.join(ctx.tmp, name)
        os.mkdir(self.dir)
        config = {"data_dir": os.path.join(self.dir, "data"), **config}
        self.config_path = os.path.join(self.dir, "config.json")
        with open(self.config_path, "w") as f:
            json.dump(config, f)
        self.log_path = os.path.join(self.dir, "mcp.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([ctx.cage, "mcp", "--config", self.config_path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True, env=ENV)
        self.pid = self.proc.pid
        ctx.servers.append(self)
        self.next_id = 0
        self.stash = {}  # responses read while waiting for another id
        self.outstanding = set()  # ids sent and not answered yet
        self.sandboxes = set()  # every name a sandbox_create was sent for
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "compare.py", "version": "1"}})
        self.notify("notifications/initialized")

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def check_alive(self):
        if self.proc.poll() is not None:
            raise BenchError(f"codecage mcp exited with {self.proc.returncode}: {self.log_tail()}")

    def write(self, msg):
        try:
            self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.check_alive()
            raise

    def notify(self, method):
        self.write({"jsonrpc": "2.0", "method": method})

    def send(self, method, params):
        """Sends a request; returns its id."""
        self.next_id += 1
        if method == "tools/call" and params["name"] == "sandbox_create":
            self.sandboxes.add(params["arguments"]["name"])
        self.write({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.outstanding.add(self.next_id)
        return self.next_id

    def send_tool(self, name, arguments):
        return self.send("tools/call", {"name": name, "arguments": arguments})

    def recv(self):
        """The next response (notifications and requests of the server skipped)."""
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(timeout=30)
                raise BenchError(f"codecage mcp closed stdout (exit {self.proc.returncode}): "
                                 f"{self.log_tail()}")
            msg = json.loads(line)
            if "id" in msg and "method" not in msg:
                self.outstanding.discard(msg["id"])
                return msg

    def wait(self, rid):
        if rid in self.stash:
            return self.stash.pop(rid)
        while True:
            msg = self.recv()
            if msg["id"] == rid:
                return msg
            self.stash[msg["id"]] = msg

    def request(self, method, params):
        msg = self.wait(self.send(method, params))
        if "error" in msg:
            raise BenchError(f"{method}: JSON-RPC error {msg['error']}")
        return msg["result"]

    def tool(self, name, arguments):
        return tool_result(name, self.wait(self.send_tool(name, arguments)))

    def remove_all(self):
        """Removes every sandbox created (INFLIGHT at a time); returns the seconds."""
        names = sorted(self.sandboxes)
        t0 = now()
        pending = {}
        while names or pending:
            while names and len(pending) < INFLIGHT:
                name = names.pop()
                pending[self.send_tool("sandbox_remove", {"name": name})] = name
            msg = self.recv()
            name = pending.pop(msg["id"], None)
            if name is None:
                continue
            tool_result("sandbox_remove", msg)
            self.sandboxes.discard(name)
        return now() - t0

    def close(self):
        """Removes what is left, ends input, waits; escalates to SIGTERM, SIGKILL."""
        problems = []
        if self.proc.poll() is None and self.sandboxes:
            try:
                while self.outstanding:  # calls in flight finish first (a create, say)
                    self.recv()
                self.stash.clear()
                for name in sorted(self.sandboxes):
                    msg = self.wait(self.send_tool("sandbox_remove", {"name": name}))
                    result = msg.get("result") or {}
                    text = "".join(c.get("text", "") for c in result.get("content", []))
                    if "error" in msg or (result.get("isError") and "not found" not in text):
                        problems.append(f"sandbox_remove {name}: {msg}")
                self.sandboxes.clear()
            except (BenchError, OSError, ValueError) as e:
                problems.append(f"removing sandboxes of codecage mcp {self.pid}: {e}")
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        for sig, wait_s in ((None, 30), (signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            if sig is not None:
                problems.append(f"codecage mcp {self.pid} did not exit, sending {sig.name}")
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc.stdout.close()
        self.log.close()
        if self.sandboxes:
            problems.append(f"sandboxes not removed (kept in {self.dir}): {sorted(self.sandboxes)}")
        left = server_groups(self.pid, "cpuacct")
        if left:
            problems.append(f"cgroups of codecage mcp {self.pid} left: {left}")
        return problems


def tool_result(name, msg):
    """A tools/call response's result; a JSON-RPC error, an isError result or a
    run whose status is not ok stop the run."""
    if "error" in msg:
        raise BenchError(f"{name}: JSON-RPC error {msg['error']}")
    result = msg["result"]
    text = "".join(c.get("text", "") for c in result.get("content", []))
    if result.get("isError"):
        raise BenchError(f"{name} failed: {text}")
    status = (result.get("structuredContent") or {}).get("status", "ok")
    if status != "ok":
        raise BenchError(f"{name}: status {status}: {text}")
    return result


def oneshot_checked(msg):
    """A one-shot print(1)'s result, checked; returns whether it was pooled."""
    sc = tool_result("run_python", msg)["structuredContent"]
    if sc.get("stdout") != "1\n":
        raise BenchError(f"run_python print(1): stdout {sc.get('stdout')!r}")
    return bool(sc.get("pooled"))


def session_call_checked(msg):
    sc = tool_result("run_python", msg)["structuredContent"]
    if sc.get("return_value") != 2:
        raise BenchError(f"run_python x + 1: return value {sc.get('return_value')!r}")


# ---- the eval loop baseline --------------------------------------------------------------


class Loop:
    """python3 running LOOP over pipes (optionally under bubblewrap)."""

    def __init__(self, ctx, bwrap=False):
        argv = ["/usr/bin/python3", "-I", "-c", LOOP]
        if bwrap:
            argv = bwrap_argv(argv)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True, env=ENV)
        ctx.loops.append(self)
        self.next_id = 0

    def send(self, code):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
               "params": {"name": "run_python", "arguments": {"code": code, "sandbox": "bench"}}}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self):
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"the python3 eval loop exited ({self.proc.poll()})")
        return json.loads(line)

    def call(self, code):
        self.send(code)
        return self.recv()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


# ---- the table ---------------------------------------------------------------------------


def ms(v):
    return f"{v:.2f} ms" if v >= 1 else f"{v:.3f} ms"


def line(measure, cage, base="", ratio=None, bar="", ok=None, data=None):
    return {"measure": measure, "codecage": cage, "baseline": base,
            "ratio": ratio, "bar": bar, "pass": ok, "data": data or {}}


def row(name, title, lines, notes=()):
    return {"row": name, "number": ROWS.index(name) + 1, "title": title, "lines": lines,
            "notes": list(notes)}


def print_table(rows):
    head = ("row", "measure", "codecage", "baseline", "ratio", "bar", "")
    cells = []
    for r in rows:
        for i, ln in enumerate(r["lines"]):
            ok = "" if ln["pass"] is None else ("ok" if ln["pass"] else "MISSED")
            cells.append((f"{r['number']} {r['row']}" if i == 0 else "", ln["measure"],
                          ln["codecage"], ln["baseline"],
                          "" if ln["ratio"] is None else f"{ln['ratio']:.2f}x", ln["bar"], ok))
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    print(fmt.format(*head).rstrip())
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print(fmt.format(*c).rstrip())
    notes = [(r, n) for r in rows for n in r["notes"]]
    if notes:
        print("\nnotes:")
        for r, n in notes:
            print(f"  {r['number']} {r['row']}: {n}")


# ---- rows --------------------------------------------------------------------------------


def cgroup_moves_note(ctx):
    """On cgroup v1 every cold run moves its sandbox into its cgroup; without
    favordynmods that waits for an RCU grace period. Say which this host is."""
    p = subprocess.run([ctx.cage, "doctor", "--json"], capture_output=True, text=True,
                       timeout=60)
    try:
        checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
        return f"cgroup-moves ({checks['cgroup']['detail'].split(',')[0]}): " \
               f"{checks['cgroup-moves']['detail']}"
    except (ValueError, KeyError):
        return "cgroup-moves: doctor did not say"


def row_cold(ctx):
    rounds = 8 if ctx.args.quick else 40
    cmds = {"bare": PY, "codecage": [ctx.cage, "run", "--", *PY]}
    bw = bwrap_argv(PY)
    if bw:
        cmds["bwrap"] = bw
    s = {n: [w for w, _ in v] for n, v in interleaved(cmds, rounds).items()}
    m = {n: med(v) for n, v in s.items()}
    p = {n: pct(v, 90) for n, v in s.items()}
    text = {n: f"{ms(m[n])} (p90 {ms(p[n])})" for n in s}
    data = {n: {"median_ms": m[n], "p90_ms": p[n], "n": len(s[n])} for n in s}
    r1 = m["codecage"] / m["bare"]
    lines = [line("python3 print(1), vs bare", text["codecage"], "bare " + text["bare"], r1,
                  "<= 1.10x", r1 <= 1.10, data)]
    notes = [f"{rounds} interleaved rounds, median (p90)", cgroup_moves_note(ctx)]
    if bw:
        r2 = m["codecage"] / m["bwrap"]
        lines.append(line("python3 print(1), vs bwrap", text["codecage"],
                          "bwrap " + text["bwrap"], r2, "< 1.00x", r2 < 1.00, data))
    else:
        notes.append("bwrap is not installed: its baseline is skipped")
    return row("cold", "cold start", lines, notes)


def row_version(ctx):
    rounds = 30 if ctx.args.quick else 200
    s = interleaved({"codecage": [ctx.cage, "--version"], "true": ["/bin/true"]}, rounds)
    wall = {n: med([w for w, _ in v]) for n, v in s.items()}
    cpu = {n: statistics.mean([c for _, c in v]) for n, v in s.items()}
    data = {n: {"wall_median_ms": wall[n], "cpu_mean_ms": cpu[n], "n": len(s[n])} for n in s}
    return row("version", "codecage --version", [
        line("wall, median", ms(wall["codecage"]), "/bin/true " + ms(wall["true"]),
             wall["codecage"] / wall["true"], "-", None, data),
        line("CPU (user+sys), mean", ms(cpu["codecage"]), "/bin/true " + ms(cpu["true"]),
             cpu["codecage"] / cpu["true"] if cpu["true"] else None, "-", None, data),
    ], [f"{rounds} interleaved rounds; CPU from os.wait4 rusage (tick-granular per run, "
        "so the mean is shown)"])


def row_true(ctx):
    rounds = 10 if ctx.args.quick else 40
    cmds = {"codecage": [ctx.cage, "run", "--", "/bin/true"], "true": ["/bin/true"]}
    bw = bwrap_argv(["/bin/true"])
    if bw:
        cmds["bwrap"] = bw
    s = {n: [w for w, _ in v] for n, v in interleaved(cmds, rounds).items()}
    m = {n: med(v) for n, v in s.items()}
    text = {n: f"{ms(m[n])} (p90 {ms(pct(s[n], 90))})" for n in s}
    data = {n: {"median_ms": m[n], "p90_ms": pct(s[n], 90), "n": len(s[n])} for n in s}
    lines, notes = [], [f"{rounds} interleaved rounds, median (p90)"]
    if bw:
        lines.append(line("/bin/true, vs bwrap", text["codecage"], "bwrap " + text["bwrap"],
                          m["codecage"] / m["bwrap"], "-", None, data))
    else:
        notes.append("bwrap is not installed: its baseline is skipped")
    lines.append(line("/bin/true, vs bare", text["codecage"], "bare " + text["true"],
                      m["codecage"] / m["true"], "-", None, data))
    return row("true", "codecage run -- /bin/true", lines, notes)


def pool_server(ctx):
    if not getattr(ctx, "pool", None):
        ctx.pool = McpServer(ctx, "pool", {"pool_size": ctx.args.pool_size})
    return ctx.pool


def oneshot_load(server, inflight, seconds):
    """One-shot print(1) calls with `inflight` in flight for `seconds`:
    (latencies ms, calls completed within the time, pooled, elapsed s)."""
    args = {"code": "print(1)"}
    sent, lat, pooled, done = {}, [], 0, 0
    t0 = now()
    end = t0 + seconds
    for _ in range(inflight):
        sent[server.send_tool("run_python", args)] = now()
    while sent:
        msg = server.recv()
        t = now()
        start = sent.pop(msg["id"])
        pooled += oneshot_checked(msg)
        lat.append((t - start) * 1000)
        if t <= end:
            done += 1
            sent[server.send_tool("run_python", args)] = now()
    return lat, done, pooled, seconds


def row_pool(ctx):
    calls = 50 if ctx.args.quick else 200
    seconds = 3 if ctx.args.quick else 10
    size = ctx.args.pool_size
    server = pool_server(ctx)
    wait_pool_full(server, size)
    lat, pooled = [], 0
    for _ in range(calls):
        t0 = now()
        msg = server.wait(server.send_tool("run_python", {"code": "print(1)"}))
        lat.append((now() - t0) * 1000)
        pooled += oneshot_checked(msg)
    lines = []

    def add(label, lat, pooled):
        p50, p90, p99 = med(lat), pct(lat, 90), pct(lat, 99)
        lines.append(line(label, f"p50 {ms(p50)} p90 {ms(p90)} p99 {ms(p99)}",
                          f"{pooled}/{len(lat)} pooled", p90 / p50, "p90 <= 2.00x p50",
                          p90 <= 2 * p50, {"p50_ms": p50, "p90_ms": p90, "p99_ms": p99,
                                           "calls": len(lat), "pooled": pooled}))

    add(f"{calls} back-to-back, 1 in flight", lat, pooled)
    for n in (2, 8):
        wait_pool_full(server, size)
        lat, _, pooled, _ = oneshot_load(server, n, seconds)
        add(f"{n} in flight, {seconds} s", lat, pooled)
    return row("pool", "one-shot run_python latency via codecage mcp", lines, [
        f"pool_size {size}, waited full (every pooled sandbox idle) before each line; "
        "'baseline' column: how many calls a pooled sandbox served",
        "concurrency: N tools/call requests pipelined over one stdio connection to one "
        "`codecage mcp`, which runs them at once, each on a thread of its own (N concurrent "
        "one-shot runs, each a fresh sandbox)"])


def bare_load(inflight, seconds):
    """`inflight` threads each spawning python3 -c 'print(1)' back to back: runs done."""
    end = now() + seconds
    counts, errors = [0] * inflight, []

    def worker(i):
        try:
            while now() < end:
                spawn(PY)
                counts[i] += 1
        except BenchError as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(inflight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


def row_throughput(ctx):
    seconds = 3 if ctx.args.quick else 10
    size = ctx.args.pool_size
    server = pool_server(ctx)
    lines = []
    for n in (1, 2, 8):
        wait_pool_full(server, size)
        lat, done, pooled, _ = oneshot_load(server, n, seconds)
        wait_pool_full(server, size)
        bare = bare_load(n, seconds)
        cage_rate, bare_rate = done / seconds, bare / seconds
        ratio = cage_rate / bare_rate
        lines.append(line(f"{n} in flight, {seconds} s", f"{cage_rate:.1f} runs/s",
                          f"bare {bare_rate:.1f} runs/s", ratio, ">= 2.00x bare", ratio >= 2,
                          {"codecage_runs_per_s": cage_rate, "bare_runs_per_s": bare_rate,
                           "codecage_runs": done, "pooled": pooled, "bare_runs": bare,
                           "seconds": seconds}))
    return row("throughput", "one-shot throughput, fresh sandbox per run", lines, [
        f"codecage: run_python print(1) over one `codecage mcp` (pool_size {size}), N requests "
        "in flight; bare: N threads each posix_spawn + wait of python3 -c 'print(1)'"])


def row_session(ctx):
    rounds = 200 if ctx.args.quick else 1000
    server = McpServer(ctx, "session", {"pool_size": 0})
    server.tool("sandbox_create", {"name": "bench"})
    server.tool("run_python", {"code": "x = 1", "sandbox": "bench"})
    loop = Loop(ctx)
    loop.call("x = 1")
    args = {"code": "x + 1", "sandbox": "bench"}

    def cage_call():
        t0 = now()
        msg = server.wait(server.send_tool("run_python", args))
        dt = (now() - t0) * 1000
        session_call_checked(msg)
        return dt

    def floor_call():
        t0 = now()
        msg = loop.call("x + 1")
        dt = (now() - t0) * 1000
        if msg["result"]["return_value"] != 2:
            raise BenchError(f"eval loop: {msg}")
        return dt

    for _ in range(BLOCK):  # warm both
        cage_call()
        floor_call()
    cage, floor = [], []
    for _ in range(0, rounds, BLOCK):
        cage += [cage_call() for _ in range(BLOCK)]
        floor += [floor_call() for _ in range(BLOCK)]
    server.tool("sandbox_remove", {"name": "bench"})
    server.sandboxes.discard("bench")
    mc, mf = med(cage), med(floor)
    return row("session", "session round trip, x + 1", [
        line("median (p90)", f"{ms(mc)} (p90 {ms(pct(cage, 90))})",
             f"floor {ms(mf)} (p90 {ms(pct(floor, 90))})", mc / mf, "<= floor + 0.15 ms",
             mc <= mf + 0.15, {"median_ms": mc, "p90_ms": pct(cage, 90),
                               "floor_median_ms": mf, "floor_p90_ms": pct(floor, 90),
                               "over_floor_ms": mc - mf, "n": len(cage)}),
    ], [f"{len(cage)} calls in blocks of {BLOCK}, alternating with the floor; codecage "
        f"is {mc - mf:.3f} ms over the floor (a python3 loop reading JSON-RPC lines from a "
        "pipe, eval, writing a JSON line)"])


def create_sessions(server, names):
    """sandbox_create + run_python('x = 1') for each name, INFLIGHT at a time;
    returns the perf_counter time at which each session became ready."""
    todo = list(reversed(names))
    pending, ready = {}, []
    while todo or pending:
        while todo and len(pending) < INFLIGHT:
            name = todo.pop()
            pending[server.send_tool("sandbox_create", {"name": name})] = ("create", name)
        msg = server.recv()
        step, name = pending.pop(msg["id"])
        if step == "create":
            tool_result("sandbox_create", msg)
            rid = server.send_tool("run_python", {"code": "x = 1", "sandbox": name})
            pending[rid] = ("run", name)
        else:
            tool_result("run_python", msg)
            ready.append(now())
    return ready


def memory_of_loops(ctx, n, bwrap):
    before = settled_used_kib()
    loops = [Loop(ctx, bwrap=bwrap) for _ in range(n)]
    for lp in loops:
        lp.send("x = 1")
    for lp in loops:
        lp.recv()
    time.sleep(1)
    after = settled_used_kib()
    for lp in loops:
        lp.close()
        ctx.loops.remove(lp)
    return (after - before) / 1024 / n


def memory_of_sessions(server, n, names):
    """Used MiB per session, cgroup-charged MiB per session, server RSS MiB per session."""
    before, rss0 = settled_used_kib(), rss_kib(server.pid)
    create_sessions(server, names)
    time.sleep(1)
    after = settled_used_kib()
    charged = groups_memory_bytes(server.pid) / MIB / n
    server_rss = (rss_kib(server.pid) - rss0) / 1024 / n
    server.remove_all()
    return (after - before) / 1024 / n, charged, server_rss


def row_memory(ctx):
    n = ctx.args.sessions or (30 if ctx.args.quick else 200)
    reps = 1 if ctx.args.quick else 3
    check_memory_for(n)
    bwrap = bool(bwrap_argv([]))
    server = McpServer(ctx, "memory", {"pool_size": 0,
                                       "limits": {"max_sandboxes_per_tenant": n + 16}})
    time.sleep(1)
    cage, charged, rss, loop, bw = [], [], [], [], []
    for rep in range(reps):  # interleaved: codecage, loop, loop in bwrap
        c, ch, r = memory_of_sessions(server, n, [f"m{rep}-{i}" for i in range(n)])
        cage.append(c)
        charged.append(ch)
        rss.append(r)
        loop.append(memory_of_loops(ctx, n, False))
        if bwrap:
            bw.append(memory_of_loops(ctx, n, True))
    c, lp = med(cage), med(loop)
    data = {"mib_per_session": c, "loop_mib": lp, "cgroup_charged_mib": med(charged),
            "server_rss_mib": med(rss), "sessions": n, "repetitions": reps,
            "samples": {"codecage": cage, "loop": loop, "bwrap_loop": bw}}
    lines = [line("used memory per session, vs python3 loop", f"{c:.2f} MiB", f"loop {lp:.2f} MiB",
                  c / lp if lp > 0 else None, "<= 4.5 MiB", c <= 4.5, data)]
    notes = [f"{n} sessions, median of {reps} interleaved repetitions; MemTotal - MemAvailable "
             "after minus before, / N (machine-wide: other work on the machine shows up; "
             f"codecage samples {', '.join(f'{x:.2f}' for x in cage)} MiB); "
             f"charged to the sandboxes' memory cgroups: {med(charged):.2f} MiB each; the server "
             f"process's own RSS grew {med(rss):.2f} MiB per session"]
    if bwrap:
        b = med(bw)
        data["bwrap_mib"] = b
        lines.append(line("used memory per session, vs loop in bwrap", f"{c:.2f} MiB",
                          f"bwrap loop {b:.2f} MiB", c / b if b > 0 else None, "<= 4.5 MiB",
                          c <= 4.5, data))
    else:
        notes.append("bwrap is not installed: its baseline is skipped")
    return row("memory", "memory per idle session", lines, notes)


def check_memory_for(n, mib_each=5):
    with open("/proc/meminfo") as f:
        avail = next(int(x.split()[1]) for x in f if x.startswith("MemAvailable:")) // 1024
    if n * mib_each > avail:
        raise BenchError(f"{n} sessions need about {n * mib_each} MiB; {avail} MiB available")


def row_live(ctx):
    n = ctx.args.live_sessions
    if n < 2:
        raise BenchError("row live needs --live-sessions N (N >= 2)")
    check_memory_for(n)
    calls = 300 if ctx.args.quick else 1000
    block = min(500, n // 2)
    server = McpServer(ctx, "live", {"pool_size": 0,
                                     "limits": {"max_sandboxes_per_tenant": n + 16}})
    time.sleep(1)
    before = settled_used_kib()
    names = [f"s{i}" for i in range(n)]
    t0 = now()
    ready = create_sessions(server, names)
    first = block / (ready[block - 1] - t0)
    last = block / (ready[-1] - ready[n - block - 1])
    time.sleep(1)
    used = (settled_used_kib() - before) / 1024 / n
    pick = random.Random(1)
    lat = []
    for _ in range(calls):
        name = pick.choice(names)
        t = now()
        msg = server.wait(server.send_tool("run_python", {"code": "x + 1", "sandbox": name}))
        lat.append((now() - t) * 1000)
        session_call_checked(msg)
    removal = n / server.remove_all()
    p50 = med(lat)
    return row("live", f"{n} live sessions", [
        line(f"creation, first {block}", f"{first:.1f} sessions/s", "", None, "-", None,
             {"sessions_per_s": first, "block": block}),
        line(f"creation, last {block}", f"{last:.1f} sessions/s", "", last / first, "-", None,
             {"sessions_per_s": last, "block": block}),
        line("session call, all alive", f"p50 {ms(p50)} (p90 {ms(pct(lat, 90))})", "", None,
             "p50 < 1 ms", p50 < 1, {"p50_ms": p50, "p90_ms": pct(lat, 90), "calls": calls}),
        line("removal", f"{removal:.1f} sessions/s", "", None, "-", None,
             {"sessions_per_s": removal}),
    ], [f"{n} sessions created {INFLIGHT} at a time (sandbox_create + run_python x = 1); "
        f"ratio on 'last' = last/first rate; {calls} x + 1 calls on random live sessions; "
        f"used memory {used:.2f} MiB per session"])


ROW_FUNCS = {"cold": row_cold, "version": row_version, "true": row_true, "pool": row_pool,
             "throughput": row_throughput, "session": row_session, "memory": row_memory,
             "live": row_live}


# ---- main --------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "build"))
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--only", help="rows, by name or number: " + ",".join(ROWS))
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--sessions", type=int, help="row 7's sessions (default 200; --quick 30)")
    ap.add_argument("--live-sessions", type=int, default=0,
                    help="row 8's live sessions (default 0: row 8 skipped)")
    ap.add_argument("--pool-size", type=int, default=4, help="rows 4-5's pool_size (default 4)")
    args = ap.parse_args()
    if args.only:
        rows = []
        for item in args.only.split(","):
            item = item.strip()
            name = ROWS[int(item) - 1] if item.isdigit() and 1 <= int(item) <= 8 else item
            if name not in ROWS:
                ap.error(f"--only: unknown row {item!r} (rows: {', '.join(ROWS)} or 1-8)")
            rows.append(name)
        if "live" in rows and args.live_sessions < 2:
            ap.error("--only live needs --live-sessions N")
    else:
        rows = ROWS[:7] + (["live"] if args.live_sessions else [])
    args.rows = [r for r in ROWS if r in rows]
    if args.pool_size < 1:
        ap.error("--pool-size must be at least 1 (rows 4 and 5 measure the pool)")
    return args


def raise_timeout(signum, frame):
    raise TimeoutError


def raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main():
    args = parse_args()
    if os.geteuid() != 0:
        sys.exit("compare.py: run as root (sandboxes with every limit, bubblewrap as root)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGTERM, raise_interrupt)
    ctx, results, failure = None, [], None
    try:
        ctx = Context(args)
        for name in args.rows:
            if not args.json:
                print(f"measuring {ROWS.index(name) + 1} {name} ...", file=sys.stderr, flush=True)
            results.append(ROW_FUNCS[name](ctx))
    except BenchError as e:
        failure = str(e)
    except KeyboardInterrupt:
        failure = "interrupted"
    finally:
        problems = ctx.cleanup() if ctx else []
    if failure:
        sys.exit(f"compare.py: FAILED: {failure}")
    if args.json:
        json.dump({"quick": args.quick, "build": os.path.abspath(args.build),
                   "bwrap": shutil.which("bwrap"), "nproc": os.cpu_count(),
                   "rows": results, "cleanup_problems": problems}, sys.stdout, indent=1)
        print()
    else:
        print_table(results)
        missed = sum(1 for r in results for ln in r["lines"] if ln["pass"] is False)
        print(f"\nbars missed: {missed}" + (" (the machine may be busy: rerun)" if missed else ""))
    if problems:
        sys.exit("compare.py: cleanup problems (see above)")


if __name__ == "__main__":
    main()
