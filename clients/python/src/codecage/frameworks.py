"""Drop-in code executors for agent frameworks, each on one named codecage
sandbox's Python session (state persists across calls; the sandbox is the
boundary, so code may import anything the sandbox has):

- CodeInterpreter: DSPy's CodeInterpreter protocol (tools, start, execute,
  shutdown), for dspy.RLM and friends. SUBMIT(...) returns FinalOutput.
- PythonExecutor: smolagents' PythonExecutor (send_tools, send_variables,
  __call__ -> CodeOutput), for CodeAgent(executor=...). final_answer(...)
  ends the step with is_final_answer.
- DeepAgentsSandbox: LangChain Deep Agents' SandboxBackendProtocol (id,
  execute, upload_files, download_files and their async forms), for
  create_deep_agent(backend=...). With deepagents installed it is a
  BaseSandbox, which adds ls, read, write, edit, grep and glob on top.

No framework is imported unless installed: their own FinalOutput,
CodeExecutionError, CodeOutput, InterpreterError, ExecuteResponse,
FileUploadResponse and FileDownloadResponse are used when present,
look-alikes of the same shape otherwise. Tools are host functions: they run
in this process, their arguments and results cross as JSON.
"""
from __future__ import annotations

import asyncio
import inspect
import posixpath
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import sync as _sync
from .errors import CodecageError, Forbidden, HostFunctionError, InvalidRequest, NotFound
from .types import ExecResult

try:  # pragma: no cover - only with DSPy installed
    from dspy.primitives.code_interpreter import (  # type: ignore[import]
        CodeExecutionError, CodeInterpreterError, FinalOutput)
except Exception:  # noqa: BLE001 - DSPy absent or of another version
    class CodeInterpreterError(RuntimeError):  # type: ignore[no-redef]
        """An interpreter failure code cannot repair (the session was lost)."""

    class CodeExecutionError(CodeInterpreterError):  # type: ignore[no-redef,misc]
        """A recoverable error raised by the submitted code or a tool."""

    class FinalOutput:  # type: ignore[no-redef]
        """What execute() returns once the code called SUBMIT()."""

        def __init__(self, output: Any) -> None:
            self.output = output

        def __repr__(self) -> str:
            return f"FinalOutput({self.output!r})"

        def __eq__(self, other: object) -> bool:
            if not isinstance(other, FinalOutput):
                return NotImplemented
            return bool(self.output == other.output)

try:  # pragma: no cover - only with smolagents installed
    from smolagents.local_python_executor import (  # type: ignore[import]
        CodeOutput, InterpreterError, PythonExecutor as _SmolExecutor)
except Exception:  # noqa: BLE001
    _SmolExecutor = object
    @dataclass
    class CodeOutput:  # type: ignore[no-redef]
        output: Any
        logs: str
        is_final_answer: bool

    class InterpreterError(ValueError):  # type: ignore[no-redef]
        """The code failed: the message says where and why."""

_STOP = "the final answer was given; this run ends here"


class _Final:
    """A host function that records the final answer and stops the code."""

    def __init__(self, transform: Optional[Callable[..., Any]] = None) -> None:
        self.transform = transform
        self.given = False
        self.value: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.transform is not None:
            value = self.transform(*args, **kwargs)
        elif kwargs and not args:
            value = dict(kwargs)
        elif len(args) == 1 and not kwargs:
            value = args[0]
        else:
            value = {"args": list(args), **kwargs}
        self.given, self.value = True, value
        raise HostFunctionError(_STOP)


class _SessionBacked:
    def __init__(self, client: Optional["_sync.SandboxClient"], name: Optional[str],
                 timeout: Optional[float], spec: Mapping[str, Any]) -> None:
        self.client = client or _sync.SandboxClient()
        self._own_client = client is None
        self.name = name or f"agent-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self.spec = dict(spec)
        self.sandbox: Optional[_sync.SandboxHandle] = None
        self.session: Optional[_sync.PythonSession] = None

    def start(self) -> None:
        """Creates the sandbox (idempotent)."""
        if self.sandbox is None:
            self.sandbox = self.client.create(self.name, **self.spec)
            self.session = self.sandbox.session()

    def shutdown(self) -> None:
        """Removes the sandbox."""
        if self.sandbox is not None:
            try:
                self.client.remove(self.name)
            finally:
                self.sandbox = self.session = None
        if self._own_client:
            self.client.close()

    def _run(self, code: str, fns: Dict[str, Callable[..., Any]]) -> ExecResult:
        self.start()
        assert self.session is not None
        self.session.host_functions.clear()
        for n, f in fns.items():
            self.session.register(n, f)
        return self.session.run(code, timeout=self.timeout)


