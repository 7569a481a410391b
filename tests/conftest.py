"""Shared fixtures for the integration and security suites.

They drive the real binary. CODECAGE_BUILD (default: build) names the build
directory under test, so the same tests run against the ASan/UBSan build;
CODECAGE_DEBUG_BUILD (default: build-unsafe) is a build made with
-Dunsafe_debug=true, whose --debug-disable switch lets the security suite
show that each attack succeeds once its protection is switched off.
"""
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _build_dir(var, default):
    return (ROOT / os.environ.get(var, default)).resolve()


BUILD = _build_dir("CODECAGE_BUILD", "build")
DEBUG_BUILD = _build_dir("CODECAGE_DEBUG_BUILD", "build-unsafe")
PROBE_TARGET = "/opt/probe/cage-probe"


def _sanitized(build):
    """True for a build made with -Db_sanitize (ASan/UBSan)."""
    try:
        opts = json.loads((build / "meson-info" / "intro-buildoptions.json").read_text())
    except OSError:
        return False
    return any(o["name"] == "b_sanitize" and o["value"] != "none" for o in opts)


SANITIZED = _sanitized(BUILD)  # the build under test is ASan/UBSan's


class Cage:
    """Runs `codecage run` from one build directory."""

    def __init__(self, build):
        self.build = build
        self.binary = build / "codecage"
        # The probe is a test tool, not the product under test: always the
        # uninstrumented one (sanitizers would catch the faults it provokes).
        self.probe = ROOT / "build" / "tests" / "cage-probe"
        self.sanitized = _sanitized(build)

    def run(self, argv, *options, timeout=60, input=None, env=None, check_json=True):
        """Runs argv in a sandbox with --json and returns the parsed result."""
        cmd = [str(self.binary), "run", "--json", *options, "--", *argv]
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout, input=input, env=env)
        assert proc.returncode == 0, f"codecage failed ({proc.returncode}): {proc.stderr!r}"
        result = json.loads(proc.stdout)
        if check_json:
            assert result["status"] != "internal_error", result
        return result

    def plain(self, argv, *options, timeout=60, input=None, env=None):
        """Runs argv without --json; returns the CompletedProcess."""
        cmd = [str(self.binary), "run", *options, "--", *argv]
        return subprocess.run(cmd, capture_output=True, timeout=timeout, input=input, env=env)

    def sh(self, script, *options, **kw):
        return self.run(["/bin/sh", "-c", script], *options, **kw)

    def probe_run(self, *probe_args, options=(), disable=None, **kw):
        """Runs the probe inside a sandbox; disable names protections to
        switch off (only in the unsafe debug build)."""
        opts = ["--ro", f"{self.probe}:{PROBE_TARGET}", *options]
        if disable:
            opts += ["--debug-disable", disable]
        return self.run([PROBE_TARGET, *probe_args], *opts, **kw)


@pytest.fixture(scope="session")
def cage():
    if not (BUILD / "codecage").exists():
        pytest.fail(f"{BUILD}/codecage is missing: build first (scripts/test.sh does)")
    return Cage(BUILD)


@pytest.fixture(scope="session")
def unsafe_cage():
    if not (DEBUG_BUILD / "codecage").exists():
        pytest.fail(f"{DEBUG_BUILD}/codecage is missing: meson setup {DEBUG_BUILD} -Dunsafe_debug=true")
    return Cage(DEBUG_BUILD)


@pytest.fixture
def host_canary(tmp_path_factory):
    """A world-readable file with a unique secret, planted on the host in a
    place the sandbox must not see."""
    base = Path("/var/tmp") / f"codecage-canary-{uuid.uuid4().hex}"
    base.mkdir(mode=0o755)
    secret = uuid.uuid4().hex
    canary = base / "canary.txt"
    canary.write_text(secret)
    canary.chmod(0o644)
    yield canary, secret
    shutil.rmtree(base, ignore_errors=True)


def leftover_cgroups():
    """Sandbox cgroups still present on the host (must be none after a run)."""
    found = []
    for root in Path("/sys/fs/cgroup").glob("*/codecage"):
        found += [p for p in root.iterdir() if p.is_dir() and p.name.startswith("run-")]
    unified = Path("/sys/fs/cgroup/codecage")
    if unified.is_dir():
        found += [p for p in unified.iterdir() if p.is_dir() and p.name.startswith("run-")]
    return found


def wait_until(predicate, timeout=5.0, step=0.05):
    """predicate's first truthy value within timeout (else its last value)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= end:
            return value
        time.sleep(step)


def last_json(text):
    """The last line of text that is a JSON object (a probe's answer), or None."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """The network suites' test world (tests/netlib.py): origin servers on
    127.0.0.x, a TLS certificate, a hosts file; one for the whole session."""
    import netlib  # netlib imports this module
    w = netlib.make_world(tmp_path_factory)
    yield w
    w.close()
