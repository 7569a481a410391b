"""codecage's zygote: a Python interpreter with the session driver loaded,
which forks fresh sandboxes for the warm pool (docs/ARCHITECTURE.md,
docs/SECURITY.md).

The server starts it as `python3 -I -c <this text> <driver source>` in a
template sandbox: a sandbox like any other, except that its user namespace
maps the range of per-sandbox host uids and that it keeps its capabilities
there (no seccomp yet) so it can make namespaces and write id maps. It never
runs code it was sent: it reads requests from fd 3 (SOCK_SEQPACKET, one
message each) and answers nothing but "ready" or "error".

  hello (JSON, once)  uid, gid, the /proc masks, the seccomp program (hex)
  spawn (JSON + fds)  host_uid, host_gid and the sandbox's own: workdir,
                      scratch tmpfs options, rlimits; fds stdout, stderr,
                      channel, sync, ctl, status, the codecage-init image,
                      the environment (a sealed memfd only the child
                      reads), and the workspace (a detached mount) when it
                      has one

Each spawn is one clone(2) straight into fresh user, mount, ipc, uts and
pid namespaces: the child (B) is pid 1 of its pid namespace and waits
until the template wrote its id maps (its sandbox user to the host uid the
server chose). Before anything else, B tells the server it is ready to be
put in its cgroup (the server reads B's pid from the message's
credentials); once it is, everything B writes or makes is charged to the
sandbox. B closes every fd of the template and takes its ids. B makes its own network namespace (unshare(2), in parallel
with other spawns, rather than inside the template's clone, where the
kernel's network setup held up every spawn queued behind it), builds its
mounts over the template's (a fresh /proc with the masks, devpts, one
scratch tmpfs behind /tmp and /dev/shm, and /workspace: the sandbox's own
workspace or the scratch), names the host, brings up loopback, unshares the
cgroup namespace, applies setsid and the rlimits, drops every capability,
sets no_new_privs, installs the seccomp filter and tells the server it is
done (the server checks that message's credentials: B's pid, with the ids
it chose). B forks C, the session driver (with the sandbox's environment), and
execs codecage-init from the image the server sent: pid 1 of every
long-lived sandbox, which serves the server's execs, reaps, and reports C
as the exec it was made with. Nothing of the template reaches C: its fds are closed,
its memory is a private copy (with `random` reseeded), and neither can see
the other's processes.
"""

import fcntl
import gc
import json
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import types

CTL_FD = 3
CHILD_FDS = ("stdout", "stderr", "channel", "sync", "ctl", "status", "init", "env")
# Where a child keeps them, in this order from fd 1; then the pipe of its id
# maps and the workspace's detached mount, if it has one.
(FD_OUT, FD_ERR, FD_CHAN, FD_SYNC, FD_CTL, FD_STATUS, FD_INIT, FD_ENV, FD_MAPPED,
 FD_WORKSPACE) = range(1, 11)
# codecage-init's fds (src/core/box_proto.h): BOX_CTL_FD, BOX_ADOPTED_STATUS_FD.
INIT_CTL_FD, INIT_STATUS_FD = 3, 4
SPAWN_MAX = 1 << 16  # a spawn request
ENV_MAX = 1 << 20  # the sandbox's environment (the server's bound is lower)

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
SYS_MOVE_MOUNT = 429  # the same number on every architecture
MOVE_MOUNT_F_EMPTY_PATH, AT_FDCWD = 0x4, -100
PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
# NOROOT, NO_SETUID_FIXUP and KEEP_CAPS off, each locked (as caps.c).
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20
CAP_VERSION_3 = 0x20080522
SYS_CLOSE_RANGE = 436  # the same number on every architecture
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
SYS_CLONE3 = 435  # the same number on every architecture
CLONE_NS_FLAGS = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID

