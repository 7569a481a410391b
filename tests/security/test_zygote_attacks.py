"""Attacks on the warm pool's zygote: sandboxes forked from one template
interpreter (src/core/zygote.c, runtime/python/codecage_zygote.py) must be
as isolated from each other and from the template as sandboxes started one
by one.

Two pooled runs live at once: the first leaves traces of itself (files in
/tmp, /workspace and /dev/shm, a listening abstract unix socket, a SysV
shared memory segment and message queue, a process) and names its driver
process with a token; the second looks for all of them. From the host, the
two drivers must run as different host uids (each sandbox's own uid slot).
Inside, capabilities are empty, no_new_privs and the seccomp filter are on,
the template's processes and fds are out of reach, and `random` differs
between siblings.

Where a debug switch exists, the attack runs twice (see seclib): against a
server of the normal build, where it must fail, and against a server of the
unsafe debug build with the protection off (CODECAGE_DEBUG_DISABLE naming
zygote-uid, zygote-caps, zygote-seccomp or zygote-reseed), where it must
succeed. The namespace checks have no switch (each namespace is one flag of
the one clone that makes the child) and run against the normal build only."""
import concurrent.futures
import json
import os
import subprocess
import sys
import uuid

import pytest

from conftest import BUILD, DEBUG_BUILD, wait_until
from seclib import expect
from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

CONFIG = {"pool_size": 2}


def start(tmp_path, disable=None):
    if disable is None:
        s = Server(tmp_path, extra=CONFIG, build=BUILD)
    else:
        s = Server(tmp_path, extra=CONFIG, build=DEBUG_BUILD,
                   env=dict(os.environ, CODECAGE_DEBUG_DISABLE=disable))
    s.protected = disable is None
    s.disable = disable
    ok = wait_until(lambda: s.ok("GET", "/v1/pool")["zygote"], timeout=60)
    assert ok, f"no zygote: {s.ok('GET', '/v1/pool')}"
    return s


@pytest.fixture
def server(tmp_path):
    s = start(tmp_path)
    yield s
    s.stop()


def paired(switch):
    return pytest.mark.parametrize("disable", [
        pytest.param(None, id="protected"),
        pytest.param(switch, id=f"without-{switch}"),
    ])


@pytest.fixture
def target(tmp_path, disable):
    s = start(tmp_path, disable)
    yield s
    s.stop()


def pooled(server, code, timeout_s=30):
    r = server.request("POST", "/v1/python", {"code": code, "timeout_s": timeout_s}, timeout=120)
    assert r.status == 200, r.body
    res = r.json
    assert res["pooled"] is True, res
    return res


def probe(server, code):
    """A pooled run whose last line of stdout is JSON: that value."""
    res = pooled(server, code)
    assert res["status"] == "ok", res
    return json.loads(res["stdout"].splitlines()[-1])


NAME_SELF = """
import ctypes
ctypes.CDLL(None).prctl(15, ctypes.c_char_p({token!r}.encode()), 0, 0, 0)  # PR_SET_NAME
"""

FIRST = NAME_SELF + """
import ctypes, os, socket, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
for d in ("/tmp", "/workspace", "/dev/shm"):
    open(d + "/secret-{token}", "w").write("secret")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0zygote-{token}")
s.listen(1)
assert libc.shmget({key}, 4096, 0o1666) >= 0
assert libc.msgget({key}, 0o1666) >= 0
child = subprocess.Popen(["/bin/sleep", "{token_num}"])
# Alive while the second run looks (it waits for a file only the second
# run could make, were the two sandboxes one).
deadline = time.monotonic() + 6
while not os.path.exists("/workspace/second-{token}") and time.monotonic() < deadline:
    time.sleep(0.05)
child.kill()
print("first done")
"""

