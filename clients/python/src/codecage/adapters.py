"""Executors in the shapes other agent code already programs against, backed
by codecage sandboxes:

- TimeoutExecutor (also SandboxedPythonExecutor): `await run(code,
  timeout=, variables=)` answering an ExecutionResult dict {success, stdout,
  stderr, duration_ms, diagnostics} (a timeout-enforcing executor), with
  SandboxOptions (network, environment variables, read and write paths,
  output cap); each run is a one-shot sandbox, pooled when the options ask
  for nothing beyond the server's default policy.
- ReplExecutor: a persistent REPL (set_context, set_variable, get_variable,
  list_variables, inject_function, execute -> dict) on one named sandbox's
  Python session; injected functions (llm_query, ...) are host functions.
- CodeModeExecutor: `execute(code) -> ExecutionResult(success, output, error,
  execution_time, return_value)` for code that orchestrates tools: every
  public method of `tools_api` is `tools.NAME(**kwargs)` in the code.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from . import sync as _sync
from .client import SandboxClient
from .errors import NotFound
from .types import ExecResult


def _cut(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f"... [truncated {len(text) - limit} chars]"
    return text


def _prelude(variables: Optional[Mapping[str, Any]]) -> str:
    """Code that defines `variables` (JSON values) before the user's code."""
    if not variables:
        return ""
    blob = json.dumps(dict(variables))
    return f"import json as _cc_json\nglobals().update(_cc_json.loads({blob!r}))\ndel _cc_json\n"


# ---- a timeout-enforcing executor ---------------------------------------------


# Variables of this process that describe its own environment, not passed
# into a sandbox by enable_env_vars=True (the sandbox has its own).
_OWN_ENV = frozenset({"PATH", "HOME", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME", "TMPDIR",
                      "HOSTNAME", "SHLVL", "_", "TERM", "LD_LIBRARY_PATH", "LD_PRELOAD",
                      "PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV"})


@dataclass
class SandboxOptions:
    """What a TimeoutExecutor's runs may reach, beyond the server's defaults.

    - enable_network_access: False (no network), True (any host over
      HTTP(S): the API's network ["*"]) or the host names allowed (wildcards
      as in docs/NETWORK.md).
    - enable_env_vars: False, True (every variable of this process but
      those that describe its own environment: PATH, HOME, ...) or the names
      of this process's variables to pass in.
    - enable_read_paths / enable_write_paths: host directories mounted at
      the same path, read-only / writable; the server's `mounts_allowed`
      must admit them.
    - max_output_chars: stdout and stderr are each cut to this many
      characters with a "... [truncated N chars]" marker (0: no cut).
    """

    enable_network_access: Union[bool, Sequence[str]] = False
    enable_env_vars: Union[bool, Sequence[str]] = False
    enable_read_paths: Sequence[str] = ()
    enable_write_paths: Sequence[str] = ()
    max_output_chars: int = 32_768

    def to_spec(self) -> Dict[str, Any]:
        """The sandbox spec fields these options ask for (run_python's **spec)."""
        spec: Dict[str, Any] = {}
        net = self.enable_network_access
        if net is True:
            spec["egress"] = ["*"]
        elif net and not isinstance(net, bool):
            if isinstance(net, str):
                raise TypeError("enable_network_access must be a bool or a sequence of hosts")
            spec["egress"] = list(net)
        env = self.enable_env_vars
        if env is True:
            spec["env"] = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
        elif env and not isinstance(env, bool):
            if isinstance(env, str):
                raise TypeError("enable_env_vars must be a bool or a sequence of names")
            spec["env"] = {k: os.environ[k] for k in env if k in os.environ}
        mounts = []
        for paths, writable in ((self.enable_read_paths, False), (self.enable_write_paths, True)):
            if isinstance(paths, str):
                raise TypeError("enable_read_paths / enable_write_paths must be sequences of paths")
            for p in paths:
                a = os.path.abspath(os.fspath(p))
                mounts.append({"source": a, "target": a, "writable": writable})
        if mounts:
            spec["mounts"] = mounts
        return spec


