"""codecage's zygote: a Python interpreter with the session driver loaded,
which forks fresh sandboxes for the warm pool (docs/ARCHITECTURE.md,
docs/SECURITY.md).

The server starts it as `python3 -I -c <this text> <driver source>` in a
template sandbox: a sandbox like any other, except that its user namespace
maps the range of per-sandbox host uids and that it keeps its capabilities
there (no seccomp yet) so it can make namespaces and write id maps. It never
runs code it was sent: it reads messages from fd 3 (SOCK_SEQPACKET, one
message each) and answers nothing but "ready" or "error".

  hello (JSON + fds,   uid, gid, the /proc masks, the seccomp programs
         once)        (hex); fds: the spawn object (runtime/zygote_child.c)
                      and the session driver's bytecode, each a sealed
                      memfd this process reads and closes before any spawn
  spawn (a C struct   src/core/zygote_proto.h: host_uid, host_gid and the
         + fds)       sandbox's own workdir, scratch tmpfs options, rlimits;
                      fds stdout, stderr, channel, sync, ctl, status, the
                      codecage-init image, the environment (a sealed memfd
                      only the child reads), and the workspace (a detached
                      mount) when it has one

After the hello this interpreter runs no more Python: the spawn object's
cz_serve() reads the spawn requests, clones, writes each child's id maps and
reaps, in C. After every fork a page the template writes is copied for as
long as any live child shares it; the Python loop this replaced wrote ~200
pages per spawn.

Each spawn is one clone(2) straight into fresh user, mount, ipc, uts and
pid namespaces, made by the spawn object the hello carries
(runtime/zygote_child.c, a shared object with no C library of its own,
loaded from its sealed memfd): from the clone on, the child (B) runs none
of this interpreter, so it writes almost none of the template's pages.
B is pid 1 of its pid namespace and waits until the template wrote its id
maps (its sandbox user to the host uid the server chose). Before anything
else, B tells the server it is ready to be put in its cgroup (the server
reads B's pid from the message's credentials); once it is, everything B
writes or makes is charged to the sandbox. B closes every fd of the
template and takes its ids. B makes its own network namespace (in
parallel with other spawns, rather than inside the template's clone, where
the kernel's network setup held up every spawn queued behind it), builds
its mounts over the template's (a fresh /proc with the masks, devpts, one
scratch tmpfs behind /tmp and /dev/shm, and /workspace: the sandbox's own
workspace or the scratch), names the host, brings up loopback, unshares
the cgroup namespace, applies setsid and the rlimits, drops every
capability, sets no_new_privs, installs the seccomp filter and tells the
server it is done (the server checks that message's credentials: B's pid,
with the ids it chose). B forks C, the session driver, with the C
library's fork(): C is an ordinary fork of this interpreter; it takes its
own session, makes itself dumpable (its /proc/self readable, as after an
exec), applies RLIMIT_AS when no memory cgroup caps it and enters its
working directory with system calls in the spawn object, and goes on here,
in run_driver() (with the sandbox's environment). B execs
codecage-init from the image the server sent: pid 1 of every long-lived
sandbox, which serves the server's execs, reaps, and reports C as the exec
it was made with. Nothing of the template reaches C: its fds are closed,
its memory is a private copy (with `random` reseeded), and neither can see
the other's processes.
"""

import gc
import json
import os
import random
import socket
import struct
import sys
import types

CTL_FD = 3
# Where a child keeps its environment's memfd (zygote_proto.h's ZYGOTE_FD_ENV + 1).
FD_ENV = 8
ENV_MAX = 1 << 20  # the sandbox's environment (the server's bound is lower)
DRIVER_MAX = 1 << 22  # the driver's bytecode
PROC_NAME_MAX = 200  # a /proc entry's name (zygote_child.c's paths are 256 bytes)

CZ_ABI = 3  # zygote_child.c's structures
# Protections the server's unsafe debug build switched off (zygote_child.c).
CZ_FLAGS = (("zygote-caps", 1), ("zygote-seccomp", 2), ("zygote-limits", 4))

try:  # what a zygote needs of this Python; main() says what is missing
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # The child's fork of the driver is the C library's own, as os.fork()'s.
    LIBC_FORK = ctypes.cast(libc.fork, ctypes.c_void_p).value
    before_fork = ctypes.pythonapi.PyOS_BeforeFork
    after_fork_parent = ctypes.pythonapi.PyOS_AfterFork_Parent
    after_fork_child = ctypes.pythonapi.PyOS_AfterFork_Child

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    class CzTemplate(ctypes.Structure):
        _fields_ = [("uid", ctypes.c_uint32), ("gid", ctypes.c_uint32),
                    ("flags", ctypes.c_uint32), ("n_progs", ctypes.c_uint32),
                    ("progs", ctypes.c_void_p), ("proc_masked", ctypes.c_char_p),
                    ("proc_readonly", ctypes.c_char_p), ("proc_hidden", ctypes.c_char_p),
                    ("fork", ctypes.c_void_p)]

    NATIVE_ERROR = None
except Exception as e:
    NATIVE_ERROR = "%s: %s" % (type(e).__name__, e)


