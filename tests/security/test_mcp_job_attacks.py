"""Attacks on the ways into a paused or running sandbox that revision
2026-07-28 of MCP opened (src/server/mcp_job.c): a run_python call whose
code called llm_query answers an input-required result and waits, its
sandbox alive, for the client's retry with a requestState; a run started
as a task is reached by its task id (tasks/get, tasks/update,
tasks/cancel).

- a tampered requestState must not resume the run (its MAC);
- another tenant's requestState, leaked, must not let him answer into the
  run (the MAC binds the tenant, and a job belongs to its tenant);
- a requestState answered once must not answer a later question (each is
  for one round);
- another tenant's task id must show nothing, cancel nothing and answer
  nothing into the task's run.

Each attack runs twice (the pair pattern of seclib and
test_tenant_attacks): against the normal build, where it must fail, and
against the unsafe debug build with the check under test switched off
(CODECAGE_DEBUG_DISABLE), where it must succeed, so each test shows the
check is what stops it."""
import os
import time

import pytest

from conftest import BUILD, DEBUG_BUILD
from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef01"
VERSION = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
ONE_QUESTION = "a = llm_query('what is the secret word?')\n[a]"
TWO_QUESTIONS = "a = llm_query('first?')\nb = llm_query('second?')\n[a, b]"


def server_for(tmp_path, disable):
    """Two tenants on the normal build, or on the unsafe build with the
    checks named by disable switched off."""
    tenants = {"alice": ALICE, "bob": BOB}
    if disable is None:
        server = Server(tmp_path, tenants=tenants, build=BUILD)
    else:
        server = Server(tmp_path, tenants=tenants, build=DEBUG_BUILD,
                        env=dict(os.environ, CODECAGE_DEBUG_DISABLE=disable))
    server.protected = disable is None
    return server


def modern(server, token, method, params, caps=None):
    """One request of revision 2026-07-28 over HTTP: its JSON-RPC answer."""
    params = dict(params, _meta={VERSION: "2026-07-28", CAPS: caps or {"sampling": {}}})
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": method}
    name = params.get("name", params.get("taskId"))
    if name is not None:
        headers["Mcp-Name"] = name
    msg = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    r = server.request("POST", "/mcp", msg, token=token, unix=False, headers=headers,
                       timeout=120)
    assert r.status in (200, 400), (r.status, r.body)
    return r.json


def answer(text):
    return {"role": "assistant", "model": "test", "content": {"type": "text", "text": text}}


def run_python(server, token, code, state=None, responses=None):
    params = {"name": "run_python", "arguments": {"code": code}}
    if state is not None:
        params["requestState"] = state
    if responses is not None:
        params["inputResponses"] = responses
    return modern(server, token, "tools/call", params)


def paused(server, token, code):
    """Starts code, which asks the client's model; the input-required result."""
    doc = run_python(server, token, code)
    result = doc["result"]
    assert result["resultType"] == "input_required", doc
    assert list(result["inputRequests"]) == ["llm_query_0"], result
    return result


def completed(doc):
    result = doc.get("result") or {}
    return result.get("resultType") == "complete" and result["structuredContent"]["status"] == "ok"


@pytest.mark.parametrize("disable", [None, "mcp-state-mac"])
def test_a_tampered_request_state_does_not_resume_the_run(tmp_path, disable):
    server = server_for(tmp_path, disable)
    try:
        state = paused(server, ALICE, ONE_QUESTION)["requestState"]
        tampered = state[:-1] + ("0" if state[-1] != "0" else "1")
        doc = run_python(server, ALICE, ONE_QUESTION, tampered,
                         {"llm_query_0": answer("forged")})
        assert completed(doc) != server.protected, doc
        if server.protected:
            assert doc["error"]["code"] == -32602 and "integrity" in doc["error"]["message"]
            # the genuine state still resumes it
            doc = run_python(server, ALICE, ONE_QUESTION, state,
                             {"llm_query_0": answer("genuine")})
            assert completed(doc), doc
            assert doc["result"]["structuredContent"]["return_value"] == ["genuine"]
        else:
            assert doc["result"]["structuredContent"]["return_value"] == ["forged"]
    finally:
        server.stop()


@pytest.mark.parametrize("disable", [None, "mcp-state-mac,mcp-job-tenant"])
def test_another_tenants_request_state_does_not_answer_into_her_run(tmp_path, disable):
    server = server_for(tmp_path, disable)
    try:
        state = paused(server, ALICE, ONE_QUESTION)["requestState"]
        doc = run_python(server, BOB, ONE_QUESTION, state, {"llm_query_0": answer("from bob")})
        injected = completed(doc) and \
            doc["result"]["structuredContent"]["return_value"] == ["from bob"]
        assert injected != server.protected, doc
        if server.protected:
            assert doc["error"]["code"] == -32602, doc
            doc = run_python(server, ALICE, ONE_QUESTION, state,
                             {"llm_query_0": answer("from alice")})
            assert doc["result"]["structuredContent"]["return_value"] == ["from alice"], doc
    finally:
        server.stop()


@pytest.mark.parametrize("disable", [None, "mcp-state-once"])
def test_a_spent_request_state_does_not_answer_a_later_question(tmp_path, disable):
    server = server_for(tmp_path, disable)
    try:
        first = paused(server, ALICE, TWO_QUESTIONS)["requestState"]
        doc = run_python(server, ALICE, TWO_QUESTIONS, first, {"llm_query_0": answer("one")})
        assert doc["result"]["resultType"] == "input_required", doc
        second = doc["result"]["requestState"]
        assert second != first
        replay = run_python(server, ALICE, TWO_QUESTIONS, first,
                            {"llm_query_0": answer("replayed")})
        assert completed(replay) != server.protected, replay
        if server.protected:
            assert replay["error"]["code"] == -32602, replay
            doc = run_python(server, ALICE, TWO_QUESTIONS, second,
                             {"llm_query_0": answer("two")})
            assert doc["result"]["structuredContent"]["return_value"] == ["one", "two"], doc
        else:
            assert replay["result"]["structuredContent"]["return_value"] == ["one", "replayed"]
    finally:
        server.stop()