class TimeoutExecutor:
    """`await run(code, timeout=30, variables=None)` -> ExecutionResult dict.
    The server enforces the timeout (the code is interrupted); every run is
    a fresh one-shot sandbox, so nothing leaks from one run to the next.

    options: SandboxOptions (the network, environment variables, host paths
    and output cap of the runs); **spec: further sandbox spec fields
    (memory_mib, image, ...). max_output_chars, when given, wins over
    options.max_output_chars."""

    def __init__(self, client: Optional[SandboxClient] = None, *,
                 options: Optional[SandboxOptions] = None,
                 max_output_chars: Optional[int] = None, **spec: Any) -> None:
        self.client = client or SandboxClient()
        self.options = options or SandboxOptions()
        self.max_output_chars = (self.options.max_output_chars if max_output_chars is None
                                 else max_output_chars)
        self.spec = {**self.options.to_spec(), **spec}

    async def run(self, code: str, *, timeout: float = 30,
                  variables: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        if timeout <= 0:
            raise ValueError("timeout must be greater than zero seconds")
        started = time.perf_counter()
        r = await self.client.run_python(_prelude(variables) + code, timeout=timeout, **self.spec)
        out: Dict[str, Any] = {
            "success": r.ok, "stdout": _cut(r.stdout, self.max_output_chars),
            "stderr": _cut(r.stderr, self.max_output_chars),
            "duration_ms": int((time.perf_counter() - started) * 1000), "diagnostics": None}
        if r.status == "timeout":
            out["stderr"] = f"Execution timed out after {timeout:.2f}s"
            out["diagnostics"] = {"error_type": "TIMEOUT", "timeout_seconds": timeout}
        elif r.error is not None:
            out["stderr"] = _cut(r.stderr + r.error.traceback, self.max_output_chars)
            out["diagnostics"] = {"error_type": r.error.type, "traceback": r.error.traceback}
        elif not r.ok:
            out["diagnostics"] = {"error_type": r.status.upper(), "reason": r.reason}
        return out

    async def close(self) -> None:
        await self.client.close()


SandboxedPythonExecutor = TimeoutExecutor


# ---- a persistent REPL executor -----------------------------------------------


# Helpers every REPL namespace starts with, defined in the sandbox itself.
_REPL_HELPERS = ("from traceback import format_exc\n"
                 "def safe_json_dumps(obj):\n"
                 "    import json\n"
                 "    return json.dumps(obj, default=lambda o: repr(o))\n")
_HELPER_NAMES = frozenset({"format_exc", "safe_json_dumps"})


def _cap(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f"\n... (truncated, total {len(text)} chars)"
    return text


class ReplExecutor:
    """A persistent namespace across code blocks, in one named sandbox.

    max_output_length caps stdout and stderr of each turn. allowed_imports
    is accepted for the shape of import-restricting executors and not used:
    the sandbox, not an import list, is the boundary, so every module the
    sandbox has is importable."""

    def __init__(self, client: Optional["_sync.SandboxClient"] = None, *,
                 max_output_length: int = 8192, allowed_imports: Optional[List[str]] = None,
                 name: Optional[str] = None, timeout: Optional[float] = None,
                 **spec: Any) -> None:
        self.client = client or _sync.SandboxClient()
        self._own_client = client is None
        self.max_output_length = max_output_length
        self.allowed_imports = list(allowed_imports or ())
        self.timeout = timeout
        self.sandbox = self.client.create(name or f"repl-{uuid.uuid4().hex[:12]}", **spec)
        self.session = self.sandbox.session()
        self._known: Set[str] = set()  # names present before the next execute()
        self._functions: Set[str] = set()  # injected (host) functions
        self._register_helpers()

    def _register_helpers(self) -> None:
        r = self.session.run(_REPL_HELPERS)
        if not r.ok:
            raise RuntimeError(f"the REPL helpers failed to load: {r.error or r.reason}")
        self._known |= _HELPER_NAMES

    def set_context(self, context: str, variable_name: str = "context") -> None:
        """Loads a (large) text into the namespace as `variable_name`."""
        self.session.set_context(context, variable_name)
        self._known.add(variable_name)

    def set_variable(self, name: str, value: Any) -> None:
        """Sets a variable (a str as text, anything else as JSON)."""
        self.session.set_variable(name, value)
        self._known.add(name)

    def get_variable(self, name: str) -> Optional[Any]:
        """The value, or None for an unknown variable."""
        try:
            return self.session.get_variable(name)
        except NotFound:
            return None

    def list_variables(self) -> List[str]:
        """Public names of the namespace, injected functions included."""
        return sorted(set(self.session.list_variables()) | self._functions | _HELPER_NAMES)

    def inject_function(self, name: str, func: Callable[..., Any]) -> None:
        """func becomes callable from the code as `name` (llm_query,
        llm_query_batched, FINAL, ...): a host function of this process."""
        self.session.register(name, func)
        self._functions.add(name)

    def execute(self, code: str) -> Dict[str, Any]:
        """{stdout, stderr, locals_snapshot (new names -> repr, at most 500
        characters), execution_time, success, exception}. stdout is the
        printed output, then the last expression's value (JSON, else repr)."""
        started = time.time()
        r: ExecResult = self.session.run(code, timeout=self.timeout)
        out_parts = [r.stdout]
        if r.return_value is not None:
            out_parts.append(json.dumps(r.return_value))
        elif r.return_repr is not None and r.return_repr != "None":
            out_parts.append(r.return_repr)
        err_parts = [r.stderr]
        exception = None
        if r.error is not None:
            exception = str(r.error)
            err_parts.append(r.error.traceback or exception)
        elif not r.ok:
            exception = r.reason or r.status
            err_parts.append(exception)
        new: Dict[str, str] = {}
        names = set(self.session.list_variables())
        for n in sorted(names - self._known - self._functions):
            try:
                rep = str(self.session.variable(n).get("repr", ""))
            except NotFound:
                continue
            new[n] = rep[:500] + "..." if len(rep) > 500 else rep
        self._known = names | _HELPER_NAMES
        return {"stdout": _cap("\n".join(p for p in out_parts if p), self.max_output_length),
                "stderr": _cap("\n".join(p for p in err_parts if p), self.max_output_length),
                "locals_snapshot": new, "execution_time": time.time() - started,
                "success": r.ok, "exception": exception}

    def reset(self) -> None:
        """A fresh namespace: variables and injected functions are gone, the
        helpers are back."""
        self.session.reset()
        self.session.host_functions.clear()
        self._known = set()
        self._functions = set()
        self._register_helpers()

    def close(self) -> None:
        """Removes the sandbox."""
        try:
            self.client.remove(self.sandbox.name)
        finally:
            if self._own_client:
                self.client.close()


# ---- a code-mode executor -----------------------------------------------------


@dataclass
class CodeModeResult:
    success: bool
    output: str
    error: Optional[str] = None
    execution_time: float = 0.0
    return_value: Any = None


# Each tool is a host function named _cctool_NAME (so it takes positional
# arguments too, where the built-in tools.NAME takes keywords only); one
# prelude line gathers them into `tools` and imports json.
_TOOL_PREFIX = "_cctool_"
_CODE_MODE_PRELUDE = (
    "import json; tools = __import__('types').SimpleNamespace(**{k[8:]: v for k, v in "
    "list(globals().items()) if k.startswith('_cctool_')})\n")


class CodeModeExecutor:
    """Runs code that calls `tools.NAME(...)`; each call runs the method
    NAME of tools_api in this process. The sandbox is the boundary, so the
    code is not pattern-checked: it may import and open what it likes inside.
    `json` is imported for it. A value the code stores in `__return_value__`
    is `return_value`. verbose prints each run's code and outcome."""

    def __init__(self, tools_api: Any, timeout: float = 30.0,
                 max_output_size: int = 2_000_000, verbose: bool = False, *,
                 client: Optional["_sync.SandboxClient"] = None, **spec: Any) -> None:
        self.tools_api = tools_api
        self.timeout = timeout
        self.max_output_size = max_output_size
        self.verbose = verbose
        self.client = client or _sync.SandboxClient()
        self.spec = spec

    def _tools(self) -> Dict[str, Callable[..., Any]]:
        out = {}
        for n in dir(self.tools_api):
            f = getattr(self.tools_api, n, None)
            if not n.startswith("_") and callable(f) and n.isidentifier():
                out[_TOOL_PREFIX + n] = f
        return out

    def validate_code(self, code: str) -> Tuple[bool, Optional[str]]:
        try:
            compile(code, "<code>", "exec")
            return True, None
        except SyntaxError as e:
            return False, str(e)

    def execute(self, code: str) -> CodeModeResult:
        res = self._execute(code)
        if self.verbose:
            print(f"codecage code mode: {len(code)} chars of code\n{code[:600]}")
            print(f"  -> success={res.success} in {res.execution_time:.2f}s"
                  + (f", error: {res.error}" if res.error else "")
                  + (f"\n  output: {res.output[:200]}" if res.output else ""))
        return res

    def _execute(self, code: str) -> CodeModeResult:
        started = time.time()
        ok, err = self.validate_code(code)
        if not ok:
            return CodeModeResult(False, "", f"Syntax error: {err}", time.time() - started)
        wrapped = _CODE_MODE_PRELUDE + code + "\nglobals().get('__return_value__')"
        r = self.client.run_python(wrapped, timeout=self.timeout, host_functions=self._tools(),
                                   **self.spec)
        parts = [p for p in (r.stdout.strip(), r.stderr.strip() and f"STDERR: {r.stderr.strip()}")
                 if p]
        output = "\n".join(parts)
        if len(output) > self.max_output_size:
            output = output[: self.max_output_size] + "\n... (output truncated)"
        elapsed = time.time() - started
        if r.status == "timeout":
            return CodeModeResult(False, output,
                                  f"Code execution exceeded timeout of {self.timeout} seconds",
                                  elapsed)
        if r.error is not None:
            return CodeModeResult(False, output, f"{r.error.type}: {r.error.message}", elapsed)
        if not r.ok:
            return CodeModeResult(False, output, r.reason or r.status, elapsed)
        return CodeModeResult(True, output, None, elapsed, r.return_value)


SandboxExecutor = CodeModeExecutor
