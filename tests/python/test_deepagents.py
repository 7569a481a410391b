"""codecage.frameworks.DeepAgentsSandbox against a real server, driven
through LangChain Deep Agents' SandboxBackendProtocol as published in
deepagents 0.7.8 (libs/deepagents/deepagents/backends/protocol.py and
sandbox.py's BaseSandbox, commit 23b83ad50f63d241d0069a3dc426d43b211adf2e):
deepagents itself is not installed here, so its shapes are written out below
and the adapter's look-alike result types are checked against them."""
import asyncio
import dataclasses
import inspect

import pytest

from clientlib import TOKEN, codecage_pkg, server  # noqa: F401

# The protocol's calls: name -> [(parameter, kind, default)] after self.
E = inspect.Parameter.empty
POS, KW = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
PROTOCOL = {
    "execute": [("command", POS, E), ("timeout", KW, None)],
    "aexecute": [("command", POS, E), ("timeout", KW, None)],
    "upload_files": [("files", POS, E)],
    "aupload_files": [("files", POS, E)],
    "download_files": [("paths", POS, E)],
    "adownload_files": [("paths", POS, E)],
}
ASYNC = {"aexecute", "aupload_files", "adownload_files"}
# The result dataclasses: [(field, default)] in order.
RESULTS = {
    "ExecuteResponse": [("output", dataclasses.MISSING), ("exit_code", None), ("truncated", False)],
    "FileUploadResponse": [("path", dataclasses.MISSING), ("error", None)],
    "FileDownloadResponse": [("path", dataclasses.MISSING), ("content", None), ("error", None)],
}


@pytest.fixture
def client(codecage_pkg, server):
    c = codecage_pkg.sync.SandboxClient(f"http://127.0.0.1:{server.port}", TOKEN)
    yield c
    c.close()


def test_shapes_match_the_protocol(codecage_pkg):
    from codecage import frameworks as fw
    for meth, params in PROTOCOL.items():
        f = getattr(fw.DeepAgentsSandbox, meth)
        got = [(p.name, p.kind, p.default) for p in list(inspect.signature(f).parameters.values())[1:]]
        assert got == params, meth
        assert inspect.iscoroutinefunction(f) == (meth in ASYNC), meth
    assert isinstance(fw.DeepAgentsSandbox.id, property)
    for cls, fields in RESULTS.items():
        got = [(f.name, f.default) for f in dataclasses.fields(getattr(fw, cls))]
        assert got == fields, cls


def test_execute(client):
    from codecage.frameworks import DeepAgentsSandbox, ExecuteResponse
    with DeepAgentsSandbox(client=client, output_max_bytes=4096) as sb:
        assert sb.id in client.list()
        r = sb.execute("echo out; echo err >&2; exit 3")
        assert isinstance(r, ExecuteResponse)
        assert (r.output, r.exit_code, r.truncated) == ("out\nerr\n", 3, False)
        r = sb.execute("pwd; printf x >&2")  # stderr after a line of stdout
        assert (r.output, r.exit_code) == ("/workspace\nx", 0)
        r = sb.execute("sleep 10", timeout=1)
        assert r.exit_code != 0 and "[codecage: timeout" in r.output
        r = sb.execute("head -c 100000 /dev/zero | tr '\\0' a")
        assert r.truncated and len(r.output) < 100000
        r = sb.execute("echo $((6*7))", timeout=0)  # 0: the backend's default
        assert r.output == "42\n" and r.exit_code == 0
        r = asyncio.run(sb.aexecute("echo async", timeout=5))
        assert r.output == "async\n"
        name = sb.id
    assert name not in client.list()  # close() removed the sandbox it made


def test_upload_and_download_with_partial_success(client):
    from codecage.frameworks import DeepAgentsSandbox, FileDownloadResponse, FileUploadResponse
    blob = bytes(range(256)) * 3
    with DeepAgentsSandbox(client=client) as sb:
        up = sb.upload_files([
            ("/workspace/src/app.py", b"print('hi')\n"),
            ("relative.txt", b"no"),                      # not absolute
            ("/tmp/data/blob.bin", blob),                  # outside the workspace
            ("/etc/codecage-test", b"no"),                 # read-only root
            ("/workspace/src", b"no"),                     # a directory
            ("/workspace/deep/er/x.txt", b"x"),
        ])
        assert all(isinstance(u, FileUploadResponse) for u in up)
        assert [(u.path, u.error) for u in up] == [
            ("/workspace/src/app.py", None), ("relative.txt", "invalid_path"),
            ("/tmp/data/blob.bin", None), ("/etc/codecage-test", "permission_denied"),
            ("/workspace/src", "is_directory"), ("/workspace/deep/er/x.txt", None)]
        # what was uploaded is there for commands
        r = sb.execute("python3 src/app.py; wc -c < /tmp/data/blob.bin; ls -A /workspace")
        assert r.output.split("\n")[:2] == ["hi", "768"], r.output
        down = sb.download_files([
            "/workspace/src/app.py", "/tmp/data/blob.bin", "/workspace/missing.txt",
            "/tmp/missing", "/workspace/src", "/tmp", "rel/path", "/etc/hostname",
            "/workspace/deep/er/../er/x.txt"])
        assert all(isinstance(d, FileDownloadResponse) for d in down)
        got = [(d.path, d.content, d.error) for d in down]
        assert got == [
            ("/workspace/src/app.py", b"print('hi')\n", None),
            ("/tmp/data/blob.bin", blob, None),
            ("/workspace/missing.txt", None, "file_not_found"),
            ("/tmp/missing", None, "file_not_found"),
            ("/workspace/src", None, "is_directory"),
            ("/tmp", None, "is_directory"),
            ("rel/path", None, "invalid_path"),
            ("/etc/hostname", got[7][1], None),
            ("/workspace/deep/er/../er/x.txt", b"x", None)]
        assert got[7][1]  # a file outside the workspace, read through it
        # nothing of the transfers is left behind
        assert sb.execute("ls -A /workspace/.codecage-xfer").output == ""
        up = asyncio.run(sb.aupload_files([("/workspace/a.txt", b"A")]))
        down = asyncio.run(sb.adownload_files(["/workspace/a.txt", "/nope"]))
        assert [u.error for u in up] == [None]
        assert [(d.content, d.error) for d in down] == [(b"A", None), (None, "file_not_found")]


def test_existing_handle_is_kept(client, codecage_pkg):
    from codecage.frameworks import DeepAgentsSandbox
    h = client.create("da-" + __import__("os").urandom(4).hex())
    try:
        with DeepAgentsSandbox(h) as sb:
            assert sb.id == h.name
            sb.upload_files([("/workspace/k.txt", b"kept")])
        assert h.read_file("k.txt") == b"kept"  # close() left a handle it was given
        with pytest.raises(TypeError):
            DeepAgentsSandbox(h, name="other")
    finally:
        client.remove(h.name)