SECOND = NAME_SELF + """
import ctypes, json, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
found = []
open("/workspace/second-{other}", "w").close()
for d in ("/tmp", "/workspace", "/dev/shm"):
    if os.path.exists(d + "/secret-{other}"):
        found.append("file " + d)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\\0zygote-{other}")
    found.append("abstract socket")
except OSError:
    pass
if libc.shmget({key}, 0, 0) >= 0:
    found.append("sysv shm")
if libc.msgget({key}, 0) >= 0:
    found.append("sysv msg")
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read()
            comm = open("/proc/%s/comm" % pid).read()
        except OSError:
            continue
        if b"{token_num}" in cmd or "{other}" in comm:
            found.append("process " + pid)
time.sleep(1.5)  # the host reads both drivers' uids meanwhile
print(json.dumps(found))
"""


def driver_uid(token):
    """The host uid of the process named token (PR_SET_NAME), from the host."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open(f"/proc/{pid}/comm").read().strip() != token:
                continue
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("Uid:"):
                    return int(line.split()[1])
        except OSError:
            continue
    return None


def two_siblings(server):
    """(what the second run found of the first, the two drivers' host uids)."""
    a, b = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    key = int(uuid.uuid4().hex[:7], 16)
    num = str(900000 + key % 99999)
    first_code = FIRST.format(token=a, key=key, token_num=num)
    second_code = SECOND.format(token=b, other=a, key=key, token_num=num)
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        first = ex.submit(pooled, server, first_code)
        assert wait_until(lambda: driver_uid(a) is not None, timeout=30), "first run not seen"
        second = ex.submit(pooled, server, second_code)
        assert wait_until(lambda: driver_uid(b) is not None, timeout=30), "second run not seen"
        uids = (driver_uid(a), driver_uid(b))
        res = second.result()
        first_res = first.result()
    assert res["status"] == "ok", res
    assert first_res["status"] == "ok", first_res
    return json.loads(res["stdout"].splitlines()[-1]), uids


def test_siblings_see_nothing_of_each_other(server):
    found, uids = two_siblings(server)
    assert found == [], found


@paired("zygote-uid")
def test_siblings_run_as_different_host_uids(target):
    _, (first, second) = two_siblings(target)
    assert first is not None and second is not None
    assert first >= 0x60000000 and second >= 0x60000000, (first, second)
    expect(target, first == second, f"host uids {first} and {second}")


CAPS = """
import json
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print(json.dumps({k: st[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs",
                                                "Seccomp")}))
"""


@paired("zygote-caps")
def test_forked_sandboxes_hold_no_capabilities(target):
    st = probe(target, CAPS)
    held = any(int(st[k], 16) for k in ("CapEff", "CapPrm", "CapBnd"))
    expect(target, held, st)
    assert st["NoNewPrivs"] == "1", st


BLOCKED = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)  # CLONE_NEWUSER, a syscall the filter refuses
print(json.dumps({"unshare": r, "errno": ctypes.get_errno(),
                  "seccomp": open("/proc/self/status").read().split("Seccomp:")[1].split()[0]}))
"""


@paired("zygote-seccomp,zygote-limits")
def test_forked_sandboxes_are_filtered(target):
    """Two layers stop a nested user namespace: the filter and the child's
    user namespace limits (max_user_namespaces 0); both off, it works."""
    got = probe(target, BLOCKED)
    expect(target, got["unshare"] == 0, got)
    if target.protected:
        assert got["seccomp"] == "2", got


TEMPLATE = """
import json, os
seen = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
fds = sorted(os.listdir("/proc/self/fd"))
try:
    init_fds = os.listdir("/proc/1/fd")
except OSError as e:
    init_fds = e.errno
try:
    open("/proc/1/mem", "rb").read(1)
    mem = "read"
except OSError as e:
    mem = e.errno
# A writable shared mapping inherited from the template would be memory
# the template and every sibling share.
shared = [l for l in open("/proc/self/maps") if "w" in l.split()[1] and l.split()[1][3] == "s"]
print(json.dumps({"pids": seen, "fds": fds, "init_fds": init_fds, "mem": mem,
                  "ppid": os.getppid(), "shared": shared}))
