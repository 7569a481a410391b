"""Attacks on named sandboxes forked from their image's zygote
(src/services/zygotes.c, src/core/zygote.c, runtime/python/codecage_zygote.py):
every sandbox made by `POST /v1/sandboxes` is a fork of one template per
image, so whatever one sandbox was given must never reach the next one, and
each must be as contained as a sandbox started on its own.

Each test first checks, by the `forks` count of `GET /v1/pool`'s
`sandbox_zygotes`, that the sandboxes it attacks were forked (a server
that quietly started them the old way would test nothing new here).

- The environment and secrets of sandbox A reach neither sandbox B's
  session (its os.environ, /proc/self/environ, nor anywhere in its memory,
  read through /proc/self/mem) nor B's execs; A itself sees them, and the
  same memory scan finds them in A, so the scan can see what it looks for.
  The template itself must keep nothing of A (read from the host): it
  does today (an expected failure, strict, until it no longer parses the
  environment it hands each child).
- Workspaces: A's files are in A's /workspace and files API, not B's.
- Each sandbox has a host uid slot of its own (paired with the unsafe
  build's `zygote-uid`), its own user and pid namespaces, and a pid 1
  (codecage-init) whose memory and environment neither its session nor its
  execs can read.
- Execs hold no capabilities (paired with `zygote-caps`), run under the
  seccomp filter (paired with `zygote-seccomp`) with no_new_privs, and see
  only their own sandbox's processes.

Where a debug switch exists the attack runs twice (see seclib): against the
normal build, where it must fail, and against the unsafe debug build with
the protection off, where it must succeed. The others run against the
normal build only and say why."""
import hashlib
import os
import uuid

import pytest

from conftest import BUILD, DEBUG_BUILD
from seclib import expect
from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

IMAGE = "host"  # the image a spec without one gets


def start(tmp_path, disable=None, extra=None):
    if disable is None:
        s = Server(tmp_path, extra=extra, build=BUILD)
    else:
        s = Server(tmp_path, extra=extra, build=DEBUG_BUILD,
                   env=dict(os.environ, CODECAGE_DEBUG_DISABLE=disable))
    s.protected = disable is None
    s.disable = disable
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


def forks(server):
    """How many named sandboxes the image's template has forked."""
    for z in server.ok("GET", "/v1/pool")["sandbox_zygotes"]:
        if z["image"] == IMAGE:
            return z["forks"]
    return 0


def create_forked(server, name, **spec):
    """Creates a named sandbox and checks that the template forked it."""
    before = forks(server)
    server.ok("POST", "/v1/sandboxes", {"name": name, **spec})
    after = forks(server)
    assert after == before + 1, (f"{name} was not forked from the template: "
                                 f"{server.ok('GET', '/v1/pool')['sandbox_zygotes']}")
    return name


def python(server, name, code):
    """Runs code in the sandbox's session; the value of its last expression."""
    r = server.ok("POST", f"/v1/sandboxes/{name}/python", {"code": code})
    assert r["status"] == "ok", r
    return r["return_value"]


def sh(server, name, script):
    r = server.ok("POST", f"/v1/sandboxes/{name}/exec", {"script": script})
    assert r["status"] == "ok", r
    return r


# ---- 1. environment and secrets ----

# Looks for values in the session's own memory: every readable mapping of
# /proc/self/maps, read through /proc/self/mem (the driver is dumpable: its
# /proc/self is its own), a mapping the kernel will not read skipped. The
# code names each value (32 bytes) by its first 16 bytes and its SHA-256,
# never by the value itself, so a hit is a copy of the value that was in
# this process already.
SCAN = r"""
import hashlib, os
def scan(prefix, digest):
    hits = bytes_read = 0
    fd = os.open("/proc/self/mem", os.O_RDONLY)
    try:
        for line in open("/proc/self/maps").read().splitlines():
            fields = line.split()
            if fields[1][0] != "r":
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            pos = lo
            while pos < hi:
                n = min(1 << 20, hi - pos)
                try:  # 31 bytes more: a value across two reads is seen whole
                    data = os.pread(fd, min(n + 31, hi - pos), pos)
                except OSError:
                    break
                bytes_read += len(data)
                i = data.find(prefix)
                while i >= 0:
                    hits += hashlib.sha256(data[i:i + 32]).hexdigest() == digest
                    i = data.find(prefix, i + 1)
                pos += n
    finally:
        os.close(fd)
    return hits, bytes_read
"""