def _by_keyword(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
    """f, callable with positional arguments too: they are bound to its
    parameter names by its signature and passed as keywords (DSPy's tools
    take keyword arguments)."""
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return f
    kinds = {p.kind for p in sig.parameters.values()}
    if inspect.Parameter.VAR_POSITIONAL in kinds or inspect.Parameter.POSITIONAL_ONLY in kinds:
        return f

    def call(*args: Any, **kwargs: Any) -> Any:
        if args:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise HostFunctionError(f"{name}{sig}: {e}") from None
            kwargs = {}
            for k, v in bound.arguments.items():
                if sig.parameters[k].kind is inspect.Parameter.VAR_KEYWORD:
                    kwargs.update(v)
                else:
                    kwargs[k] = v
        return f(**kwargs)

    return call


class CodeInterpreter(_SessionBacked):
    """DSPy's CodeInterpreter on a codecage sandbox.

    output_fields (set by dspy.RLM: [{"name": ..., "type": ...}]) gives
    SUBMIT its parameters: SUBMIT(a, b) or SUBMIT(a=..., b=...) ends the
    run with FinalOutput({"a": ..., "b": ...}); without them SUBMIT(output)
    gives FinalOutput({"output": output}). Once the sandbox's Python state
    is lost (its process died or the sandbox was stopped), every execute()
    raises CodeInterpreterError: a new interpreter is needed."""

    execution_instructions = (
        "Python 3 in a Linux sandbox (codecage): state persists across steps, the standard "
        "library and the sandbox's packages are importable, the network is off unless allowed. "
        "Call SUBMIT(...) with the final outputs.")

    def __init__(self, tools: Optional[Mapping[str, Callable[..., Any]]] = None, *,
                 output_fields: Optional[List[Dict[str, Any]]] = None,
                 client: Optional["_sync.SandboxClient"] = None, name: Optional[str] = None,
                 timeout: Optional[float] = None, **spec: Any) -> None:
        super().__init__(client, name, timeout, spec)
        self._tools: Dict[str, Callable[..., Any]] = dict(tools or {})
        self.output_fields = output_fields
        self._lost: Optional[str] = None

    @property
    def tools(self) -> Dict[str, Callable[..., Any]]:
        return self._tools

    def _submit(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        names = [str(f["name"]) for f in self.output_fields or ()] or ["output"]
        sig = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                 for n in names])
        try:
            return dict(sig.bind(*args, **kwargs).arguments)
        except TypeError as e:
            raise HostFunctionError(f"SUBMIT{sig}: {e}") from None

    def execute(self, code: str, variables: Optional[Dict[str, Any]] = None) -> Any:
        compile(code, "<code>", "exec")  # a SyntaxError is raised as it is
        if self._lost is not None:
            raise CodeInterpreterError(f"the interpreter's state was lost: {self._lost}")
        self.start()
        assert self.session is not None
        for k, v in (variables or {}).items():
            self.session.set_variable(k, v)
        final = _Final(self._submit)
        tools = {n: _by_keyword(n, f) for n, f in self._tools.items()}
        r = self._run(code, {**tools, "SUBMIT": final})
        if final.given:
            return FinalOutput(final.value)
        if r.state_lost:
            self._lost = r.reason or r.status
            raise CodeInterpreterError(f"the interpreter's state was lost: {self._lost}")
        if r.error is not None:
            raise CodeExecutionError(f"{r.error.type}: {r.error.message}")
        if not r.ok:
            raise CodeExecutionError(r.reason or r.status)
        out = r.stdout + r.stderr
        return out if out else None

    def __call__(self, code: str, variables: Optional[Dict[str, Any]] = None) -> Any:
        return self.execute(code, variables)

    def __enter__(self) -> "CodeInterpreter":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


class PythonExecutor(_SessionBacked, _SmolExecutor):  # type: ignore[misc]
    """smolagents' PythonExecutor on a codecage sandbox."""

    def __init__(self, additional_authorized_imports: Any = None, *,
                 client: Optional["_sync.SandboxClient"] = None, name: Optional[str] = None,
                 timeout: Optional[float] = None, **spec: Any) -> None:
        # imports are not restricted: the sandbox, not an import list, is the boundary
        super().__init__(client, name, timeout, spec)
        self.custom_tools: Dict[str, Callable[..., Any]] = {}

    def send_tools(self, tools: Mapping[str, Callable[..., Any]]) -> None:
        self.custom_tools.update(tools)

    def send_variables(self, variables: Mapping[str, Any]) -> None:
        self.start()
        assert self.session is not None
        for k, v in variables.items():
            self.session.set_variable(k, v)

    def __call__(self, code_action: str) -> CodeOutput:
        tools = dict(self.custom_tools)
        final = _Final(tools.pop("final_answer", None))
        r = self._run(code_action, {**tools, "final_answer": final})
        logs = r.stdout + r.stderr
        if final.given:
            return CodeOutput(output=final.value, logs=logs, is_final_answer=True)
        if r.error is not None:
            raise InterpreterError(f"Code execution failed due to: {r.error.type}: "
                                   f"{r.error.message}\n{logs}")
        if not r.ok:
            raise InterpreterError(f"Code execution failed: {r.reason or r.status}\n{logs}")
        out = r.return_value if r.return_value is not None else r.return_repr
        return CodeOutput(output=out, logs=logs, is_final_answer=False)

    def cleanup(self) -> None:
        self.shutdown()