"""


def test_the_template_is_out_of_reach(server):
    # The child's own pid namespace shows its init (1) and driver (2) only:
    # no pid of the template exists there to signal, trace or read. Its init
    # is not dumpable, so its fds and memory stay closed; the driver has
    # only stdin/stdout/stderr, its channel and the fd listing itself, and no
    # memory it shares writably with anything.
    got = probe(server, TEMPLATE)
    assert got["pids"] == [1, 2], got
    assert got["ppid"] == 1, got
    assert got["fds"] == ["0", "1", "2", "3", "4"], got
    assert got["init_fds"] == 13 and got["mem"] == 13, got  # EACCES
    assert got["shared"] == [], got


RANDOM = """
import json, random, tempfile
print(json.dumps({"random": random.random(), "tmp": next(tempfile._get_candidate_names())}))
"""


@paired("zygote-reseed")
def test_siblings_do_not_share_random_state(target):
    a, b = probe(target, RANDOM), probe(target, RANDOM)
    expect(target, a["random"] == b["random"], (a, b))
    assert a["tmp"] != b["tmp"], (a, b)


NAMESPACES = """
import json, os, time
time.sleep(1)  # both sandboxes live at once: no namespace id can be reused
print(json.dumps({n: os.readlink("/proc/self/ns/" + n)
                  for n in ("user", "pid", "mnt", "net", "ipc", "uts", "cgroup")}))
"""


def test_each_sandbox_has_namespaces_of_its_own(server):
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        a, b = ex.map(lambda _: probe(server, NAMESPACES), range(2))
    for ns in a:
        assert a[ns] != b[ns], (ns, a, b)
    # None is the server's either.
    for ns, link in a.items():
        assert link != os.readlink(f"/proc/self/ns/{ns}"), ns


REFUSED_REQUESTS = r"""
import ctypes, os, socket, struct, sys

lib = ctypes.CDLL(sys.argv[1])
lib.cz_serve.restype = ctypes.c_long
lib.cz_serve.argtypes = [ctypes.c_void_p, ctypes.c_int]
MAGIC = 0x32707A63  # zygote_proto.h's "czp2"


def request(magic=MAGIC, workspace=0, size=None):
    # struct zygote_spawn_request: six u32, the u64 rlimit_as, 8 rlimits of
    # 24 bytes, scratch_opts[128], workdir[4096].
    raw = struct.pack("<6IQ", magic, 70000, 70000, 0, workspace, 0, 0).ljust(4448, b"\0")
    return raw if size is None else raw[:size]


ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
r, w = os.pipe()
messages = [(request(), 11),               # 8 expected: more than a request has
            (request(), 16),               # more than the template takes in
            (request(workspace=1), 10),    # 9 expected
            (request(magic=1), 8),
            (request(size=4000), 8),
            (request(workspace=2), 9)]
for msg, n in messages:
    fds = [os.dup(w) for _ in range(n)]
    ours.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("%di" % n, *fds))])
    for fd in fds:
        os.close(fd)
os.close(w)
ours.close()
template = ctypes.create_string_buffer(256)  # never read for a refused request
print(lib.cz_serve(template, theirs.fileno()))
os.set_blocking(r, False)
try:
    print(len(os.read(r, 1)))  # 0: no write end of the pipe is open anywhere
except BlockingIOError:
    print("held")
"""


def test_the_template_keeps_no_fd_of_a_request_it_refuses():
    # The template reads the server's spawn requests (runtime/zygote_child.c's
    # cz_serve()). Every fd a refused request carried (too many for it, a bad
    # magic, size or workspace flag) must be closed, or each would stay open
    # in the template and in every sandbox forked after it. Here the template
    # loop runs in a plain process over a socket whose other end sent only
    # refused requests, each carrying copies of a pipe's write end: once the
    # loop saw the socket close, the pipe must read as ended.
    lib = os.path.join(BUILD, "codecage-zygote-child.so")
    out = subprocess.run([sys.executable, "-I", "-c", REFUSED_REQUESTS, lib],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0"], out.stdout
