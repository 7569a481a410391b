#!/usr/bin/python3
"""Density of named sandboxes with live Python sessions, through one
`codecage serve` on a Unix socket (pool off, the tenant quota raised).

For i in 0..N-1: create sandbox dN-i (memory_mib 64) and run `x = i` in its
Python session. Printed:
  creation rate (create + first session call) per block of 500 (or N/8),
      first and last block
  a session call `x + 1` p50/p90 on random live sandboxes at checkpoints,
      through http.client and through a raw HTTP/1.1 client (the server's
      answer time without http.client's own), alternating
  server fds and threads per live sandbox (right after calls, and idle)
  memory per idle sandbox with its session: the drop of MemAvailable (and
      the rise of used memory) over N, next to a bare `python3` REPL loop
      and the same loop under bubblewrap (when bwrap is installed), both
      measured in this run with the same N (capped at --baseline-n)
  removal rate of all N, and what is left afterwards (processes, cgroups,
      mounts, loop devices, server fds)
  the machine's own cost of a fresh page at each block (a bare process
      writing 64 MiB it just mapped): on a VM whose host backs guest memory
      lazily it grows as memory fills, and every sandbox is made of fresh
      pages, so it bounds how flat creation can be there
  the kernel's cost of a new memory cgroup at the start and at each block
      (mkdir of throwaway groups beside the server's): it allocates room for
      every memory-aware shrinker the kernel ever had, one per superblock
      (each sandbox's mounts, its IPC namespace's mqueue), and that number
      never falls until a reboot

Usage (root): sudo bench/density.py [--n 4000] [--build build] [--block 500]
              [--baseline-n 200] [--data DIR] [--concurrency K]
--concurrency K: K clients create (and first call) at once, as a platform
serving many conversations does; 1 (the default) measures one client's
back-to-back rate, bound by the latency of one creation.
Not a test: numbers are printed.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


RESERVE_EVERY = 25  # creations between two checks of --reserve-mib


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=120)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(120)
        s.connect(self.path)
        self.sock = s


class Client:
    def __init__(self, path):
        self.path = path
        self.conn = UnixHTTP(path)

    def req(self, method, url, body=None):
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            try:
                self.conn.request(method, url, body=data,
                                  headers={"Content-Type": "application/json"} if data else {})
                r = self.conn.getresponse()
                out = r.read()
                return r.status, (json.loads(out) if out else None)
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = UnixHTTP(self.path)
                if attempt:
                    raise


class RawClient:
    """HTTP/1.1 on a kept Unix socket connection with nothing but the
    request's bytes and the response's status, Content-Length and body:
    the server's answer time without http.client's own (~0.1 ms a call
    here)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(path)
        self.buf = b""

    def post(self, url, body):
        data = json.dumps(body).encode()
        self.sock.sendall(b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                          b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (url.encode(), len(data), data))
        while b"\r\n\r\n" not in self.buf:
            self.more()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(v) for k, _, v in (l.partition(b":") for l in lines[1:])
                      if k.strip().lower() == b"content-length")
        while len(self.buf) < length:
            self.more()
        out, self.buf = self.buf[:length], self.buf[length:]
        return int(lines[0].split()[1]), json.loads(out)

    def more(self):
        got = self.sock.recv(65536)
        if not got:
            raise OSError("the server closed the connection")
        self.buf += got

    def close(self):
        self.sock.close()


def meminfo():
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            m[k] = int(v.split()[0]) * 1024
    return m


KERNEL_KEYS = ("Slab", "KernelStack", "PageTables", "Percpu")


def kernel_bytes():
    """Memory the kernel holds in objects: less noisy than MemAvailable on a
    shared machine (others' page cache and heaps do not move it much)."""
    m = meminfo()
    return sum(m.get(k, 0) for k in KERNEL_KEYS)


def mem_used():
    m = meminfo()
    return m["MemTotal"] - m["MemAvailable"], m["MemTotal"] - m["MemFree"] - m["Buffers"] - m["Cached"] - m["SReclaimable"]


