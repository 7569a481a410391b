#!/usr/bin/python3
"""Cold start of a one-shot sandbox against its baselines, interleaved in one
process so all three see the same machine state:

  bare      /usr/bin/python3 -c 'print(1)'
  codecage  codecage run -- /usr/bin/python3 -c 'print(1)'
  bwrap     bubblewrap with an equivalent strong configuration (all namespaces,
            read-only /usr, fresh /proc and /dev, tmpfs /tmp, caps dropped,
            cleared env, new session, die-with-parent)

Prints the median and p90 of each, and the ratios codecage/bare and
codecage/bwrap. Usage: bench/cold_start.py [--rounds N] [--build DIR]
"""
import argparse
import os
import shutil
import statistics
import sys
import time

PY = ["/usr/bin/python3", "-c", "print(1)"]


def commands(build):
    cage = os.path.join(build, "codecage")
    cmds = {"bare": PY, "codecage": [cage, "run", "--", *PY]}
    bwrap = shutil.which("bwrap")
    if bwrap:
        cmds["bwrap"] = [
            bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
            "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/workspace",
            "--chdir", "/workspace", *PY]
    return cmds


def spawn_ms(argv):
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        t0 = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"},
                             file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        _, status = os.waitpid(pid, 0)
        elapsed = (time.perf_counter() - t0) * 1000
    finally:
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"benchmark command failed: {argv}")
    return elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    args = ap.parse_args()
    cmds = commands(args.build)
    samples = {name: [] for name in cmds}
    for name, argv in cmds.items():  # warm the page cache once
        spawn_ms(argv)
    for _ in range(args.rounds):
        for name, argv in cmds.items():
            samples[name].append(spawn_ms(argv))
    med = {n: statistics.median(s) for n, s in samples.items()}
    print(f"cold start, {args.rounds} interleaved rounds, python3 -c 'print(1)'")
    for name, s in samples.items():
        p90 = statistics.quantiles(s, n=10)[-1]
        print(f"  {name:9s} median {med[name]:7.2f} ms   p90 {p90:7.2f} ms")
    print(f"  ratio codecage/bare  {med['codecage'] / med['bare']:.2f}x   (bar: <= 1.10x)")
    if "bwrap" in med:
        print(f"  ratio codecage/bwrap {med['codecage'] / med['bwrap']:.2f}x   (bar: < 1.00x)")


if __name__ == "__main__":
    main()
