"""The caller's terminal. codecage is started from a shell on a pty (its
controlling terminal). A sandboxed program must neither push input into
that terminal (TIOCSTI: the keystrokes run in the user's shell once the
sandbox exits) nor open it through /dev/tty (to read what the user types).

setsid() in the sandbox drops the controlling terminal; the seccomp filter
refuses TIOCSTI/TIOCLINUX whatever the terminal. Injection through stdin
(--stdin - on the terminal) is stopped by both, so both are switched off to
show it works; opening /dev/tty is stopped by setsid alone.
"""
import fcntl
import json
import os
import pty
import subprocess
import termios
import time

from seclib import expect, last_json, pair, target  # noqa: F401 (fixture)


def _run_on_terminal(target, probe_args, forward_stdin):
    """Runs the probe with codecage in a new session whose controlling
    terminal is a fresh pty; returns (probe JSON, bytes the terminal got
    as input)."""
    master, slave = pty.openpty()

    def become_terminal_session():
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    options = ["--stdin", "-"] if forward_stdin else []
    try:
        p = subprocess.run(target.probe_command(*probe_args, options=options),
                           stdin=slave if forward_stdin else subprocess.DEVNULL,
                           capture_output=True, preexec_fn=become_terminal_session, timeout=30)
        assert p.returncode == 0, p.stderr
        out = last_json(json.loads(p.stdout)["stdout"])
        # Injected input is echoed by the line discipline on the master.
        os.set_blocking(master, False)
        time.sleep(0.1)
        try:
            typed = os.read(master, 4096)
        except BlockingIOError:
            typed = b""
        return out, typed
    finally:
        os.close(master)
        os.close(slave)


def injects_into_caller_terminal_via_stdin(target):
    out, typed = _run_on_terminal(target, ["tiocsti-fd", "0", "echo PWNED\n"],
                                  forward_stdin=True)
    return b"echo PWNED" in typed, (out, typed)


@pair("seccomp,setsid")
def test_tiocsti_into_caller_terminal(target):
    ok, detail = injects_into_caller_terminal_via_stdin(target)
    expect(target, ok, detail)


def injects_through_dev_tty(target):
    out, typed = _run_on_terminal(target, ["tiocsti-fd", "/dev/tty", "echo PWNED\n"],
                                  forward_stdin=False)
    return b"echo PWNED" in typed, (out, typed)


@pair("seccomp,setsid")
def test_tiocsti_through_dev_tty(target):
    ok, detail = injects_through_dev_tty(target)
    expect(target, ok, detail)


def opens_caller_terminal(target):
    """open("/dev/tty") succeeds only with a controlling terminal."""
    out, _ = _run_on_terminal(target, ["read", "/dev/tty"], forward_stdin=False)
    return out["ret"] == 0, out


@pair("setsid")
def test_dev_tty_is_not_the_callers_terminal(target):
    ok, out = opens_caller_terminal(target)
    expect(target, ok, out)
    if target.protected:
        assert out["errname"] == "ENXIO", out