try:  # what a zygote needs of this Python; main() says what is missing
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    libc.syscall.restype = ctypes.c_long
    # clone3 through a function that keeps the GIL: the child goes on running
    # this interpreter, as after os.fork() (there is no other thread).
    pylibc = ctypes.PyDLL(None, use_errno=True)
    pylibc.syscall.restype = ctypes.c_long

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                    ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    NATIVE_ERROR = None
except Exception as e:
    NATIVE_ERROR = "%s: %s" % (type(e).__name__, e)


class Failed(Exception):
    pass


def check(r, step):
    if r < 0:
        e = ctypes.get_errno()
        raise Failed("%s: %s" % (step, os.strerror(e)))


def mount(src, dst, fstype, flags, data, step):
    enc = lambda s: s.encode() if s is not None else None
    check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), step)


# ---- the template ----


class Template:
    def __init__(self, ctl, hello):
        self.ctl = ctl
        self.uid, self.gid = int(hello["uid"]), int(hello["gid"])
        self.masked = [str(p) for p in hello["proc_masked"]]
        self.proc_ro = [str(p) for p in hello["proc_readonly"]]
        self.proc_hidden = [str(p) for p in hello["proc_hidden"]]
        # Protections switched off by the server (its unsafe debug build only).
        self.disable = str(hello.get("disable", ""))
        self.random_state = random.getstate()
        # The two stacked programs of every sandbox, in install order: the
        # syscall allow list, then the argument checks.
        self.filters, self.progs = [], []
        for text in hello["seccomp"]:
            raw = bytes.fromhex(text)
            n = len(raw) // 8
            filters = (SockFilter * n).from_buffer_copy(raw[: n * 8])
            self.filters.append(filters)
            self.progs.append(SockFprog(n, filters))

    def serve(self, driver):
        # A sandbox's end wakes us to reap its pid 1 (no zombie waits for
        # the next spawn).
        wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        while True:
            ready = select.select([self.ctl, wake_r], [], [])[0]
            if wake_r in ready:
                # Only then: each wait scans every child we have.
                drain(wake_r)
                self.reap()
            if self.ctl not in ready:
                continue
            msg, anc, flags, _ = self.ctl.recvmsg(SPAWN_MAX, socket.CMSG_SPACE(4 * 10))
            if not msg:
                return
            fds = []
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += list(struct.unpack("%di" % (len(data) // 4), data[: len(data) // 4 * 4]))
            try:
                req = json.loads(msg)
                sandbox = Sandbox(req)
                want = len(CHILD_FDS) + (1 if sandbox.workspace else 0)
                if (req.get("op") == "spawn" and len(fds) == want
                        and not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)):
                    ids = (0, 0) if req.get("shared") else (int(req["host_uid"]), int(req["host_gid"]))
                    self.spawn(ids[0], ids[1], fds, sandbox, driver)
            except (ValueError, KeyError, TypeError):
                pass  # a request we cannot read: the server times out waiting for it
            finally:
                for fd in fds:
                    os.close(fd)

    def spawn(self, host_uid, host_gid, fds, sandbox, driver):
        """One clone straight into the new namespaces: the child is pid 1 of
        its pid namespace and waits until we wrote its id maps."""
        mapped_r, mapped_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        args = (ctypes.c_uint64 * 11)(CLONE_NS_FLAGS, 0, 0, 0, signal.SIGCHLD)
        pid = pylibc.syscall(SYS_CLONE3, args, ctypes.sizeof(args))
        if pid == 0:
            self.ctl.detach()  # the object must never close what becomes fd 3
            child_b(self, sandbox, fds[: len(CHILD_FDS)] + [mapped_r] + fds[len(CHILD_FDS):], driver)
        os.close(mapped_r)
        try:
            if pid < 0:
                return  # the server times out waiting for the child
            self.write_maps(pid, host_uid, host_gid)
            os.write(mapped_w, b"m")
        except OSError:
            pass  # the child exits without its maps; the server sees it go
        finally:
            os.close(mapped_w)

    @staticmethod
    def reap():
        """Our children are pid 1 of the sandboxes we made: reap those
        that ended (one call per ended sandbox, however many live)."""
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    return
            except ChildProcessError:
                return

    def write_maps(self, pid, host_uid, host_gid):
        # Our user namespace maps the host's uid slots to themselves, so
        # host ids are ours to hand out (0 is our own); setgroups is denied
        # for good.
        for name, text in (("uid_map", "%d %d 1\n" % (self.uid, host_uid)),
                           ("setgroups", "deny"),
                           ("gid_map", "%d %d 1\n" % (self.gid, host_gid))):
            fd = os.open("/proc/%d/%s" % (pid, name), os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)


def drain(fd):
    try:
        while os.read(fd, 256):
            pass
    except BlockingIOError:
        pass


# ---- a new sandbox ----


class Sandbox:
    """What one spawn request says of its sandbox (the server's plan)."""

    def __init__(self, req):
        self.workdir = str(req["workdir"])
        self.scratch = str(req["scratch_opts"])
        self.rlimits = [tuple(int(v) for v in r) for r in req["rlimits"]]
        self.rlimit_as = int(req.get("rlimit_as", 0))
        self.workspace = bool(req.get("workspace", False))


def report(step):
    try:
        os.write(FD_SYNC, b"e" + step.encode()[:200])
    except OSError:
        pass
    os._exit(125)


def place_fds(fds):
    """fds (stdout, stderr, channel, sync, ctl, status, init, mapped and
    the workspace if any) become 1..9, stdin /dev/null; every other fd of
    the template closes."""
    null = os.open("/dev/null", os.O_RDONLY)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds + [null]]
    for i, fd in enumerate(high[:-1]):
        os.dup2(fd, i + 1)
    os.dup2(high[-1], 0)
    check(libc.syscall(SYS_CLOSE_RANGE, len(fds) + 1, 0xFFFFFFFF, 0), "close inherited fds")


def build_proc(t):
    """Our own /proc, masked; returns the user namespace limit files, opened
    in it before /proc/sys is read-only."""
    mount("proc", "/proc", "proc", PROC_FLAGS, None, "mount /proc")
    limits = open_userns_limits(t)
    for name in t.masked:
        p = "/proc/" + name
        if os.path.lexists(p):
            mount("/dev/null", p, None, MS_BIND, None, "mask /proc entries")
    for name in t.proc_ro:
        p = "/proc/" + name
        if os.path.isdir(p):
            mount(p, p, None, MS_BIND | MS_REC, None, "mask /proc entries")
            mount(None, p, None, MS_BIND | MS_REMOUNT | MS_RDONLY | PROC_FLAGS, None,
                  "mask /proc entries")
    # One empty read-only tmpfs for them all, as rootfs.c does: each
    # superblock costs every memory cgroup of the machine a slot.
    first = None
    for name in t.proc_hidden:
        p = "/proc/" + name
        if not os.path.isdir(p):
            continue
        if first is None:
            mount("tmpfs", p, "tmpfs", MS_RDONLY | PROC_FLAGS, "size=0,mode=0555",
                  "mask /proc entries")
            first = p
        else:
            mount(first, p, None, MS_BIND, None, "mask /proc entries")
    return limits


def build_scratch(s):
    """One tmpfs behind /tmp, /dev/shm and (without a workspace of its
    own) /workspace, over the template's."""
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, s.scratch, "mount scratch tmpfs")
    dirs = (("tmp", 0o1777), ("shm", 0o1777)) + (() if s.workspace else (("workspace", 0o755),))
    for name, mode in dirs:
        os.mkdir("/tmp/" + name, mode)
        os.chmod("/tmp/" + name, mode)
    mount("/tmp/shm", "/dev/shm", None, MS_BIND, None, "bind /tmp, /dev/shm, /workspace")
    if s.workspace:
        # The server's detached mount of this sandbox's own workspace
        # (idmapped to its uid slot), moved over the template's.
        check(libc.syscall(SYS_MOVE_MOUNT, FD_WORKSPACE, b"", AT_FDCWD, b"/workspace",
                           MOVE_MOUNT_F_EMPTY_PATH), "mount the workspace")
        os.close(FD_WORKSPACE)
    else:
        os.mkdir("/tmp/workspace/output", 0o755)
        mount("/tmp/workspace", "/workspace", None, MS_BIND, None,
              "bind /tmp, /dev/shm, /workspace")
    mount("/tmp/tmp", "/tmp", None, MS_BIND, None, "bind /tmp, /dev/shm, /workspace")