def load_spawn(fd):
    """The spawn object (a sealed memfd of the server's), loaded so that
    calls into it keep the GIL: a driver comes back from cz_serve() as
    from os.fork()."""
    try:
        lib = ctypes.PyDLL("/proc/self/fd/%d" % fd)
    finally:
        os.close(fd)
    if lib.cz_abi() != CZ_ABI:
        raise RuntimeError("the spawn object is of another version")
    lib.cz_serve.restype = ctypes.c_long
    lib.cz_serve.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def driver_code(fd):
    """The driver's bytecode (the server's build compiled it) when it was
    compiled for this interpreter, else its source (argv[1]) compiled: the
    parser's arenas would stay in the template, ~2 MiB that every fork
    copies the page tables of and every child tears down."""
    try:
        pyc = read_all(fd, DRIVER_MAX)
    finally:
        os.close(fd)
    import _frozen_importlib_external
    if len(pyc) > 16 and pyc[:4] == _frozen_importlib_external.MAGIC_NUMBER:
        import marshal
        return marshal.loads(pyc[16:])
    return compile(sys.argv[1], "<codecage_session>", "exec")


def name_list(names):
    """NUL-terminated names, then an empty one."""
    for n in names:
        if not n or "\0" in n or len(n.encode()) > PROC_NAME_MAX:
            raise ValueError("a /proc entry's name: %r" % n)
    return b"".join(n.encode() + b"\0" for n in names) + b"\0"


# ---- the template ----


class Template:
    def __init__(self, ctl, hello, spawn_lib):
        self.ctl = ctl
        self.spawn_lib = spawn_lib
        self.uid, self.gid = int(hello["uid"]), int(hello["gid"])
        # Protections switched off by the server (its unsafe debug build only).
        self.disable = str(hello.get("disable", ""))
        self.random_state = random.getstate()
        # The two stacked programs of every sandbox, in install order: the
        # syscall allow list, then the argument checks.
        self.filters = [bytes.fromhex(text) for text in hello["seccomp"]]
        fprogs = [SockFprog(len(raw) // 8, ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p))
                  for raw in self.filters]
        self.progs = (SockFprog * len(fprogs))(*fprogs)
        flags = sum(bit for name, bit in CZ_FLAGS if name in self.disable)
        self.native = CzTemplate(
            self.uid, self.gid, flags, len(fprogs), ctypes.cast(self.progs, ctypes.c_void_p),
            name_list(str(p) for p in hello["proc_masked"]),
            name_list(str(p) for p in hello["proc_readonly"]),
            name_list(str(p) for p in hello["proc_hidden"]), LIBC_FORK)

    def serve(self, driver):
        """The spawn object's loop, until the server closes the socket:
        every driver comes back from it here, as from os.fork(), and runs
        the session in its sandbox."""
        sys.stdout.flush()
        sys.stderr.flush()
        before_fork()
        r = self.spawn_lib.cz_serve(ctypes.byref(self.native), self.ctl.fileno())
        if r == 0:
            after_fork_child()
            self.ctl.detach()  # the object must never close what became another fd
            run_driver(self, driver)
        after_fork_parent()
        if r < 0:
            raise OSError(-r, os.strerror(-r))


def received_fds(anc):
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack("%di" % (len(data) // 4), data[: len(data) // 4 * 4]))
    return fds


def run_driver(t, driver):
    """The driver, back from cz_serve() with its session, RLIMIT_AS and
    working directory applied: every page Python writes here is copied from
    the template, so it does little."""
    try:
        # The sandbox's environment, set on the template's empty one, one
        # assignment each (update() runs the ABCs' isinstance checks: ~70
        # more pages written per sandbox).
        for name, value in read_env():
            os.environ[name] = value
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


def read_all(fd, most):
    """A memfd's bytes, at most `most` of them (one read but for a short one)."""
    size = min(os.lseek(fd, 0, os.SEEK_END), most)
    raw = os.pread(fd, size, 0)
    while 0 < len(raw) < size:
        chunk = os.pread(fd, size - len(raw), len(raw))
        if not chunk:
            break
        raw += chunk
    return raw


def read_env():
    """The sandbox's environment ("K=V" strings, NUL-separated) from the
    sealed memfd the server wrote: the template only passed its fd on and
    never read it, so no sandbox's variables or secrets are in the memory
    every later child starts as a copy of."""
    raw = read_all(FD_ENV, ENV_MAX)
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
        msg, anc, _, _ = ctl.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 2))
        fds = received_fds(anc)
        if NATIVE_ERROR:
            raise RuntimeError(NATIVE_ERROR)
        if len(fds) != 2:
            raise RuntimeError("the hello carries no spawn object and driver")
        hello = json.loads(msg)
        if "zygote-python" in str(hello.get("disable", "")):  # tests of the fallback
            raise RuntimeError("this Python cannot host a zygote (switched off)")
        spawn_lib = load_spawn(fds[0])
        driver = types.ModuleType("codecage_session")
        exec(driver_code(fds[1]), driver.__dict__)
        sys.modules["codecage_session"] = driver
        t = Template(ctl, hello, spawn_lib)
        warm_up(driver)
    except BaseException as e:
        ctl.send(json.dumps({"op": "error", "message": "%s: %s" % (type(e).__name__, e)}).encode())
        return
    # Each child sets its own environment on an empty one (run_driver()).
    os.environ.clear()
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
