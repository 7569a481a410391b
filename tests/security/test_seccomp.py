"""The seccomp filter: kernel attack surface a sandboxed program never needs.

Each call is made by the probe with deliberately invalid arguments (the
bubblewrap try-syscall way): under the filter it fails with the filter's
errno (EPERM; ENOSYS for calls not on the allow list and for clone3/openat2),
without the filter the kernel
itself answers (EINVAL, EFAULT, EBADF, ESRCH, ENOSYS when not configured)
— so "blocked by the filter" is told apart from "refused by the kernel".
The mount family runs after the probe tries to enter a user + mount
namespace of its own (refused under the filter), so that without the filter
the kernel gets past its capability check and looks at the arguments.
Other ABIs (x32, i386) kill the process with SIGSYS.
"""
import subprocess

import pytest

from seclib import Target, expect, pair, target  # noqa: F401 (fixture)

FAMILIES = {
    "keyrings": ["keyctl", "add_key", "request_key"],
    "bpf-perf": ["bpf", "perf_event_open"],
    "userfaultfd": ["userfaultfd"],
    "io_uring": ["io_uring_setup", "io_uring_enter", "io_uring_register"],
    "ptrace": ["ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
               "process_madvise"],
    "mount": ["mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
              "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr"],
    "namespaces": ["unshare", "setns", "clone-newuser", "clone3"],
    "kexec-modules": ["kexec_load", "kexec_file_load", "init_module", "finit_module",
                      "delete_module"],
    "handles": ["name_to_handle_at", "open_by_handle_at", "openat2"],
    "tty": ["tiocsti", "tiocsti-highbits", "tioclinux", "tiocsetd", "tioccons"],
    "vsock": ["socket-vsock"],
    "setuid-modes": ["chmod-setuid"],
    # not on the allow list: ENOSYS, as for every syscall a newer kernel adds
    "unlisted": ["statmount", "listmount", "lsm_get_self_attr", "lsm_list_modules"],
    "personality": ["personality-norandom", "personality-exec"],
    "ldt": ["modify_ldt"],
    "numa": ["mbind", "set_mempolicy", "migrate_pages", "move_pages"],
    "obsolete": ["ustat", "sysfs"],
    "socket-families": ["socket-packet", "socket-inet-raw", "socket-netlink-audit",
                        "socketpair-inet"],
}
SYSCALLS = [(fam, name) for fam, names in FAMILIES.items() for name in names]

# Calls a kernel may refuse with EPERM before looking at any argument when
# the caller lacks a capability of the initial user namespace (which a
# sandbox can never hold): on such a kernel the filter's answer cannot be
# told apart. Kernels built without them answer ENOSYS, and this one does.
# open_by_handle_at is one of them before Linux 6.10 (CAP_DAC_READ_SEARCH).
KERNEL_EPERM_FIRST = {"kexec_load", "kexec_file_load", "init_module", "finit_module",
                      "delete_module", "open_by_handle_at"}


def reaches_kernel(target, name):
    """Whether the call gets past the filter to the kernel."""
    out, r = target.probe_json("syscall", name)
    assert out and out["name"] == name, r
    if not target.protected and name in KERNEL_EPERM_FIRST and out["errname"] == "EPERM":
        pytest.skip(f"this kernel refuses {name} with EPERM before reading its arguments")
    if not target.protected and name in FAMILIES["unlisted"] and out["errname"] == "ENOSYS":
        pytest.skip(f"this kernel has no {name} (Linux 6.8+): nothing for the filter to hide")
    return out["ret"] >= 0 or out["errno"] != out["filter_errno"], out


@pair("seccomp,userns-owner")
@pytest.mark.parametrize("family,name", SYSCALLS, ids=[f"{f}:{n}" for f, n in SYSCALLS])
def test_denied_syscall_is_blocked_by_the_filter(target, family, name):
    reached, out = reaches_kernel(target, name)
    expect(target, reached, out)
    if target.protected:
        assert out["ret"] == -1
        assert out["errno"] == out["filter_errno"], out
        assert out["errname"] == ("ENOSYS" if family == "unlisted" or name.startswith(
            "personality") or name in ("clone3", "openat2") else "EPERM"), out