def loopback_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    finally:
        s.close()


def wait_for_cgroup(sync):
    """The server reads our pid from this message's credentials, puts us in
    our cgroup, then answers; it waits for "r" (or a failed step) after, and
    checks that the "r" comes from us with the ids it chose."""
    os.write(sync, b"p")
    if os.read(sync, 1) != b"c":
        os._exit(125)  # the server is gone or gave up on us


def drop_privileges(t):
    if "zygote-caps" not in t.disable:
        check(libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "drop capabilities")
        for cap in range(64):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
                break  # past the kernel's last capability
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        hdr = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()
        check(libc.capset(hdr, data), "drop capabilities")
    check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "set non-dumpable")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if "zygote-seccomp" not in t.disable:
        for prog in t.progs:
            check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0),
                  "install seccomp filter")


def child_b(t, s, fds, driver):
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Into our own cgroup before anything else: the pages of this
        # interpreter we write from here on, and all we make (namespaces,
        # mounts), are charged to this sandbox, not to the template.
        wait_for_cgroup(fds[CHILD_FDS.index("sync")])
        place_fds(fds)
    except BaseException:
        os._exit(125)
    try:
        if os.read(FD_MAPPED, 1) != b"m":
            os._exit(125)  # the template could not write our maps
        os.close(FD_MAPPED)
        os.setresgid(t.gid, t.gid, t.gid)
        os.setresuid(t.uid, t.uid, t.uid)
        sandbox_init(t, s, driver)
    except Failed as e:
        report(str(e))
    except BaseException as e:
        report("zygote: %s" % e)
    os._exit(125)


