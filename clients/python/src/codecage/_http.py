"""A small asyncio HTTP/1.1 client for the codecage API: keep-alive
connections over TCP or the server's Unix socket, Content-Length and chunked
bodies, and Server-Sent Events read as they arrive."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.parse
from dataclasses import dataclass
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Tuple, Union

from .errors import SandboxUnavailable, error_from_response

DEFAULT_SOCKET = "/var/lib/codecage/codecage.sock"
MAX_HEADER_BYTES = 64 * 1024
MAX_IDLE = 64  # connections kept open per client
EXPECT_FROM = 1 << 20  # bodies from this size first ask the server (Expect: 100-continue)
EXPECT_WAIT = 1.0  # seconds to wait for "100 Continue" before sending the body anyway


@dataclass(frozen=True)
class Endpoint:
    """Where the server is: a Unix socket path or a TCP host and port."""

    unix_path: Optional[str]
    host: str
    port: int

    @property
    def host_header(self) -> str:
        if self.unix_path:
            return "localhost"
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{h}:{self.port}"

    def __str__(self) -> str:
        return f"unix://{self.unix_path}" if self.unix_path else f"http://{self.host_header}"


def parse_url(url: Optional[str]) -> Endpoint:
    """url: http://HOST:PORT, unix:///path/to.sock, or a socket path; None
    reads CODECAGE_URL, then falls back to the default socket."""
    url = url or os.environ.get("CODECAGE_URL") or DEFAULT_SOCKET
    if url.startswith("/"):
        return Endpoint(url, "localhost", 0)
    u = urllib.parse.urlsplit(url)
    if u.scheme in ("unix", "http+unix"):
        path = urllib.parse.unquote(u.path if u.scheme == "unix" else u.netloc)
        if not path.startswith("/"):
            raise ValueError(f"codecage URL {url!r}: the socket path must be absolute")
        return Endpoint(path, "localhost", 0)
    if u.scheme == "http":
        if not u.hostname:
            raise ValueError(f"codecage URL {url!r} has no host")
        if u.path not in ("", "/"):
            raise ValueError(f"codecage URL {url!r}: the API is at the root, give no path")
        return Endpoint(None, u.hostname, u.port or 80)
    raise ValueError(f"codecage URL {url!r}: use http://HOST:PORT, unix:///PATH or a socket path")


def quote_segment(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def quote_path(p: str) -> str:
    """A file path, segment by segment (a '/' stays a separator)."""
    return "/".join(quote_segment(seg) for seg in p.split("/"))


class Response:
    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


class _Conn:
    __slots__ = ("reader", "writer", "reused", "body_unsent")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False
        self.body_unsent = False  # answered before its body went: not reusable

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - already gone
            pass


class _Stale(Exception):
    """A reused connection the server had closed: the request may be resent."""


Body = Union[None, bytes, Mapping[str, Any], List[Any]]


class Transport:
    """Keep-alive connections to one server, shared by all calls of a client
    on one event loop."""

    def __init__(self, endpoint: Endpoint, token: Optional[str],
                 connect_timeout: float = 10.0) -> None:
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        base = f"Host: {endpoint.host_header}\r\nUser-Agent: codecage-python/0.1\r\n"
        if token:
            if any(c in token for c in "\r\n"):
                raise ValueError("token must not contain line breaks")
            base += f"Authorization: Bearer {token}\r\n"
        self._base_headers = base
        self._idle: List[_Conn] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    async def _connect(self) -> _Conn:
        ep = self.endpoint
        try:
            if ep.unix_path:
                fut = asyncio.open_unix_connection(ep.unix_path, limit=MAX_HEADER_BYTES * 2)
            else:
                fut = asyncio.open_connection(ep.host, ep.port, limit=MAX_HEADER_BYTES * 2)
            reader, writer = await asyncio.wait_for(fut, self.connect_timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise SandboxUnavailable(f"no codecage server answers at {ep}: {e}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(reader, writer)

    async def _get_conn(self) -> _Conn:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that made them
            self._idle, self._loop = [], loop
        while self._idle:
            c = self._idle.pop()
            if c.reader.at_eof() or c.writer.is_closing():
                c.close()
                continue
            c.reused = True
            return c
        return await self._connect()

    def _put_conn(self, c: _Conn) -> None:
        if len(self._idle) < MAX_IDLE and not c.writer.is_closing():
            self._idle.append(c)
        else:
            c.close()

    def _encode(self, method: str, path: str, body: Body,
                headers: Optional[Mapping[str, str]]) -> Tuple[bytes, bytes]:
        """The request head and body. A large body is announced with
        Expect: 100-continue, so a body the server refuses by its headers
        (413) is never sent and the refusal is read cleanly."""
        data = b""
        extra = ""
        if body is not None:
            if isinstance(body, (bytes, bytearray, memoryview)):
                data = bytes(body)
            else:
                data = json.dumps(body, separators=(",", ":")).encode()
                extra += "Content-Type: application/json\r\n"
            extra += f"Content-Length: {len(data)}\r\n"
            if len(data) >= EXPECT_FROM:
                extra += "Expect: 100-continue\r\n"
        elif method in ("POST", "PUT"):
            extra += "Content-Length: 0\r\n"
        for k, v in (headers or {}).items():
            if any(c in k + v for c in "\r\n"):
                raise ValueError(f"header {k!r} contains a line break")
            extra += f"{k}: {v}\r\n"
        head = f"{method} {path} HTTP/1.1\r\n{self._base_headers}{extra}\r\n"
        if len(data) < EXPECT_FROM:
            return head.encode("latin-1") + data, b""
        return head.encode("latin-1"), data

    async def _send(self, c: _Conn, raw: Tuple[bytes, bytes]) -> Tuple[int, Dict[str, str]]:
        head, later = raw
        try:
            c.writer.write(head)
            await c.writer.drain()
            if later:
                early = await self._await_continue(c)
                if early is not None:
                    c.body_unsent = True
                    return early
                c.writer.write(later)
                await c.writer.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            if c.reused:
                raise _Stale() from e
            # A request refused by its headers (413) may be cut off: read the answer.
        try:
            line = await c.reader.readline()
        except (ConnectionResetError, BrokenPipeError) as e:
            if c.reused:
                raise _Stale() from e
            raise SandboxUnavailable(f"codecage server at {self.endpoint} cut the connection") from None
        if not line:
            if c.reused:
                raise _Stale()
            raise SandboxUnavailable(f"codecage server at {self.endpoint} closed the connection")
        return await self._read_head(c, line)

    async def _await_continue(self, c: _Conn) -> Optional[Tuple[int, Dict[str, str]]]:
        """None when the body may go (100 Continue, or no word in time);
        else the server's final answer to the head alone."""
        try:
            line = await asyncio.wait_for(c.reader.readline(), EXPECT_WAIT)
        except asyncio.TimeoutError:
            return None
        if not line:
            if c.reused:
                raise _Stale()
            raise SandboxUnavailable(f"codecage server at {self.endpoint} closed the connection")
        status, headers = await self._read_head(c, line)
        if status == 100:
            return None
        return status, headers

    async def _read_head(self, c: _Conn, line: bytes) -> Tuple[int, Dict[str, str]]:
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise SandboxUnavailable(f"{self.endpoint} does not speak HTTP: {line[:80]!r}")
        status = int(parts[1])
        headers: Dict[str, str] = {}
        total = 0
        while True:
            h = await c.reader.readline()
            total += len(h)
            if total > MAX_HEADER_BYTES:
                raise SandboxUnavailable("response headers too large")
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    async def _read_body(self, c: _Conn, headers: Dict[str, str]) -> Tuple[bytes, bool]:
        """The body and whether the connection may be reused."""
        r = c.reader
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await r.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(await r.readexactly(size))
                await r.readexactly(2)
            body = b"".join(parts)
        elif "content-length" in headers:
            body = await r.readexactly(int(headers["content-length"]))
        else:
            return await r.read(), False
        return body, headers.get("connection", "").lower() != "close"

    async def request(self, method: str, path: str, body: Body = None,
                      headers: Optional[Mapping[str, str]] = None,
                      timeout: Optional[float] = None) -> Response:
        """One request; raises the API's typed error on a status >= 400."""
        raw = self._encode(method, path, body, headers)
        for _ in range(3):
            c = await self._get_conn()
            try:
                fut = self._exchange(c, raw)
                resp = await (asyncio.wait_for(fut, timeout) if timeout else fut)
            except _Stale:
                c.close()
                continue
            except asyncio.IncompleteReadError:
                c.close()
                raise SandboxUnavailable(
                    f"codecage server at {self.endpoint} closed the connection mid-answer") from None
            except BaseException:
                c.close()
                raise
            if resp.status >= 400:
                raise error_from_response(resp.status, resp.body)
            return resp
        raise SandboxUnavailable(f"codecage server at {self.endpoint} keeps closing connections")

    async def _exchange(self, c: _Conn, raw: Tuple[bytes, bytes]) -> Response:
        status, headers = await self._send(c, raw)
        body, reusable = await self._read_body(c, headers)
        if reusable and not c.body_unsent:
            self._put_conn(c)
        else:
            c.close()
        return Response(status, headers, body)

    async def stream(self, method: str, path: str, body: Body = None) -> AsyncIterator[Tuple[str, Any]]:
        """A request answered with Server-Sent Events: yields (event, data)
        with data parsed as JSON. Leaving the iteration early closes the
        connection (which cancels the run on the server)."""
        raw = self._encode(method, path, body, {"Accept": "text/event-stream"})
        for _ in range(3):
            c = await self._get_conn()
            try:
                status, headers = await self._send(c, raw)
                break
            except _Stale:
                c.close()
            except BaseException:
                c.close()
                raise
        else:
            raise SandboxUnavailable(f"codecage server at {self.endpoint} keeps closing connections")
        try:
            if status >= 400:
                b, _ = await self._read_body(c, headers)
                raise error_from_response(status, b)
            chunked = headers.get("transfer-encoding", "").lower() == "chunked"
            async for ev in _sse_events(_lines(c.reader, chunked)):
                yield ev
        except asyncio.IncompleteReadError:
            raise SandboxUnavailable(
                f"codecage server at {self.endpoint} closed the stream mid-answer") from None
        finally:
            c.close()


async def _lines(r: asyncio.StreamReader, chunked: bool) -> AsyncIterator[bytes]:
    """The body's lines, through chunked transfer coding when used."""
    if not chunked:
        while True:
            line = await r.readline()
            if not line:
                return
            yield line
    buf = b""
    while True:
        size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            if buf:
                yield buf
            return
        buf += await r.readexactly(size)
        await r.readexactly(2)
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            yield buf[: i + 1]
            buf = buf[i + 1:]


async def _sse_events(lines: AsyncIterator[bytes]) -> AsyncIterator[Tuple[str, Any]]:
    event = "message"
    data: List[str] = []
    async for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                text = "\n".join(data)
                try:
                    value: Any = json.loads(text)
                except ValueError:
                    value = text
                yield event, value
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, val = line.partition(":")
            val = val[1:] if val.startswith(" ") else val
            if field == "event":
                event = val
            elif field == "data":
                data.append(val)