def descendants(pid):
    """Every process beneath pid (the sandboxes' init and what runs in them)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def pss_kib(pids):
    """Sum of Pss (and of page tables) over pids, KiB."""
    pss = pte = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                pss += next(int(l.split()[1]) for l in f if l.startswith("Pss:"))
            with open(f"/proc/{p}/status") as f:
                pte += next(int(l.split()[1]) for l in f if l.startswith("VmPTE:"))
        except (OSError, StopIteration):
            pass
    return pss, pte


FRESH_PAGE_PROBE = (
    "import mmap, time\n"
    "n = 64 << 20\n"
    "m = mmap.mmap(-1, n)\n"
    "t = time.perf_counter()\n"
    "for off in range(0, n, 4096):\n"
    "    m[off] = 1\n"
    "print((time.perf_counter() - t) * 1e9 / (n // 4096))\n")


def fresh_page_ns():
    """What writing a page it just mapped costs a bare process, in ns: the
    machine's baseline for everything a sandbox is made of."""
    out = subprocess.run([sys.executable, "-c", FRESH_PAGE_PROBE], capture_output=True,
                         text=True, check=True).stdout
    return float(out)


def memory_cgroup_parent():
    """Where a throwaway memory cgroup can be made: the v1 memory hierarchy,
    or a v2 root that gives its children the memory controller."""
    if os.path.isdir("/sys/fs/cgroup/memory"):
        return "/sys/fs/cgroup/memory"
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        try:
            with open(f"{root}/cgroup.subtree_control") as f:
                if "memory" in f.read().split():
                    return root
        except OSError:
            pass
    return None


def new_memory_cgroup_us(groups=20):
    """The median time to make an empty memory cgroup, in µs (None without
    one, or when the kernel refuses one): what every sandbox's group costs
    the kernel before it holds anything."""
    parent = memory_cgroup_parent()
    if not parent:
        return None
    base = f"{parent}/density-probe-{os.getpid()}"
    times = []
    try:
        os.mkdir(base)
        for i in range(groups):
            t = time.perf_counter()
            os.mkdir(f"{base}/g{i}")
            times.append((time.perf_counter() - t) * 1e6)
    except OSError as e:
        print(f"density.py: no memory cgroup probe: {e}", file=sys.stderr)
    finally:
        for i in range(len(times)):
            os.rmdir(f"{base}/g{i}")
        if os.path.isdir(base):
            os.rmdir(base)
    return statistics.median(times) if len(times) == groups else None


def microseconds(v):
    return "n/a" if v is None else f"{v:.0f} µs"


def settle():
    subprocess.run(["sync"])
    time.sleep(2)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else 0.0


REPL = "import sys\nfor l in sys.stdin:\n    exec(l)\n    sys.stdout.write('.\\n'); sys.stdout.flush()\n"


def baseline_mem(n, wrap):
    """Memory per idle python3 REPL loop (optionally under bwrap), n alive."""
    settle()
    a0, u0 = mem_used()
    procs = []
    for i in range(n):
        cmd = wrap + ["/usr/bin/python3", "-S", "-c", REPL]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        p.stdin.write(f"x = {i}\n")
        p.stdin.flush()
        p.stdout.readline()
        procs.append(p)
    settle()
    a1, u1 = mem_used()
    for p in procs:
        p.stdin.close()
    for p in procs:
        p.wait()
    return (a1 - a0) / n / 2**20, (u1 - u0) / n / 2**20


UID_SLOT_BASE = 0x60000000
UID_SLOT_FILE = "/run/codecage/uid-slots/locks"  # byte N locked: uid slot N held