# Limits of the child's user namespace, as codecage's own launch sets them
# (src/core/sandbox.c): opened through our own fresh /proc (a sysctl file
# belongs to the user namespace that looks it up; in the template's /proc,
# which every child shares, each lookup walks a dentry per sandbox ever
# made), written once our own namespaces exist.
USERNS_LIMITS = (("max_inotify_instances", b"64"), ("max_inotify_watches", b"16384"),
                 ("max_user_namespaces", b"0"))


def open_userns_limits(t):
    fds = []
    if "zygote-limits" in t.disable:
        return fds
    for name, value in USERNS_LIMITS:
        try:
            fds.append((os.open("/proc/sys/user/" + name, os.O_WRONLY | os.O_CLOEXEC), value))
        except FileNotFoundError:
            pass  # a kernel without it
    return fds


def write_userns_limits(fds):
    for fd, value in fds:
        os.write(fd, value)
        os.close(fd)


def sandbox_init(t, s, driver):
    # Before any other step of the sandbox's: until here B shares the
    # template's network namespace (itself a sandbox's: loopback only), and
    # nothing so far used it.
    check(libc.unshare(CLONE_NEWNET), "unshare network namespace")
    mount(None, "/", None, MS_REC | MS_PRIVATE, None, "private propagation")
    limits = build_proc(t)
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=0620", "mount /dev/pts")
    build_scratch(s)
    check(libc.sethostname(b"codecage", 8), "sethostname")
    loopback_up()
    check(libc.unshare(CLONE_NEWCGROUP), "unshare cgroup namespace")
    write_userns_limits(limits)
    os.setsid()
    for res, soft, hard in s.rlimits:
        resource.setrlimit(res, (soft, hard))
    # B keeps a Python copy of the template until it execs init: nobody may
    # read it.
    drop_privileges(t)
    os.write(FD_SYNC, b"r")  # every step done: the server counts the launch as made
    os.close(FD_SYNC)
    pid = os.fork()
    if pid == 0:
        for fd in (FD_CTL, FD_STATUS, FD_INIT):
            os.close(fd)
        run_driver(t, s, driver)
    exec_init(pid)


