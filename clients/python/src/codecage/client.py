"""The asyncio client of the codecage API: SandboxClient (create, get, list,
remove, one-shot runs), SandboxHandle (exec, shell, files, logs, lifecycle)
and PythonSession (a sandbox's persistent Python, with host functions that
sandbox code calls and this process answers)."""
from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional,
                    Sequence, Union)

from ._http import Body, Endpoint, Transport, parse_url, quote_path, quote_segment
from .errors import CodecageError, HostFunctionError, NotFound, error_from_response
from .types import (Artifact, Event, ExecResult, FileEntry, SandboxSpec, VariableInfo, argv_of,
                    spec_fields)

HostFunction = Callable[..., Any]
HostFunctions = Mapping[str, HostFunction]
Files = Union[Mapping[str, Union[str, bytes]], Sequence[Mapping[str, Any]]]

_BUILTIN_HOST = ("llm_query", "llm_query_batched")


def _files_api(files: Optional[Files]) -> Optional[List[Dict[str, Any]]]:
    """`files` of a one-shot run: {path: str | bytes} or the API's list."""
    if not files:
        return None
    if isinstance(files, Mapping):
        out = []
        for path, content in files.items():
            if isinstance(content, (bytes, bytearray)):
                out.append({"path": path, "content": base64.b64encode(content).decode(),
                            "encoding": "base64"})
            else:
                out.append({"path": path, "content": str(content)})
        return out
    return [dict(f) for f in files]


def _host_functions_api(fns: Optional[HostFunctions]) -> Union[bool, List[str], None]:
    """`host_functions` of a run: true, or the extra names to install."""
    if not fns:
        return None
    extra = []
    for name in fns:
        base = name[6:] if name.startswith("tools.") else name
        if not base.isidentifier():
            raise ValueError(f"host function name {name!r} is not a Python identifier")
        if name not in _BUILTIN_HOST and not name.startswith("tools."):
            extra.append(name)
    return extra or True