# ---- LangChain Deep Agents ------------------------------------------------------

try:  # pragma: no cover - only with deepagents installed
    from deepagents.backends.protocol import (  # type: ignore[import]
        ExecuteResponse, FileDownloadResponse, FileUploadResponse)
    from deepagents.backends.sandbox import BaseSandbox as _SandboxBase  # type: ignore[import]
except Exception:  # noqa: BLE001 - deepagents absent or of another version
    @dataclass
    class ExecuteResponse:  # type: ignore[no-redef]
        """Result of execute(): stdout and stderr combined, for a model to read."""

        output: str
        exit_code: Optional[int] = None
        truncated: bool = False

    @dataclass
    class FileDownloadResponse:  # type: ignore[no-redef]
        """One file of download_files(): content, or an error for that file alone."""

        path: str
        content: Optional[bytes] = None
        error: Optional[str] = None

    @dataclass
    class FileUploadResponse:  # type: ignore[no-redef]
        """One file of upload_files(): error None on success."""

        path: str
        error: Optional[str] = None

    _SandboxBase = object

WORKSPACE = "/workspace"
_XFER = ".codecage-xfer"  # workspace folder for files copied to or from other paths

# Files outside /workspace are moved through the workspace by a shell in the
# sandbox: $1 is the path asked for, $2 the workspace copy. A failure prints
# one of the protocol's error codes.
_FETCH_SH = ('[ -e "$1" ] || { echo file_not_found; exit 3; }; '
             '[ -d "$1" ] && { echo is_directory; exit 3; }; '
             '[ -r "$1" ] || { echo permission_denied; exit 3; }; '
             'mkdir -p "${2%/*}" && cp -- "$1" "$2"')
_PLACE_SH = ('[ -d "$1" ] && { rm -f -- "$2"; echo is_directory; exit 3; }; '
             'mkdir -p -- "${1%/*}" 2>/dev/null && mv -f -- "$2" "$1" 2>/dev/null && exit 0; '
             'rm -f -- "$2"; echo permission_denied; exit 3')
_CODES = ("file_not_found", "permission_denied", "is_directory", "invalid_path")


def _file_error(e: CodecageError) -> str:
    """The protocol's error code for a failed file call (else the server's message)."""
    msg = e.message.lower()
    if "is a directory" in msg:
        return "is_directory"
    if isinstance(e, NotFound) or "no such file" in msg:
        return "file_not_found"
    if isinstance(e, Forbidden) or "permission" in msg or "read-only" in msg:
        return "permission_denied"
    if isinstance(e, InvalidRequest):
        return "invalid_path"
    return e.message