def slots_of(pids):
    """The uid slots the sandboxes' processes run as."""
    out = set()
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                uid = next(int(l.split()[1]) for l in f if l.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if uid >= UID_SLOT_BASE:
            out.add(uid - UID_SLOT_BASE)
    return out


def is_reaper(pid):
    """The server's cgroup reaper (it lives as long as the server)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"__reap-cgroups" in f.read()
    except OSError:
        return True  # gone


def slot_free(slot):
    import fcntl
    try:
        with open(UID_SLOT_FILE, "r+") as f:
            try:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
            except OSError:
                return False
            fcntl.lockf(f, fcntl.LOCK_UN, 1, slot)
    except FileNotFoundError:
        pass
    return True


def server_children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {p for p in out.split() if not is_reaper(p)}


def leftovers(data, pid, slots, kept=()):
    """What of the sandboxes is left while the server still runs (the uid
    slots of the processes in kept, and their cgroups, count as 0)."""
    out = {}
    cg = 0
    for hier in ("memory", "pids", "cpu", "cpuacct", "freezer"):
        d = f"/sys/fs/cgroup/{hier}/codecage"
        if os.path.isdir(d):
            cg += sum(1 for e in os.listdir(d) if e.startswith(f"run-{pid}-"))
    out["cgroups"] = cg
    out["uid slots held"] = sum(not slot_free(sl) for sl in slots - slots_of(kept))
    loops = 0
    for d in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{d}/loop/backing_file") as f:
                loops += data in f.read()
        except OSError:  # not a loop device, unbound, or just gone
            pass
    out["loop devices on data"] = loops
    with open(f"/proc/{pid}/mountinfo") as f:
        out["mounts under data"] = sum(1 for l in f if data in l)
    return out


def is_zygote(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"codecage's zygote" in f.read()
    except OSError:
        return False


def templates(srv_pid):
    """The image's zygote templates the server runs: each is its child (an
    init) and grandchild (the interpreter); their sandboxes are beneath."""
    kept = set()
    for k in server_children(srv_pid):
        zygotes = {g for g in server_children(int(k)) if is_zygote(g)}
        if zygotes:
            kept |= {k} | zygotes
    return kept


def kept_between_sandboxes(c, data, srv):
    """One sandbox created, used and removed before the run: what the server
    keeps for the next one (a zygote template of the image, started by the
    first create) is there from then on, and is not left over at the end.
    A template makes a bounded number of sandboxes, then a new one takes
    over; the old one ends with its last sandbox. So at the end, one
    template is kept, whichever it is."""
    for method, path, body in (("POST", "/v1/sandboxes", {"name": "warm", "memory_mib": 64}),
                               ("POST", "/v1/sandboxes/warm/python", {"code": "x = 0"}),
                               ("DELETE", "/v1/sandboxes/warm", None)):
        st, reply = c.req(method, path, body)
        assert st in (200, 201, 204), (path, st, reply)
    deadline = time.monotonic() + 60
    while True:
        kept = templates(srv.pid)
        if set(map(str, descendants(srv.pid))) <= kept or time.monotonic() > deadline:
            return kept, leftovers(data, srv.pid, set())
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--build", default="build")
    ap.add_argument("--block", type=int, default=0)
    ap.add_argument("--baseline-n", type=int, default=200)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=1,
                    help="clients creating sandboxes at the same time (default 1)")
    ap.add_argument("--reserve-mib", type=int, default=1536,
                    help="stop creating when the machine has less memory available (default 1536)")
    ap.add_argument("--data", default="")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="a top-level key of the server's config (docs/CONFIG.md), e.g. "
                         "sandboxes_per_template=250 or fork_sandboxes=false; repeatable")
    a = ap.parse_args()
    n = a.n
    block = a.block or min(500, max(1, n // 8))
    data = a.data or tempfile.mkdtemp(prefix="codecage-density-")
    os.makedirs(data, exist_ok=True)
    sock = os.path.join(data, "s.sock")
    cfg = {"data_dir": data, "listen": {"http": None, "unix": sock}, "pool_size": 0,
           "limits": {"max_sandboxes_per_tenant": max(64, n)}}
    for item in a.set:
        key, _, value = item.partition("=")
        cfg[key] = json.loads(value)
    cfgp = os.path.join(data, "config.json")
    with open(cfgp, "w") as f:
        json.dump(cfg, f)
    binary = os.path.join(a.build, "codecage")

    base = {}
    if not a.no_baseline:
        bn = min(n, a.baseline_n)
        base["python3 REPL loop"] = baseline_mem(bn, [])
        bw = shutil.which("bwrap")
        if bw:
            base["python3 REPL loop under bwrap"] = baseline_mem(
                bn, [bw, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
                     "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"])

    settle()
    a0, u0 = mem_used()
    k0 = kernel_bytes()
    srv = subprocess.Popen([binary, "serve", "--config", cfgp], stderr=subprocess.DEVNULL)
    try:
        run(a, n, block, data, sock, srv, base, a0, u0, k0)
    finally:
        srv.terminate()
        srv.wait()
        if not a.data:
            shutil.rmtree(data, ignore_errors=True)


def run(a, n, block, data, sock, srv, base, a0, u0, k0):
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    c = Client(sock)
    while True:
        try:
            if c.req("GET", "/healthz")[0] == 200:
                break
        except OSError:
            time.sleep(0.05)
    kids0, left0 = kept_between_sandboxes(c, data, srv)
    fd0, th0 = fds(srv.pid), threads(srv.pid)
    print(f"server at start: {fd0} fds, {th0} threads; kept between sandboxes: "
          f"{len(kids0)} processes (the image's zygote template), {left0}")

    memcg0 = new_memory_cgroup_us()
    print(f"a new memory cgroup before the first sandbox: {microseconds(memcg0)}")
    names = []
    rates, pages, memcgs = [], [], []
    t_block = time.monotonic()
    t_all = t_block
    checkpoints = sorted({64, 1000, n} & set(range(1, n + 1)))

    def calls(k):
        """Latencies of x + 1 through http.client and a raw client, alternating."""
        lat, raw_lat = [], []
        raw = RawClient(sock)
        for i in range(min(a.calls, 20 * k)):
            nm = random.choice(names)
            t = time.perf_counter()
            if i % 2:
                st, body = raw.post(f"/v1/sandboxes/{nm}/python", {"code": "x + 1"})
            else:
                st, body = c.req("POST", f"/v1/sandboxes/{nm}/python", {"code": "x + 1"})
            (raw_lat if i % 2 else lat).append((time.perf_counter() - t) * 1e3)
            assert st == 200 and body["status"] == "ok", body
        raw.close()
        return lat, raw_lat

    def show_calls(k, lat, raw_lat, tail=""):
        print(f"  {k:5d} live: call x + 1 p50 {pct(lat, .5):.3f} ms p90 {pct(lat, .9):.3f} ms "
              f"(n={len(lat)}); raw client p50 {pct(raw_lat, .5):.3f} ms "
              f"p90 {pct(raw_lat, .9):.3f} ms{tail}", flush=True)

    failed = None
    local = threading.local()
    creators = []

    def create_one(i):
        """create + first call of sandbox d<i>, on this thread's connection."""
        # Every RESERVE_EVERY creations: /proc/meminfo walks every block
        # device (a loop device per sandbox), a cost of the bench's own that
        # grows with N and competes with the server for the same cores.
        if i % RESERVE_EVERY == 0 and meminfo()["MemAvailable"] < a.reserve_mib * 2**20:
            return f"stopped before d{i}: less than {a.reserve_mib} MiB of memory left"
        if not hasattr(local, "c"):
            local.c = Client(sock)
            creators.append(local.c)
        nm = f"d{i}"
        st, body = local.c.req("POST", "/v1/sandboxes", {"name": nm, "memory_mib": 64})
        if st != 201:
            return f"create {nm}: {st} {body}"
        st, body = local.c.req("POST", f"/v1/sandboxes/{nm}/python", {"code": f"x = {i}"})
        if st != 200 or body["status"] != "ok":
            return f"python {nm}: {st} {body}"
        names.append(nm)
        return None

    # In chunks that end at each block and checkpoint, a.concurrency
    # creators at a time within a chunk.
    edges = sorted({*range(block, n + 1, block), *checkpoints, n})
    done = 0
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
        for edge in edges:
            errors = [e for e in ex.map(create_one, range(done, edge)) if e]
            done = edge
            if errors:
                failed = errors[0]
                break
            k = len(names)
            if k % block == 0:
                now = time.monotonic()
                rates.append(block / (now - t_block))
                t_probe = time.monotonic()
                pages.append(fresh_page_ns())
                memcgs.append(new_memory_cgroup_us())
                t_all += time.monotonic() - t_probe  # not creation time
                print(f"  {k:5d} live: last {block} at {rates[-1]:.1f}/s, server {fds(srv.pid)} fds "
                      f"{threads(srv.pid)} threads; a fresh page {pages[-1]:.0f} ns, "
                      f"a new memory cgroup {microseconds(memcgs[-1])}", flush=True)
                t_block = time.monotonic()
            if k in checkpoints:
                t_pause = time.monotonic()
                show_calls(k, *calls(k), f"; server {(fds(srv.pid) - fd0) / k:.2f} fds/sandbox")
                t_block += time.monotonic() - t_pause
    for cr in creators:  # the server's fd count is compared with its start
        cr.conn.close()
    k = len(names)
    t_create = time.monotonic() - t_all
    if failed:
        print("STOPPED:", failed)
    print(f"reached {k} live sandboxes with sessions, {k / t_create:.1f} created/s overall")
    if len(rates) >= 2:
        print(f"creation rate: first block {rates[0]:.1f}/s, last block {rates[-1]:.1f}/s "
              f"(ratio {rates[-1] / rates[0]:.2f}); the machine's fresh page: "
              f"{pages[0]:.0f} ns after the first block, {pages[-1]:.0f} ns after the last "
              f"(ratio {pages[-1] / pages[0]:.2f}); a new memory cgroup: {microseconds(memcg0)} before "
              f"the first sandbox, {microseconds(memcgs[-1])} after the last block")
    if k and k not in checkpoints:
        show_calls(k, *calls(k))
    fdk, thk = fds(srv.pid), threads(srv.pid)
    print(f"server right after calls: {fdk} fds ({(fdk - fd0) / max(k, 1):.2f} per sandbox), "
          f"{thk} threads")
    settle()
    time.sleep(2)  # idle sandboxes give back their cgroup fds after 2 s
    fdk, thk = fds(srv.pid), threads(srv.pid)
    print(f"server, all idle: {fdk} fds ({(fdk - fd0) / max(k, 1):.2f} per sandbox), "
          f"{thk} threads")
    a1, u1 = mem_used()
    k1 = kernel_bytes()
    if k:
        print(f"memory per idle sandbox with its session: {(a1 - a0) / k / 2**20:.2f} MiB of "
              f"MemAvailable, {(u1 - u0) / k / 2**20:.2f} MiB used (n={k})")
    if k:
        pss, pte = pss_kib(descendants(srv.pid))
        print(f"  of which the sandboxes' processes: {pss / k / 1024:.2f} MiB Pss + "
              f"{pte / k / 1024:.2f} MiB page tables each; the server "
              f"{pss_kib([srv.pid])[0] / 1024:.0f} MiB Pss in all")
        print(f"  kernel objects ({' + '.join(KERNEL_KEYS)}): {(k1 - k0) / k / 2**20:.2f} MiB "
              f"each (namespaces, cgroups, the workspace's loop device and ext4, sockets, "
              f"page tables)")
    for what, (av, us) in base.items():
        print(f"  baseline {what}: {av:.2f} MiB of MemAvailable, {us:.2f} MiB used")

    slots = slots_of(descendants(srv.pid))
    t = time.monotonic()
    for nm in names:
        st, _ = c.req("DELETE", f"/v1/sandboxes/{nm}")
        assert st in (200, 204), st
    dt = time.monotonic() - t
    if k:
        print(f"removed {k} (answered) in {dt:.1f} s: {k / dt:.1f}/s")
    # Teardown finishes off the request path: wait until nothing is left.
    while time.monotonic() - t < dt + 300:
        kept = templates(srv.pid)
        left = {key: v - left0.get(key, 0)
                for key, v in leftovers(data, srv.pid, slots, kept).items()}
        left["zygote templates beyond one"] = max(0, len(kept) // 2 - 1)
        kids = {p for p in map(str, descendants(srv.pid)) if p not in kept and not is_reaper(p)}
        # Kept for the next sandbox: the memfd of codecage-init, the uid slots' lock file.
        if not any(left.values()) and not kids and fds(srv.pid) <= fd0 + 2:
            break
        time.sleep(0.05)
    dt_all = time.monotonic() - t
    if k:
        print(f"all {k} torn down (nothing left) after {dt_all:.1f} s: {k / dt_all:.1f}/s")
    print(f"server after removal: {fds(srv.pid)} fds (start {fd0}), {threads(srv.pid)} threads")
    print(f"sandbox processes left: {len(kids)}; left in the server:", left)


if __name__ == "__main__":
    main()