def probes(*values):
    """What SCAN looks for: (first half, SHA-256) of each 32-byte value."""
    assert all(len(v) == 32 for v in values), values
    return [(v[:16].encode().hex(), hashlib.sha256(v.encode()).hexdigest()) for v in values]


def memory_hits(server, name, values):
    """How often each value is in the session's memory."""
    code = SCAN + f"""
found = [scan(bytes.fromhex(p), d) for p, d in {probes(*values)!r}]
assert all(n > (1 << 20) for _, n in found), found  # the scan read the process
[h for h, _ in found]
"""
    return python(server, name, code)


# The session's variables and the environ of its process image, as
# name -> SHA-256 of the value (a value returned as it is would be redacted
# whole if it held a secret).
SESSION_ENV = """
import hashlib, os
def digests(entries):
    pairs = (e.split("=", 1) for e in entries if "=" in e)
    return {k: hashlib.sha256(v.encode()).hexdigest() for k, v in pairs}
raw = open("/proc/self/environ", "rb").read().decode("latin-1")
{"environ": digests(k + "=" + v for k, v in os.environ.items()),
 "proc": digests(raw.split("\\0"))}
"""


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def secret_server(tmp_path):
    """A server with one config secret, SECRET_A."""
    value = uuid.uuid4().hex
    s = start(tmp_path, extra={"secrets": {"SECRET_A": {"value": value}}})
    s.secret = value
    yield s
    s.stop()


