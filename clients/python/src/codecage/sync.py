"""The blocking twin of the codecage client: the same classes and calls as
codecage.SandboxClient, without await. Each client runs the asyncio client
on a private event loop in a background thread, so it works from any thread
(several at once) and inside programs that run their own event loop."""
from __future__ import annotations

import asyncio
import os
import threading
from typing import (Any, AsyncIterator, Awaitable, Dict, Iterator, List, Mapping, Optional,
                    Sequence, TypeVar, Union)

from . import client as _a
from .client import Files, HostFunction, HostFunctions
from .errors import SandboxUnavailable
from .types import Artifact, Event, ExecResult, FileEntry, SandboxSpec, VariableInfo

T = TypeVar("T")

__all__ = ["SandboxClient", "SandboxHandle", "PythonSession", "SandboxSpec", "ExecResult",
           "SandboxUnavailable"]


class _Loop:
    """An event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="codecage-client",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a codecage.sync call from inside one of its own host functions")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self.run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                self.run(aclose())

    def close(self, final: Optional[Awaitable[Any]] = None) -> None:
        """Runs `final` (bounded: 5 s), stops the thread and closes the loop."""
        if self.loop.is_closed():
            return
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            if final is not None:
                try:
                    asyncio.run_coroutine_threadsafe(final, self.loop).result(5)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        elif final is not None and hasattr(final, "close"):
            final.close()  # never run: no "coroutine was never awaited" warning
        if not self.loop.is_running():
            self.loop.close()


class SandboxClient:
    """The codecage server, blocking. Same arguments as codecage.SandboxClient."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 connect_timeout: float = 10.0) -> None:
        self.aio = _a.SandboxClient(url, token, connect_timeout=connect_timeout)
        self.endpoint = self.aio.endpoint
        self._loop = _Loop()

    def __enter__(self) -> "SandboxClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def close(self) -> None:
        """Closes the connections and the client's loop thread."""
        if not self._loop.loop.is_closed():
            self._loop.close(self.aio.close())

    def _run(self, coro: Awaitable[T]) -> T:
        return self._loop.run(coro)

    def health(self) -> Dict[str, Any]:
        return self._run(self.aio.health())

    def pool(self) -> Dict[str, Any]:
        return self._run(self.aio.pool())

    def create(self, spec: Union[SandboxSpec, str], **fields: Any) -> "SandboxHandle":
        return SandboxHandle(self, self._run(self.aio.create(spec, **fields)))

    def get(self, name: str) -> "SandboxHandle":
        return SandboxHandle(self, self._run(self.aio.get(name)))

    def handle(self, name: str) -> "SandboxHandle":
        return SandboxHandle(self, self.aio.handle(name))

    def list(self, label: Optional[str] = None) -> List[str]:
        return self._run(self.aio.list(label))

    def sandboxes(self, label: Optional[str] = None) -> List[Dict[str, Any]]:
        return self._run(self.aio.sandboxes(label))

    def remove(self, name: str) -> None:
        self._run(self.aio.remove(name))

    def run_python(self, code: str, *, image: Optional[str] = None,
                   timeout: Optional[float] = None, files: Optional[Files] = None,
                   host_functions: Optional[HostFunctions] = None,
                   host_budget: Optional[int] = None, **spec: Any) -> ExecResult:
        return self._run(self.aio.run_python(code, image=image, timeout=timeout, files=files,
                                             host_functions=host_functions,
                                             host_budget=host_budget, **spec))

    def run_shell(self, script: str, *, image: Optional[str] = None,
                  timeout: Optional[float] = None, files: Optional[Files] = None,
                  **spec: Any) -> ExecResult:
        return self._run(self.aio.run_shell(script, image=image, timeout=timeout, files=files,
                                            **spec))

    def run(self, cmd: str, args: Optional[Sequence[str]] = None, *,
            image: Optional[str] = None, timeout: Optional[float] = None,
            files: Optional[Files] = None, **spec: Any) -> ExecResult:
        return self._run(self.aio.run(cmd, args, image=image, timeout=timeout, files=files,
                                      **spec))

    def run_python_stream(self, code: str, *, image: Optional[str] = None,
                          timeout: Optional[float] = None, files: Optional[Files] = None,
                          host_functions: Optional[HostFunctions] = None,
                          **spec: Any) -> Iterator[Event]:
        return self._loop.iterate(self.aio.run_python_stream(
            code, image=image, timeout=timeout, files=files, host_functions=host_functions,
            **spec))

    def run_shell_stream(self, script: str, *, image: Optional[str] = None,
                         timeout: Optional[float] = None, files: Optional[Files] = None,
                         **spec: Any) -> Iterator[Event]:
        return self._loop.iterate(self.aio.run_shell_stream(
            script, image=image, timeout=timeout, files=files, **spec))

    def artifact(self, run: Union[ExecResult, str], path: Union[Artifact, str]) -> bytes:
        return self._run(self.aio.artifact(run, path))