def test_syscall_list_matches_the_probe(cage):
    """Every case the probe knows is in the matrix above (no silent gaps)."""
    names = subprocess.run([str(cage.probe), "syscalls"], capture_output=True, text=True,
                           timeout=10, check=True).stdout.split()
    assert sorted(names) == sorted(n for _, n in SYSCALLS)


def creates_user_namespace(target):
    """unshare(1) -U -r: a nested user namespace in which we are root."""
    r = target.sh("unshare -U -r /bin/sh -c 'id -u' 2>&1")
    return r["status"] == "ok" and r["stdout"].strip() == "0", r


@pair("seccomp,userns-owner")
def test_unshare_user_namespace(target):
    ok, r = creates_user_namespace(target)
    expect(target, ok, r)


def test_nested_namespaces_are_also_refused_by_the_user_namespace_limits(unsafe_cage):
    """The second layer: with only the filter off, the sandbox's own user
    namespace allows no nested one (max_user_namespaces 0); with its limits
    gone too (the namespace owned by root, as before), the nesting works."""
    r = unsafe_cage.sh("unshare -U -r /bin/sh -c 'id -u' 2>&1", "--debug-disable", "seccomp")
    assert r["status"] == "error" and "No space left on device" in r["stdout"], r
    ok, r = creates_user_namespace(Target(unsafe_cage, "seccomp,userns-owner"))
    assert ok, r


def uses_x32_abi(target):
    """An x32 getpid (syscall number with bit 30 set): the filter kills the
    process with SIGSYS; a kernel without x32 answers ENOSYS."""
    out, r = target.probe_json("x32")
    return out is not None, r


@pair("seccomp")
def test_x32_abi(target):
    ok, r = uses_x32_abi(target)
    expect(target, ok, r)
    if target.protected:
        assert r["signal"] == 31, r  # SIGSYS


def _host_has_i386_entry(cage):
    """int $0x80 works on the host itself (outside any sandbox)."""
    p = subprocess.run([str(cage.probe), "i386"], capture_output=True, timeout=10)
    return p.returncode == 0


def uses_i386_abi(target):
    out, r = target.probe_json("i386")
    return out is not None, r


@pair("seccomp")
def test_i386_abi(target, cage):
    has_i386 = _host_has_i386_entry(cage)
    if not target.protected and not has_i386:
        pytest.skip("this kernel has no i386 entry (int $0x80 faults even on the host)")
    ok, r = uses_i386_abi(target)
    expect(target, ok, r)
    if target.protected:
        # Killed by the filter (SIGSYS), or by the kernel's #GP where the
        # i386 entry is disabled (SIGSEGV): never a getpid result.
        assert r["signal"] == (31 if has_i386 else 11), r


def injects_into_own_pty(target):
    """TIOCSTI into a pty the probe made its own controlling terminal: the
    one case the kernel allows an unprivileged process, so only the filter
    is in the way."""
    out, r = target.probe_json("tiocsti-pty")
    assert out, r
    return out["injected"] > 0 and "pwned" in out["echo"], out


@pair("seccomp")
def test_tiocsti_into_own_pty(target):
    ok, out = injects_into_own_pty(target)
    expect(target, ok, out)
    if target.protected:
        assert out["errname"] == "EPERM"


def makes_vsock_socket(target):
    """AF_VSOCK is not isolated by network namespaces (it reaches the VM
    host). A socket is created; nothing is sent."""
    out, r = target.probe_json("syscall", "socket-vsock")
    return out["ret"] >= 0 or out["errname"] not in ("EPERM",), out


@pair("seccomp")
def test_af_vsock_socket(target):
    ok, out = makes_vsock_socket(target)
    expect(target, ok, out)