def exec_init(driver_pid):
    """B becomes codecage-init, which holds nothing of the template: the
    driver's pipes closed, the control socket as its fd 3, the driver's
    status pipe as fd 4; its image (a sealed memfd) is closed by the exec."""
    try:
        for fd in (FD_OUT, FD_ERR):
            os.dup2(0, fd)
        os.dup2(FD_CTL, INIT_CTL_FD)
        os.dup2(FD_STATUS, INIT_STATUS_FD)
        image = INIT_STATUS_FD + 1
        os.dup2(FD_INIT, image, inheritable=False)
        check(libc.syscall(SYS_CLOSE_RANGE, image + 1, 0xFFFFFFFF, 0), "close inherited fds")
        os.execve(image, ["codecage-init", str(driver_pid)], {})
    except BaseException:
        pass
    os._exit(125)  # the driver ends with us: the server sees its session go


def run_driver(t, s, driver):
    try:
        os.setsid()
        # The driver's /proc/self is its own to read, as after an exec.
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        if s.rlimit_as:
            resource.setrlimit(resource.RLIMIT_AS, (s.rlimit_as, s.rlimit_as))
        os.chdir(s.workdir)
        # The sandbox's environment, not the template's.
        os.environ.clear()
        os.environ.update(read_env())
        if "zygote-reseed" in t.disable:
            random.setstate(t.random_state)  # as a fork that reseeds nothing leaves it
        else:
            reseed()
    except BaseException:
        os._exit(125)
    try:
        driver.main()
    finally:
        os._exit(0)


def read_env():
    """The sandbox's environment ("K=V" strings, NUL-separated) from the
    sealed memfd the server wrote: the template only passed its fd on and
    never read it, so no sandbox's variables or secrets are in the memory
    every later child starts as a copy of."""
    size = min(os.fstat(FD_ENV).st_size, ENV_MAX)
    raw, off = bytearray(), 0
    while off < size:
        chunk = os.pread(FD_ENV, size - off, off)
        if not chunk:
            break
        raw += chunk
        off += len(chunk)
    os.close(FD_ENV)
    return (e.split("=", 1) for e in raw.decode(errors="surrogateescape").split("\0") if "=" in e)


def reseed():
    """What a fork would otherwise share with every sibling."""
    random.seed()  # from os.urandom
    tf = sys.modules.get("tempfile")
    if tf is not None:
        tf._name_sequence = None
    uu = sys.modules.get("uuid")
    if uu is not None:
        uu._last_timestamp = None


def warm_up(driver):
    """What a first run pays once (compiling a cell, describing its
    value), paid here for every child: a cell of ours, never one sent."""
    body, last = driver.compile_cell("_ = None\n_", "<zygote>")
    driver.describe(driver.execute(body, last, {}), 64)


def main():
    ctl = socket.socket(fileno=os.dup(CTL_FD))
    os.close(CTL_FD)
    try:
        if NATIVE_ERROR:
            raise RuntimeError(NATIVE_ERROR)
        hello = json.loads(ctl.recv(1 << 20))
        if "zygote-python" in str(hello.get("disable", "")):  # tests of the fallback
            raise RuntimeError("this Python cannot host a zygote (switched off)")
        driver = types.ModuleType("codecage_session")
        exec(compile(sys.argv[1], "<codecage_session>", "exec"), driver.__dict__)
        sys.modules["codecage_session"] = driver
        t = Template(ctl, hello)
        warm_up(driver)
    except BaseException as e:
        ctl.send(json.dumps({"op": "error", "message": "%s: %s" % (type(e).__name__, e)}).encode())
        return
    # Everything loaded so far stays put: the collector of a child never
    # writes to these objects' pages, which stay shared with the template.
    gc.collect()
    getattr(gc, "freeze", lambda: None)()
    # Nobody reads our own stdout and stderr: nothing may block on them.
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    ctl.send(b'{"op":"ready"}')
    t.serve(driver)


if __name__ == "__main__":
    main()