async def _call_host(fns: HostFunctions, fn: str, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    f = fns.get(fn)
    if f is None:
        if fn == "tools.list":
            return sorted(n[6:] for n in fns if n.startswith("tools."))
        raise HostFunctionError(f"no host function named {fn!r} is registered")
    if inspect.iscoroutinefunction(f):
        return await f(*args, **kwargs)
    value = await asyncio.to_thread(f, *args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


class SandboxClient:
    """The codecage server, from asyncio code.

    url: http://HOST:PORT, unix:///path/to.sock or a socket path; default
    $CODECAGE_URL, else the local server's socket /var/lib/codecage/codecage.sock.
    token: the bearer token of a tenant; default $CODECAGE_TOKEN.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 connect_timeout: float = 10.0) -> None:
        self.endpoint: Endpoint = parse_url(url)
        tok = token if token is not None else os.environ.get("CODECAGE_TOKEN") or None
        self._t = Transport(self.endpoint, tok, connect_timeout)

    async def __aenter__(self) -> "SandboxClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the kept-alive connections."""
        await self._t.close()

    # ---- plumbing ----

    async def _json(self, method: str, path: str, body: Body = None,
                    timeout: Optional[float] = None) -> Any:
        return (await self._t.request(method, path, body, timeout=timeout)).json()

    async def _stream(self, path: str, body: Dict[str, Any],
                      host_functions: Optional[HostFunctions] = None) -> AsyncIterator[Event]:
        """A streamed run: yields its output events and then one "result"
        event; answers host calls with host_functions as they come."""
        fns = dict(host_functions or {})
        if fns:
            body["host_functions"] = _host_functions_api(fns)
        pending: "set[asyncio.Task[None]]" = set()
        try:
            async for kind, data in self._t.stream("POST", path, body):
                if kind in ("stdout", "stderr"):
                    yield Event(kind, data.get("data", "") if isinstance(data, dict) else str(data))
                elif kind == "status":
                    yield Event(kind, data.get("message", "") if isinstance(data, dict) else str(data))
                elif kind == "host_call" and isinstance(data, dict):
                    task = asyncio.ensure_future(self._answer(fns, data))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                elif kind == "result" and isinstance(data, dict):
                    yield Event("result", result=ExecResult.from_api(data))
                    return
                elif kind == "error":
                    raw = json.dumps(data).encode()
                    status = 500
                    raise error_from_response(status, raw)
            raise CodecageError("the stream ended without a result")
        finally:
            for t in list(pending):
                t.cancel()

    async def _answer(self, fns: HostFunctions, call: Mapping[str, Any]) -> None:
        cid = str(call.get("id", ""))
        try:
            value = await _call_host(fns, str(call.get("fn", "")), list(call.get("args") or []),
                                     dict(call.get("kwargs") or {}))
            try:
                body: Dict[str, Any] = {"value": value}
                raw = json.dumps(body).encode()
            except (TypeError, ValueError) as e:
                body = {"error": f"host function {call.get('fn')} returned a value that is "
                                 f"not JSON: {e}"}
                raw = json.dumps(body).encode()
        except HostFunctionError as e:
            raw = json.dumps({"error": str(e)[:65536]}).encode()
        except Exception as e:  # noqa: BLE001 - reported to the sandbox code
            raw = json.dumps({"error": f"{type(e).__name__}: {e}"[:65536]}).encode()
        try:
            await self._t.request("POST", f"/v1/host_calls/{quote_segment(cid)}", raw,
                                  headers={"Content-Type": "application/json"})
        except NotFound:
            pass  # its wait ended (the run was cancelled or timed out)

    async def _run(self, path: str, body: Dict[str, Any],
                   host_functions: Optional[HostFunctions]) -> ExecResult:
        if not host_functions:
            return ExecResult.from_api(await self._json("POST", path, body))
        async for ev in self._stream(path, body, host_functions):
            if ev.result is not None:
                return ev.result
        raise CodecageError("the stream ended without a result")  # pragma: no cover

    # ---- the server ----

    async def health(self) -> Dict[str, Any]:
        """GET /healthz: {"status": "ok", "version": ...}."""
        return dict(await self._json("GET", "/healthz"))

    async def pool(self) -> Dict[str, Any]:
        """Warm pool statistics (operators)."""
        return dict(await self._json("GET", "/v1/pool"))

    # ---- sandboxes ----

    async def create(self, spec: Union[SandboxSpec, str], **fields: Any) -> "SandboxHandle":
        """Creates a named sandbox: create(SandboxSpec(...)) or
        create("name", memory_mib=..., ...)."""
        if isinstance(spec, str):
            spec = SandboxSpec(spec, **fields)
        elif fields:
            raise TypeError("give either a SandboxSpec or a name with fields")
        info = await self._json("POST", "/v1/sandboxes", spec.to_api())
        return SandboxHandle(self, info["name"], info)

    async def get(self, name: str) -> "SandboxHandle":
        """A handle to an existing sandbox (NotFound if there is none)."""
        info = await self._json("GET", f"/v1/sandboxes/{quote_segment(name)}")
        return SandboxHandle(self, info["name"], info)

    def handle(self, name: str) -> "SandboxHandle":
        """A handle by name, without asking the server."""
        return SandboxHandle(self, name, None)

    async def list(self, label: Optional[str] = None) -> List[str]:
        """Names of the tenant's sandboxes (label: "KEY=VALUE" keeps those with it)."""
        return [s["name"] for s in await self.sandboxes(label)]

    async def sandboxes(self, label: Optional[str] = None) -> List[Dict[str, Any]]:
        """The info of every sandbox of the tenant."""
        q = f"?label={quote_segment(label)}" if label else ""
        return list((await self._json("GET", f"/v1/sandboxes{q}"))["sandboxes"])

    async def remove(self, name: str) -> None:
        """Removes a sandbox: processes, workspace and metadata."""
        await self._json("DELETE", f"/v1/sandboxes/{quote_segment(name)}")

    # ---- one-shot runs ----

    def _oneshot_body(self, image: Optional[str], timeout: Optional[float],
                      files: Optional[Files], spec: Mapping[str, Any]) -> Dict[str, Any]:
        spec = dict(spec)
        spec.pop("name", None)  # one-shot sandboxes have no name
        body = spec_fields({**spec, "image": image})
        if timeout is not None:
            body["timeout_s"] = timeout
        f = _files_api(files)
        if f:
            body["files"] = f
        return body

    async def run_python(self, code: str, *, image: Optional[str] = None,
                         timeout: Optional[float] = None, files: Optional[Files] = None,
                         host_functions: Optional[HostFunctions] = None,
                         host_budget: Optional[int] = None, **spec: Any) -> ExecResult:
        """Runs Python once in a fresh sandbox (POST /v1/python). With the
        server's default policy (no image or spec fields) it takes a sandbox
        from the warm pool."""
        body = self._oneshot_body(image, timeout, files, spec)
        body["code"] = code
        if host_budget is not None:
            body["host_budget"] = host_budget
        return await self._run("/v1/python", body, host_functions)

    async def run_shell(self, script: str, *, image: Optional[str] = None,
                        timeout: Optional[float] = None, files: Optional[Files] = None,
                        **spec: Any) -> ExecResult:
        """Runs a shell script (/bin/sh -c) once in a fresh sandbox (POST /v1/run)."""
        body = self._oneshot_body(image, timeout, files, spec)
        body["command"] = script
        return await self._run("/v1/run", body, None)

    async def run(self, cmd: str, args: Optional[Sequence[str]] = None, *,
                  image: Optional[str] = None, timeout: Optional[float] = None,
                  files: Optional[Files] = None, **spec: Any) -> ExecResult:
        """Runs a program with arguments (no shell) once in a fresh sandbox."""
        body = self._oneshot_body(image, timeout, files, spec)
        body["argv"] = argv_of(cmd, args)
        return await self._run("/v1/run", body, None)

    def run_python_stream(self, code: str, *, image: Optional[str] = None,
                          timeout: Optional[float] = None, files: Optional[Files] = None,
                          host_functions: Optional[HostFunctions] = None,
                          **spec: Any) -> AsyncIterator[Event]:
        """run_python with output as it comes: async-iterate the events."""
        body = self._oneshot_body(image, timeout, files, spec)
        body["code"] = code
        return self._stream("/v1/python", body, host_functions)

    def run_shell_stream(self, script: str, *, image: Optional[str] = None,
                         timeout: Optional[float] = None, files: Optional[Files] = None,
                         **spec: Any) -> AsyncIterator[Event]:
        """run_shell with output as it comes: async-iterate the events."""
        body = self._oneshot_body(image, timeout, files, spec)
        body["command"] = script
        return self._stream("/v1/run", body)

    async def artifact(self, run: Union[ExecResult, str], path: Union[Artifact, str]) -> bytes:
        """A file of a one-shot run's output/ folder (its run_id or result;
        path relative to output/, or one of result.artifacts)."""
        run_id = run.run_id if isinstance(run, ExecResult) else run
        if not run_id:
            raise ValueError("this result has no run_id (only one-shot runs keep artifacts)")
        p = path.path if isinstance(path, Artifact) else path
        resp = await self._t.request("GET", f"/v1/runs/{quote_segment(run_id)}/files/{quote_path(p)}")
        return resp.body


class SandboxHandle:
    """A named sandbox. Holds only its name: it keeps working across server
    restarts, and a stopped sandbox starts again on its next exec."""

    def __init__(self, client: SandboxClient, name: str, info: Optional[Dict[str, Any]]) -> None:
        self.client = client
        self.name = name
        self.last_info = info
        self._p = f"/v1/sandboxes/{quote_segment(name)}"
        self._session: Optional[PythonSession] = None

    def __repr__(self) -> str:
        return f"<SandboxHandle {self.name!r}>"

    async def info(self) -> Dict[str, Any]:
        """The sandbox's current info (state, spec, usage)."""
        info: Dict[str, Any] = await self.client._json("GET", self._p)
        self.last_info = info
        return info

    # ---- runs ----

    @staticmethod
    def _exec_body(cmd: Optional[str], args: Optional[Sequence[str]], script: Optional[str],
                   timeout: Optional[float], env: Optional[Mapping[str, str]],
                   cwd: Optional[str], stdin: Optional[str]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"script": script} if script is not None else {
            "argv": argv_of(cmd or "", args)}
        if timeout is not None:
            body["timeout_s"] = timeout
        if env:
            body["env"] = dict(env)
        if cwd is not None:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = stdin
        return body

    async def exec(self, cmd: str, args: Optional[Sequence[str]] = None, *,
                   timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                   cwd: Optional[str] = None, stdin: Optional[str] = None) -> ExecResult:
        """Runs cmd with args (argv, no shell) in the sandbox."""
        body = self._exec_body(cmd, args, None, timeout, env, cwd, stdin)
        return ExecResult.from_api(await self.client._json("POST", self._p + "/exec", body))

    async def shell(self, script: str, *, timeout: Optional[float] = None,
                    env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                    stdin: Optional[str] = None) -> ExecResult:
        """Runs script with /bin/sh -c in the sandbox."""
        body = self._exec_body(None, None, script, timeout, env, cwd, stdin)
        return ExecResult.from_api(await self.client._json("POST", self._p + "/exec", body))

    def exec_stream(self, cmd: str, args: Optional[Sequence[str]] = None, *,
                    timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, stdin: Optional[str] = None) -> AsyncIterator[Event]:
        """exec with output as it comes. Leaving the loop early cancels the run."""
        body = self._exec_body(cmd, args, None, timeout, env, cwd, stdin)
        return self.client._stream(self._p + "/exec", body)

    def shell_stream(self, script: str, *, timeout: Optional[float] = None,
                     env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                     stdin: Optional[str] = None) -> AsyncIterator[Event]:
        """shell with output as it comes. Leaving the loop early cancels the run."""
        body = self._exec_body(None, None, script, timeout, env, cwd, stdin)
        return self.client._stream(self._p + "/exec", body)

    # ---- lifecycle ----

    async def stop(self) -> None:
        """Ends every process; the workspace stays."""
        self.last_info = await self.client._json("POST", self._p + "/stop")

    async def start(self) -> None:
        self.last_info = await self.client._json("POST", self._p + "/start")

    async def kill(self) -> None:
        """stop with SIGKILL at once."""
        self.last_info = await self.client._json("POST", self._p + "/kill")

    async def remove(self) -> None:
        await self.client.remove(self.name)

    async def logs(self, *, tail: Optional[int] = None) -> str:
        """The last `tail` lines of the sandbox's exec output (None: all kept)."""
        q = f"?tail={int(tail)}" if tail is not None else ""
        return "\n".join((await self.client._json("GET", f"{self._p}/logs{q}"))["lines"])

    # ---- files (paths relative to /workspace) ----

    async def write_file(self, path: str, data: Union[str, bytes]) -> int:
        """Writes (replaces) a file; parent directories are created. Returns its size."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        resp = await self.client._t.request(
            "PUT", f"{self._p}/files/{quote_path(path)}", raw,
            headers={"Content-Type": "application/octet-stream"})
        return int(resp.json()["size"])

    async def read_file(self, path: str) -> bytes:
        resp = await self.client._t.request("GET", f"{self._p}/files/{quote_path(path)}")
        return resp.body

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read_file(path)).decode(encoding)

    async def fetch_url(self, path: str, url: str) -> int:
        """Has the server download url into the file, through the egress policy."""
        r = await self.client._json("POST", f"{self._p}/files", {"path": path, "url": url})
        if "size" in r:
            return int(r["size"])
        return (await self.stat(path)).size  # the server answers a URL write with its path only

    async def list_files(self, path: str = "") -> List[FileEntry]:
        q = f"?path={quote_segment(path)}" if path else ""
        d = await self.client._json("GET", f"{self._p}/files{q}")
        return [FileEntry.from_api(e) for e in d["entries"]]

    async def stat(self, path: str) -> FileEntry:
        """A file's metadata, with its sniffed mime type."""
        return FileEntry.from_api(
            await self.client._json("GET", f"{self._p}/files/{quote_path(path)}?stat=1"))

    async def mkdir(self, path: str) -> None:
        await self.client._json("POST", f"{self._p}/mkdir", {"path": path})

    async def remove_file(self, path: str, *, recursive: bool = False) -> None:
        q = "?recursive=1" if recursive else ""
        await self.client._json("DELETE", f"{self._p}/files/{quote_path(path)}{q}")

    async def upload(self, local_path: Union[str, "os.PathLike[str]"], path: str) -> int:
        """Copies a local file into the workspace."""
        with open(local_path, "rb") as f:
            data = f.read()
        return await self.write_file(path, data)

    async def download(self, path: str, local_path: Union[str, "os.PathLike[str]"]) -> int:
        """Copies a workspace file to a local file; returns its size."""
        data = await self.read_file(path)
        with open(local_path, "wb") as f:
            f.write(data)
        return len(data)

    async def artifact(self, artifact: Union[Artifact, str]) -> bytes:
        """A file a run wrote to /workspace/output/ (an entry of result.artifacts)."""
        p = artifact.path if isinstance(artifact, Artifact) else artifact
        return await self.read_file(p)

    # ---- Python ----

    def session(self, host_functions: Optional[HostFunctions] = None) -> "PythonSession":
        """The sandbox's persistent Python session (one per sandbox on the
        server). host_functions: callables sandbox code may call."""
        s = PythonSession(self, host_functions)
        return s

    async def python(self, code: str, *, timeout: Optional[float] = None) -> ExecResult:
        """Runs code in the sandbox's Python session."""
        return await self.session().run(code, timeout=timeout)


class PythonSession:
    """A sandbox's persistent Python: variables, imports and functions stay
    from one run to the next. Host functions (llm_query, llm_query_batched,
    "tools.NAME", or any other identifier) are Python callables of this
    process, plain or async, that sandbox code calls; their return value
    (JSON) goes back to the code, an exception raises HostCallError there."""

    def __init__(self, sandbox: SandboxHandle,
                 host_functions: Optional[HostFunctions] = None) -> None:
        self.sandbox = sandbox
        self.host_functions: Dict[str, HostFunction] = dict(host_functions or {})
        _host_functions_api(self.host_functions)  # checks the names
        self._p = sandbox._p + "/python"
        self._c = sandbox.client

    def register(self, name: str, fn: HostFunction) -> None:
        """Makes fn callable from sandbox code as `name` (llm_query,
        llm_query_batched, or another identifier)."""
        _host_functions_api({name: fn})
        self.host_functions[name] = fn

    def tool(self, name: str, fn: HostFunction) -> None:
        """Makes fn callable from sandbox code as tools.NAME(**kwargs)."""
        self.register("tools." + name, fn)

    def _body(self, code: str, timeout: Optional[float], host_budget: Optional[int]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"code": code}
        if timeout is not None:
            body["timeout_s"] = timeout
        if host_budget is not None:
            body["host_budget"] = host_budget
        return body

    async def run(self, code: str, *, timeout: Optional[float] = None,
                  host_budget: Optional[int] = None) -> ExecResult:
        """Runs code; the value of a last expression is result.return_value."""
        return await self._c._run(self._p, self._body(code, timeout, host_budget),
                                  self.host_functions)

    def run_stream(self, code: str, *, timeout: Optional[float] = None,
                   host_budget: Optional[int] = None) -> AsyncIterator[Event]:
        """run with output as it comes (and host calls answered)."""
        return self._c._stream(self._p, self._body(code, timeout, host_budget),
                               self.host_functions)

    def _var(self, name: str) -> str:
        return f"{self._p}/variables/{quote_segment(name)}"

    async def set_variable(self, name: str, value: Any) -> None:
        """Sets a variable: a str is sent as text (any size up to the
        server's body limit), anything else as JSON."""
        if isinstance(value, str):
            await self._c._t.request("PUT", self._var(name), value.encode(),
                                     headers={"Content-Type": "text/plain; charset=utf-8"})
        else:
            await self._c._t.request("PUT", self._var(name), json.dumps(value).encode(),
                                     headers={"Content-Type": "application/json"})

    async def set_context(self, text: str, name: str = "context") -> None:
        """Loads a (large) text into the namespace as `name`."""
        await self.set_variable(name, text)

    async def load_variable(self, name: str, path: str) -> None:
        """Reads a workspace file as UTF-8 text into the variable, inside the sandbox."""
        await self._c._json("POST", self._var(name) + "/load", {"path": path})

    async def variable(self, name: str) -> Dict[str, Any]:
        """{"name", "type", "value", "repr"} of a variable (NotFound if none)."""
        return dict(await self._c._json("GET", self._var(name)))

    async def get_variable(self, name: str) -> Any:
        """A variable's value (JSON values; None for one that is not
        JSON-serialisable: see variable() for its repr). NotFound if none."""
        return (await self.variable(name)).get("value")

    async def variables(self) -> List[VariableInfo]:
        d = await self._c._json("GET", f"{self._p}/variables")
        return [VariableInfo(v["name"], v.get("type", ""), v.get("size")) for v in d["variables"]]

    async def list_variables(self) -> List[str]:
        """Names of the public variables."""
        return [v.name for v in await self.variables()]

    async def reset(self) -> None:
        """Clears the namespace (host functions stay)."""
        await self._c._json("POST", f"{self._p}/reset")