def test_env_and_secrets_of_one_sandbox_never_reach_another(secret_server):
    # No debug switch: what keeps A's values out of B is that the template
    # is launched from the image's default policy (never a request's) and
    # that each child gets its own environment. Removing that (a template
    # made from the first sandbox's spec) makes this test fail.
    server = secret_server
    token = uuid.uuid4().hex
    values = (token, server.secret)
    a = create_forked(server, "a" + uuid.uuid4().hex[:8],
                      env={"TOKEN_A": token}, secrets=["SECRET_A"])
    b = create_forked(server, "b" + uuid.uuid4().hex[:8])

    # A has its own values, in os.environ and in its memory: the scan below
    # can find them where they are.
    assert python(server, a, f"import os\nos.environ.get('TOKEN_A') == {token!r}") is True
    assert python(server, a,
                  f"import os\nos.environ.get('SECRET_A') == {server.secret!r}") is True
    assert all(memory_hits(server, a, values)), "the scan does not find A's own values"

    # B: not in its environment, not in the environ of its process image,
    # nowhere in its memory.
    # (B is never sent the values: they would be in its memory then.)
    env = python(server, b, SESSION_ENV)
    assert "PATH" in env["environ"] and "PATH" in env["proc"], env
    for where in ("environ", "proc"):
        assert not {"TOKEN_A", "SECRET_A"} & set(env[where]), env
        assert not {sha256(v) for v in values} & set(env[where].values()), env
    assert not any(memory_hits(server, b, values)), "A's values are in B's memory"

    # Nor in an exec of B: its environment, and the environ of every
    # process it can see (the session driver among them).
    out = sh(server, b, "env; cat /proc/self/environ; echo; "
                        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")["stdout"]
    assert "PATH=" in out, out
    for needle in ("TOKEN_A", "SECRET_A", "REDACTED", *values):
        assert needle not in out, (needle, out)


def host_children(pid):
    """(pid, name) of the host processes whose parent is pid."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":\t", 1) for line in f if ":\t" in line)
        except OSError:  # gone meanwhile
            continue
        if fields.get("PPid", "").strip() == str(pid):
            found.append((int(entry), fields.get("Name", "").strip()))
    return found


def zygotes_of(server_pid):
    """Host pids of the server's zygote interpreters: each the one exec of
    a template sandbox (a codecage-init child of the server)."""
    found = []
    for init, name in host_children(server_pid):
        for pid, _ in host_children(init) if name == "codecage-init" else ():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"codecage's zygote" in f.read():
                        found.append(pid)
            except OSError:
                continue
    return found


def copies_in(pid, values):
    """How often each value is in the memory of host process pid (read as root)."""
    counts = [0] * len(values)
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps.read().splitlines():
            fields = line.split()
            if fields[1][0] != "r":
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except OSError:
                continue
            for i, v in enumerate(values):
                counts[i] += data.count(v.encode())
    return counts


def test_the_template_keeps_nothing_of_a_sandbox_it_forked(tmp_path):
    # Every sandbox forked after A starts as a copy of the template's
    # memory: A's values must not be in it. Read from the host (as root),
    # right after A's fork, before anything else could overwrite them: the
    # scan inside B above only finds what B's own allocations have not
    # overwritten by the time its code runs.
    secret, token = uuid.uuid4().hex, uuid.uuid4().hex
    long_value = "".join(uuid.uuid4().hex for _ in range(64))  # 2 KiB, as a key file is
    values = (token, secret, long_value)
    # No pool: its template would be a zygote too.
    server = start(tmp_path, extra={"pool_size": 0,
                                    "secrets": {"SECRET_A": {"value": secret}}})
    try:
        create_forked(server, "a" + uuid.uuid4().hex[:8],
                      env={"TOKEN_A": token, "LONG_A": long_value}, secrets=["SECRET_A"])
        zygotes = zygotes_of(server.proc.pid)
        assert len(zygotes) == 1, zygotes
        (init_a, _), = host_children(zygotes[0])  # A's pid 1, whose child is A's session
        (session_a, _), = host_children(init_a)
        assert all(copies_in(session_a, values)), "the scan does not find A's own values"
        assert copies_in(zygotes[0], values) == [0, 0, 0], "A's values are in the template"
    finally:
        server.stop()


# ---- 2. workspaces ----

# (f_fsid as text: a returned int must fit in 64 bits.)
WORKSPACE = """
import os
{"entries": sorted(os.listdir("/workspace")), "fsid": str(os.statvfs("/workspace").f_fsid),
 "dev": os.stat("/workspace").st_dev}
"""


def test_workspaces_stay_separate(server):
    # No switch: each child's /workspace is the detached mount of its own
    # workspace the server sends with its spawn request; a child given none
    # (or another's) fails this test.
    a = create_forked(server, "a" + uuid.uuid4().hex[:8])
    b = create_forked(server, "b" + uuid.uuid4().hex[:8])
    fa, fb = f"from-a-{uuid.uuid4().hex}.txt", f"from-b-{uuid.uuid4().hex}.txt"
    python(server, a, f"open('/workspace/{fa}', 'w').write('a')")
    sh(server, b, f"echo b > /workspace/{fb}")

    wa, wb = python(server, a, WORKSPACE), python(server, b, WORKSPACE)
    assert fa in wa["entries"] and fb not in wa["entries"], wa
    assert fb in wb["entries"] and fa not in wb["entries"], wb
    assert (wa["fsid"], wa["dev"]) != (wb["fsid"], wb["dev"]), (wa, wb)
    listed = sh(server, b, "ls -a /workspace")["stdout"].split()
    assert fb in listed and fa not in listed, listed

    # The files API reads each sandbox's own workspace: what its session wrote.
    r = server.request("GET", f"/v1/sandboxes/{a}/files/{fa}")
    assert r.status == 200 and r.body == b"a", (r.status, r.body)
    assert server.request("GET", f"/v1/sandboxes/{b}/files/{fa}").status == 404
    r = server.request("GET", f"/v1/sandboxes/{b}/files/{fb}")
    assert r.status == 200 and r.body == b"b\n", (r.status, r.body)
    assert server.request("GET", f"/v1/sandboxes/{a}/files/{fb}").status == 404


# ---- 3. uid slots, namespaces, pid 1 ----

IDS = """
import os
{"uid_map": open("/proc/self/uid_map").read().split(),
 "ns": {n: os.readlink("/proc/self/ns/" + n) for n in ("user", "pid")}}
"""

EXEC_IDS = "cat /proc/self/uid_map; readlink /proc/self/ns/user /proc/self/ns/pid"


def ids(server, name):
    """(session: uid_map fields, namespaces), (exec: the same)."""
    got = python(server, name, IDS)
    out = sh(server, name, EXEC_IDS)["stdout"].split()
    return (got["uid_map"], [got["ns"]["user"], got["ns"]["pid"]]), (out[:3], out[3:])


@paired("zygote-uid")
def test_each_forked_sandbox_has_its_own_host_uid(target):
    a = create_forked(target, "a" + uuid.uuid4().hex[:8])
    b = create_forked(target, "b" + uuid.uuid4().hex[:8])
    (sa, ea), (sb, eb) = ids(target, a), ids(target, b)
    # The sandbox user (1000) maps to one host uid, the same for its session
    # and its execs.
    assert sa[0] == ea[0] and sb[0] == eb[0], (sa, ea, sb, eb)
    assert sa[0][0] == sb[0][0] == "1000" and sa[0][2] == sb[0][2] == "1", (sa, sb)
    expect(target, sa[0][1] == sb[0][1], f"host uids {sa[0][1]} and {sb[0][1]}")


def test_each_forked_sandbox_has_its_own_user_and_pid_namespaces(server):
    # One flag each of the clone that makes the child: no switch.
    a = create_forked(server, "a" + uuid.uuid4().hex[:8])
    b = create_forked(server, "b" + uuid.uuid4().hex[:8])
    (sa, ea), (sb, eb) = ids(server, a), ids(server, b)
    assert sa[1] == ea[1] and sb[1] == eb[1], (sa, ea, sb, eb)  # an exec is in its sandbox's
    assert sa[1][0] != sb[1][0] and sa[1][1] != sb[1][1], (sa, sb)  # both live: ids differ
    for link in sa[1] + sb[1]:  # none is the server's own
        assert link not in (os.readlink("/proc/self/ns/user"), os.readlink("/proc/self/ns/pid"))


PID1 = """
import errno
got = {"comm": open("/proc/1/comm").read().strip()}
for path in ("/proc/1/mem", "/proc/1/environ"):
    try:
        with open(path, "rb") as f:
            f.read(1)
        got[path] = "read"
    except OSError as e:
        got[path] = errno.errorcode[e.errno]
got
"""

EXEC_PID1 = ("cat /proc/1/comm; "
             "for f in mem environ; do head -c1 /proc/1/$f >/dev/null 2>&1 && echo read "
             "|| echo denied; done")


def test_pid_1_is_init_and_out_of_reach(server):
    # Two layers keep init non-dumpable (an unreadable executable, and its
    # own prctl), and its /proc files then belong to a uid the sandbox does
    # not have: no switch. A codecage-init made dumpable fails this test.
    for name in (create_forked(server, "a" + uuid.uuid4().hex[:8]),
                 create_forked(server, "b" + uuid.uuid4().hex[:8])):
        got = python(server, name, PID1)
        assert got == {"comm": "codecage-init", "/proc/1/mem": "EACCES",
                       "/proc/1/environ": "EACCES"}, got
        out = sh(server, name, EXEC_PID1)["stdout"].split()
        assert out == ["codecage-init", "denied", "denied"], out


# ---- 4. execs ----

STATUS = ("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "
          "/proc/self/status")


def exec_status(server):
    name = create_forked(server, "s" + uuid.uuid4().hex[:8])
    out = sh(server, name, STATUS)["stdout"]
    return dict(line.split(":\t") for line in out.splitlines())


@paired("zygote-caps")
def test_execs_hold_no_capabilities(target):
    st = exec_status(target)
    held = any(int(st[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
    expect(target, held, st)
    assert st["NoNewPrivs"] == "1", st  # no switch: a child without it fails


@paired("zygote-seccomp")
def test_execs_are_filtered(target):
    st = exec_status(target)
    expect(target, st["Seccomp"] != "2", st)


NAME_SELF = """
import ctypes
ctypes.CDLL(None).prctl(15, ctypes.c_char_p({token!r}.encode()), 0, 0, 0)  # PR_SET_NAME
open("/proc/self/comm").read().strip()
"""


def test_execs_see_only_their_own_sandbox(server):
    # The child's own pid namespace (a flag of its clone): no switch.
    # A's session names itself, then B's exec lists every process it can
    # see: B's init, B's session, itself; nothing of A or of the template.
    token = "tok" + uuid.uuid4().hex[:12]
    a = create_forked(server, "a" + uuid.uuid4().hex[:8])
    b = create_forked(server, "b" + uuid.uuid4().hex[:8])
    assert python(server, a, NAME_SELF.format(token=token)) == token
    seen_from_a = sh(server, a, "ps -eo comm=")["stdout"].split()
    assert token in seen_from_a, seen_from_a  # ps shows a session's name
    out = sh(server, b, "ps -eo pid=,comm=; echo; for p in /proc/[0-9]*; do echo $p; done")
    listing, procs = out["stdout"].split("\n\n")
    comms = [line.split(None, 1)[1] for line in listing.splitlines()]
    assert token not in out["stdout"], out["stdout"]
    assert sorted(comms) == ["codecage-init", "ps", "python3", "sh"], listing
    # /proc itself: init, the session and the shell (ps has ended).
    pids = sorted(int(p.rsplit("/", 1)[1]) for p in procs.split())
    assert pids[:2] == [1, 2] and len(pids) == 3, procs
