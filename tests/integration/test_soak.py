"""The short soak (bench/soak.py, run by hand for the full numbers): a
minute of mixed load from 4 clients over HTTP and MCP (one-shot runs,
sessions created, used and removed, file writes, timeouts, OOMs; every
kind over both) with no lost or wrong answer and nothing left behind, then 10 SIGKILLs of the
server under load, each restart answering within 2 s, no acknowledged
workspace file lost or torn, nothing left after the sweep."""
import importlib.util
import json
import os
from pathlib import Path

import pytest

from conftest import BUILD

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

spec = importlib.util.spec_from_file_location(
    "soak", Path(__file__).resolve().parents[2] / "bench" / "soak.py")
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)


def test_short_soak(tmp_path):
    os.chmod(tmp_path, 0o700)
    load = soak.load_phase(tmp_path / "load", BUILD, 60, 4, 60)
    print(json.dumps(load, indent=2))
    assert load["lost"] == 0 and load["wrong"] == 0, load["failures"]
    assert load["sessions_done"] >= 30
    # Every kind of call was made, and checked, over HTTP and over MCP.
    for kind in ("oneshot_shell", "oneshot_python", "timeout", "oom"):
        for transport in ("http", "mcp"):
            assert load["calls"].get(f"{kind}/{transport}", 0) >= 1, (kind, transport)
    assert load["exit_code"] == 0
    assert load["leftovers"] == {}


def test_short_faults(tmp_path):
    os.chmod(tmp_path, 0o700)
    faults = soak.fault_phase(tmp_path / "faults", BUILD, 10, 4)
    print(json.dumps(faults, indent=2))
    assert faults["recovery_s"]["over_2s"] == 0, faults["recovery_s"]
    assert faults["files_acknowledged"] > 0
    assert faults["files_lost_or_torn"] == 0, faults["lost_examples"]
    assert faults["exit_code"] == 0
    assert faults["leftovers"] == {}


def test_verdict_counts_missing_sessions():
    """The soak fails when it completed fewer sessions than asked for, even
    with no lost or wrong answer."""
    usage = {"rss_bytes": {"growth": 0.0}, "fds": {"growth": 0.0}, "threads": {"growth": 0.0}}
    load = {"lost": 0, "wrong": 0, "usage": usage, "leftovers": {},
            "sessions_requested": 1000, "sessions_done": 1000}
    assert soak.verdict(load, None) == []
    assert soak.verdict(dict(load, sessions_done=999), None) == [
        "load: 999 of 1000 sessions completed"]