class SandboxHandle:
    """A named sandbox, blocking. See codecage.SandboxHandle."""

    def __init__(self, client: SandboxClient, aio: _a.SandboxHandle) -> None:
        self.client = client
        self.aio = aio
        self.name = aio.name
        self._run = client._run

    def __repr__(self) -> str:
        return f"<codecage.sync.SandboxHandle {self.name!r}>"

    @property
    def last_info(self) -> Optional[Dict[str, Any]]:
        return self.aio.last_info

    def info(self) -> Dict[str, Any]:
        return self._run(self.aio.info())

    def exec(self, cmd: str, args: Optional[Sequence[str]] = None, *,
             timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
             cwd: Optional[str] = None, stdin: Optional[str] = None) -> ExecResult:
        return self._run(self.aio.exec(cmd, args, timeout=timeout, env=env, cwd=cwd, stdin=stdin))

    def shell(self, script: str, *, timeout: Optional[float] = None,
              env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
              stdin: Optional[str] = None) -> ExecResult:
        return self._run(self.aio.shell(script, timeout=timeout, env=env, cwd=cwd, stdin=stdin))

    def exec_stream(self, cmd: str, args: Optional[Sequence[str]] = None, *,
                    timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, stdin: Optional[str] = None) -> Iterator[Event]:
        return self.client._loop.iterate(self.aio.exec_stream(
            cmd, args, timeout=timeout, env=env, cwd=cwd, stdin=stdin))

    def shell_stream(self, script: str, *, timeout: Optional[float] = None,
                     env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                     stdin: Optional[str] = None) -> Iterator[Event]:
        return self.client._loop.iterate(self.aio.shell_stream(
            script, timeout=timeout, env=env, cwd=cwd, stdin=stdin))

    def stop(self) -> None:
        self._run(self.aio.stop())

    def start(self) -> None:
        self._run(self.aio.start())

    def kill(self) -> None:
        self._run(self.aio.kill())

    def remove(self) -> None:
        self._run(self.aio.remove())

    def logs(self, *, tail: Optional[int] = None) -> str:
        return self._run(self.aio.logs(tail=tail))

    def write_file(self, path: str, data: Union[str, bytes]) -> int:
        return self._run(self.aio.write_file(path, data))

    def read_file(self, path: str) -> bytes:
        return self._run(self.aio.read_file(path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self._run(self.aio.read_text(path, encoding))

    def fetch_url(self, path: str, url: str) -> int:
        return self._run(self.aio.fetch_url(path, url))

    def list_files(self, path: str = "") -> List[FileEntry]:
        return self._run(self.aio.list_files(path))

    def stat(self, path: str) -> FileEntry:
        return self._run(self.aio.stat(path))

    def mkdir(self, path: str) -> None:
        self._run(self.aio.mkdir(path))

    def remove_file(self, path: str, *, recursive: bool = False) -> None:
        self._run(self.aio.remove_file(path, recursive=recursive))

    def upload(self, local_path: Union[str, "os.PathLike[str]"], path: str) -> int:
        return self._run(self.aio.upload(local_path, path))

    def download(self, path: str, local_path: Union[str, "os.PathLike[str]"]) -> int:
        return self._run(self.aio.download(path, local_path))

    def artifact(self, artifact: Union[Artifact, str]) -> bytes:
        return self._run(self.aio.artifact(artifact))

    def session(self, host_functions: Optional[HostFunctions] = None) -> "PythonSession":
        return PythonSession(self, self.aio.session(host_functions))

    def python(self, code: str, *, timeout: Optional[float] = None) -> ExecResult:
        return self._run(self.aio.python(code, timeout=timeout))


class PythonSession:
    """A sandbox's persistent Python, blocking. Host functions run on the
    client's worker threads (plain callables) or its loop (async ones)."""

    def __init__(self, sandbox: SandboxHandle, aio: _a.PythonSession) -> None:
        self.sandbox = sandbox
        self.aio = aio
        self._run = sandbox._run

    @property
    def host_functions(self) -> Dict[str, HostFunction]:
        return self.aio.host_functions

    def register(self, name: str, fn: HostFunction) -> None:
        self.aio.register(name, fn)

    def tool(self, name: str, fn: HostFunction) -> None:
        self.aio.tool(name, fn)

    def run(self, code: str, *, timeout: Optional[float] = None,
            host_budget: Optional[int] = None) -> ExecResult:
        return self._run(self.aio.run(code, timeout=timeout, host_budget=host_budget))

    def run_stream(self, code: str, *, timeout: Optional[float] = None,
                   host_budget: Optional[int] = None) -> Iterator[Event]:
        return self.sandbox.client._loop.iterate(
            self.aio.run_stream(code, timeout=timeout, host_budget=host_budget))

    def set_variable(self, name: str, value: Any) -> None:
        self._run(self.aio.set_variable(name, value))

    def set_context(self, text: str, name: str = "context") -> None:
        self._run(self.aio.set_context(text, name))

    def load_variable(self, name: str, path: str) -> None:
        self._run(self.aio.load_variable(name, path))

    def variable(self, name: str) -> Dict[str, Any]:
        return self._run(self.aio.variable(name))

    def get_variable(self, name: str) -> Any:
        return self._run(self.aio.get_variable(name))

    def variables(self) -> List[VariableInfo]:
        return self._run(self.aio.variables())

    def list_variables(self) -> List[str]:
        return self._run(self.aio.list_variables())

    def reset(self) -> None:
        self._run(self.aio.reset())