def task_get(server, token, task_id):
    return modern(server, token, "tasks/get", {"taskId": task_id}, TASKS)


@pytest.mark.parametrize("disable", [None, "mcp-job-tenant"])
def test_another_tenants_task_id_shows_and_cancels_nothing(tmp_path, disable):
    server = server_for(tmp_path, disable)
    try:
        doc = modern(server, ALICE, "tools/call", {"name": "run_python", "arguments": {
            "code": "import time\nprint('alice-private-output', flush=True)\ntime.sleep(60)",
            "timeout_s": 90}}, TASKS)
        task_id = doc["result"]["taskId"]
        assert doc["result"]["resultType"] == "task", doc
        for _ in range(150):
            own = task_get(server, ALICE, task_id)["result"]
            if "alice-private-output" in own.get("statusMessage", ""):
                break
            time.sleep(0.1)
        assert "alice-private-output" in own["statusMessage"], own
        seen = task_get(server, BOB, task_id)
        leaked = "alice-private-output" in (seen.get("result") or {}).get("statusMessage", "")
        assert leaked != server.protected, seen
        cancel = modern(server, BOB, "tasks/cancel", {"taskId": task_id}, TASKS)
        time.sleep(1)
        status = task_get(server, ALICE, task_id)["result"]["status"]
        assert (status == "working") == server.protected, (cancel, status)
        if server.protected:
            assert seen["error"]["code"] == cancel["error"]["code"] == -32602
            unknown = task_get(server, BOB, "0" * 32)
            assert unknown["error"]["code"] == -32602  # exactly like an unknown id
            modern(server, ALICE, "tasks/cancel", {"taskId": task_id}, TASKS)
    finally:
        server.stop()


@pytest.mark.parametrize("disable", [None, "mcp-job-tenant"])
def test_another_tenants_task_id_answers_nothing_into_her_run(tmp_path, disable):
    server = server_for(tmp_path, disable)
    try:
        doc = modern(server, ALICE, "tools/call", {"name": "run_python", "arguments": {
            "code": ONE_QUESTION}}, dict(TASKS, sampling={}))
        task_id = doc["result"]["taskId"]
        for _ in range(150):
            own = task_get(server, ALICE, task_id)["result"]
            if own["status"] == "input_required":
                break
            time.sleep(0.1)
        assert list(own["inputRequests"]) == ["llm_query_0"], own
        update = modern(server, BOB, "tasks/update", {
            "taskId": task_id, "inputResponses": {"llm_query_0": answer("from bob")}}, TASKS)
        if server.protected:
            assert update["error"]["code"] == -32602, update
            modern(server, ALICE, "tasks/update", {
                "taskId": task_id, "inputResponses": {"llm_query_0": answer("from alice")}}, TASKS)
        for _ in range(150):
            own = task_get(server, ALICE, task_id)["result"]
            if own["status"] not in ("working", "input_required"):
                break
            time.sleep(0.1)
        value = own["result"]["structuredContent"]["return_value"]
        assert (value == ["from bob"]) != server.protected, own
        if server.protected:
            assert value == ["from alice"]
    finally:
        server.stop()


def test_reading_a_task_while_its_questions_are_answered(tmp_path):
    """tasks/get put the job's own inputRequests object in its answer and
    wrote it out after letting go of the job's lock, while tasks/update
    deleted the answered questions from that object: the answer was written
    from freed memory (a use-after-free under ASan, answers dropped as
    internal errors otherwise). Readers and an answerer of one's own task
    at once must all get whole answers. No debug switch: the normal build
    (and the ASan build, which the suite also runs) only."""
    import json
    import threading
    server = Server(tmp_path, tenants={"alice": ALICE}, build=BUILD)
    failures, stop = [], threading.Event()
    code = "big = 'x' * 20000\nfor r in range(6):\n    llm_query_batched([big] * 100)\n'done'"

    def reader(task_id):
        while not stop.is_set():
            try:
                doc = task_get(server, ALICE, task_id)
                json.dumps(doc)
                if "result" not in doc:
                    failures.append(doc)
            except Exception as e:  # a dropped connection, a bad answer
                failures.append(repr(e))

    try:
        doc = modern(server, ALICE, "tools/call", {"name": "run_python", "arguments": {
            "code": code, "timeout_s": 120}}, dict(TASKS, sampling={}))
        task_id = doc["result"]["taskId"]
        readers = [threading.Thread(target=reader, args=(task_id,)) for _ in range(3)]
        for t in readers:
            t.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            own = task_get(server, ALICE, task_id)["result"]
            if own["status"] not in ("working", "input_required"):
                break
            for key in list(own.get("inputRequests") or {}):
                modern(server, ALICE, "tasks/update",
                       {"taskId": task_id, "inputResponses": {key: answer("ok")}}, TASKS)
            time.sleep(0.01)
        stop.set()
        for t in readers:
            t.join()
        assert own["status"] == "completed", own
        assert own["result"]["structuredContent"]["return_value"] == "done", own
        assert failures == [], failures[:3]
        log = server.log_text()
        assert "internal error" not in log and "AddressSanitizer" not in log, log[-2000:]
    finally:
        stop.set()
        server.stop()