class DeepAgentsSandbox(_SandboxBase):  # type: ignore[misc]
    """Deep Agents' sandbox backend on a named codecage sandbox.

    sandbox: an existing codecage.sync.SandboxHandle to use (kept by
    close()); without it one is created, named `name` or agent-<random>,
    with **spec, and close() removes it. timeout: the default of execute()
    in seconds (None: the sandbox's own timeout_s). Paths are absolute;
    those under /workspace go straight through the files API, others are
    copied through the workspace by a shell in the sandbox.
    """

    def __init__(self, sandbox: Optional["_sync.SandboxHandle"] = None, *,
                 client: Optional["_sync.SandboxClient"] = None, name: Optional[str] = None,
                 timeout: Optional[float] = None, **spec: Any) -> None:
        if sandbox is not None and (client is not None or name is not None or spec):
            raise TypeError("give either a sandbox handle or client/name/spec to create one")
        self._own_client = sandbox is None and client is None
        self._own_sandbox = sandbox is None
        if sandbox is None:
            self.client = client or _sync.SandboxClient()
            sandbox = self.client.create(name or f"agent-{uuid.uuid4().hex[:12]}", **spec)
        else:
            self.client = sandbox.client
        self.sandbox: _sync.SandboxHandle = sandbox
        self.default_timeout = timeout

    @property
    def id(self) -> str:
        """The sandbox's name."""
        return self.sandbox.name

    # ---- execute ----

    def execute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
        """Runs command with /bin/sh -c in /workspace. timeout in seconds;
        None or 0: the backend's default."""
        t = timeout if timeout else self.default_timeout
        r = self.sandbox.shell(command, timeout=t)
        out = r.stdout
        if r.stderr:
            out += r.stderr if not out or out.endswith("\n") else "\n" + r.stderr
        if r.status not in ("ok", "error"):  # timeout, oom, output_limit, cancelled, ...
            note = f"[codecage: {r.status}" + (f": {r.reason}]" if r.reason else "]")
            out += note if not out or out.endswith("\n") else "\n" + note
        return ExecuteResponse(output=out, exit_code=r.exit_code, truncated=r.truncated)

    async def aexecute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
        return await asyncio.to_thread(self.execute, command, timeout=timeout)

    # ---- files ----

    @staticmethod
    def _in_workspace(path: str) -> Optional[str]:
        """The workspace-relative path, or None for a path outside it."""
        norm = posixpath.normpath(path)
        if norm == WORKSPACE:
            return ""
        if norm.startswith(WORKSPACE + "/"):
            return norm[len(WORKSPACE) + 1:]
        return None

    def _xfer_path(self) -> str:
        return f"{_XFER}/{uuid.uuid4().hex}"

    def _upload_one(self, path: str, content: bytes) -> FileUploadResponse:
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            return FileUploadResponse(path=path, error="invalid_path")
        rel = self._in_workspace(path)
        try:
            if rel is not None:
                if rel == "":
                    return FileUploadResponse(path=path, error="is_directory")
                self.sandbox.write_file(rel, content)
                return FileUploadResponse(path=path, error=None)
            tmp = self._xfer_path()
            self.sandbox.write_file(tmp, content)
            r = self.sandbox.exec("/bin/sh", ["-c", _PLACE_SH, "sh", posixpath.normpath(path),
                                              f"{WORKSPACE}/{tmp}"])
            if r.exit_code == 0:
                return FileUploadResponse(path=path, error=None)
            code = r.stdout.strip()
            return FileUploadResponse(path=path, error=code if code in _CODES else r.output.strip())
        except CodecageError as e:
            return FileUploadResponse(path=path, error=_file_error(e))

    def _download_one(self, path: str) -> FileDownloadResponse:
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            return FileDownloadResponse(path=path, content=None, error="invalid_path")
        rel = self._in_workspace(path)
        try:
            if rel is not None:
                if rel == "":
                    return FileDownloadResponse(path=path, content=None, error="is_directory")
                return FileDownloadResponse(path=path, content=self.sandbox.read_file(rel))
            tmp = self._xfer_path()
            r = self.sandbox.exec("/bin/sh", ["-c", _FETCH_SH, "sh", posixpath.normpath(path),
                                              f"{WORKSPACE}/{tmp}"])
            if r.exit_code != 0:
                code = r.stdout.strip()
                return FileDownloadResponse(path=path, content=None,
                                            error=code if code in _CODES else r.output.strip())
            try:
                return FileDownloadResponse(path=path, content=self.sandbox.read_file(tmp))
            finally:
                self.sandbox.remove_file(tmp)
        except CodecageError as e:
            return FileDownloadResponse(path=path, content=None, error=_file_error(e))

    def upload_files(self, files: List[Tuple[str, bytes]]) -> List[FileUploadResponse]:
        """Writes each (absolute path, bytes), creating parents; one response
        per file, in order: a file that fails does not stop the others."""
        return [self._upload_one(p, c) for p, c in files]

    def download_files(self, paths: List[str]) -> List[FileDownloadResponse]:
        """Reads each absolute path; one response per path, in order, with
        content or an error (file_not_found, is_directory, permission_denied,
        invalid_path, or the server's message)."""
        return [self._download_one(p) for p in paths]

    async def aupload_files(self, files: List[Tuple[str, bytes]]) -> List[FileUploadResponse]:
        return await asyncio.to_thread(self.upload_files, files)

    async def adownload_files(self, paths: List[str]) -> List[FileDownloadResponse]:
        return await asyncio.to_thread(self.download_files, paths)

    # ---- lifecycle ----

    def close(self) -> None:
        """Removes the sandbox if this object created it."""
        try:
            if self._own_sandbox:
                self.client.remove(self.sandbox.name)
        finally:
            if self._own_client:
                self.client.close()

    def __enter__(self) -> "DeepAgentsSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
