"""codecage's Python session driver: one persistent Python namespace in a sandbox.

This is the only code of codecage that runs inside the sandbox as the user.
The server starts `python3 -I -c <a bootstrap>` with fd 3 as the session
channel; the bootstrap reads this driver from the channel (as bytecode compiled
at build time when the interpreter's MAGIC_NUMBER matches, else as this text)
and runs it as __main__. The server then speaks docs/SESSION-PROTOCOL.md over
the channel: the driver runs code in
one namespace, moves variables in and out of it, and relays the code's host
calls (llm_query, tools, ...) to the server.

It trusts nothing from the user code. The code may define any name, replace or
close sys.stdout, start threads and processes, raise anything, return objects
whose __repr__ or __len__ misbehave: the driver keeps its own state out of the
namespace, never lets the channel reach child processes, catches what the code
throws at it and bounds everything it sends. It is not a security boundary
(the sandbox is); it only keeps honest mistakes from breaking the session.
"""
# Only modules that are cheap to load: an idle session's memory is mostly
# what its imports cost. `_ast` and `_thread` are the built-in halves of
# `ast` and `threading`; `_json` is the C half of `json` (whose Python half
# loads `re`); the channel is a plain fd (no `socket`); `traceback` and
# `linecache` load on the first error.
import _ast
import _json
import _signal as signal  # the C module: `signal` loads enum, functools, ...
import _thread
import builtins
import keyword
import os
import select
import struct
import sys
import time
import types

CHANNEL_FD = 3
HEADER = struct.Struct(">II")  # json_len, blob_len
JSON_MAX = 16 << 20  # a frame's JSON, both ways
BLOB_MAX = 1 << 30  # a frame's blob
VALUE_MAX = 8 << 20  # the JSON of a `get` value; of a `variables` list
RETURN_MAX = 1 << 20  # the most a run's `return_max` may ask for
TEXT_MAX = 65536  # `get` reprs, error messages, tracebacks
NAME_MAX = 256  # type names
IMAGES_MAX = 16  # figures of one run sent back as PNG
IMAGES_TEXT_MAX = 8 << 20  # their base64 text, in all (a frame holds 16 MiB of JSON)
CO_COROUTINE = 0x80  # inspect.CO_COROUTINE, without importing inspect
COMPILE_FLAGS = _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


class _DecodeOptions:
    """What _json's scanner reads: json.JSONDecoder()'s defaults, strict."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_refuse_constant)
    memo = {}


_SCAN = _json.make_scanner(_DecodeOptions())


def _refuse(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode, in C: ASCII
# text for frames, UTF-8 text for values (no escapes: a surrogate code point
# then fails to encode instead of becoming an escape the server refuses).
# The encoders share MARKERS, their cycle check, which an encoding that
# fails leaves dirty.
_MARKERS = {}
_ENCODER = _json.make_encoder(_MARKERS, _refuse, _json.encode_basestring_ascii, None, ":", ",",
                              False, False, False)
_VALUE_ENCODER = _json.make_encoder(_MARKERS, _refuse, _json.encode_basestring, None, ":", ",",
                                    False, False, False)


def _encode(value, encoder, encode_str):
    if isinstance(value, str):
        return encode_str(value)
    try:
        return "".join(encoder(value, 0))
    except BaseException:
        _MARKERS.clear()
        raise


def ENCODE(value):
    return _encode(value, _ENCODER, _json.encode_basestring_ascii)


def DECODE(text):
    """json.loads(text) for a whole document; ValueError otherwise."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration as stop:
        raise ValueError(f"not JSON at {stop.value}") from None
    except Exception as exc:  # _json reports some errors through json.decoder
        raise ValueError(f"not JSON: {exc}") from None
    if end != len(text):
        raise ValueError(f"extra data at {end}")
    return value

DRIVER_GLOBALS = globals()
MAIN_THREAD = _thread.get_ident()
SOURCES = {}  # cell file name -> source lines, for tracebacks (see cell_sources)
SOURCES_KEPT = 1000  # the cells whose lines tracebacks can still show
STREAMS = (sys.stdout, sys.stderr)  # the real ones, whatever the code does to sys


class BadRequest(Exception):
    """A request with a missing or mistyped field."""


class HostCallError(Exception):
    """The host answered a host call with an error."""


class HostCallBudgetExceeded(RuntimeError):
    """The code made more host calls than its run allows."""


# ---- process ----


def flush_streams():
    """Flushes sys.stdout/sys.stderr, whatever the code made of them, and the real ones."""
    for stream in (getattr(sys, "stdout", None), getattr(sys, "stderr", None), *STREAMS):
        try:
            stream.flush()
        except Exception:
            pass


def exit_driver(code):
    flush_streams()
    os._exit(code)


def protocol_error(reason):
    """The server broke the protocol: say why on stderr and end the session."""
    os.write(2, f"codecage session driver: protocol error: {reason}\n".encode())
    exit_driver(2)


# ---- the channel ----


class Channel:
    """The framed channel to the server (docs/SESSION-PROTOCOL.md, "Frames")."""

    def __init__(self, fd):
        os.set_inheritable(fd, False)
        self.fd = fd
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN)

    def send(self, text):
        """Sends one frame whose JSON is text: ENCODE's (ASCII) with at most
        a value of checked_json's (UTF-8) in it."""
        data = text.encode()
        with memoryview(HEADER.pack(len(data), 0) + data) as view:
            sent = 0
            while sent < len(view):
                try:
                    sent += os.write(self.fd, view[sent:])
                except OSError:
                    exit_driver(0)  # the server has gone

    def wait(self):
        """Blocks until something is readable."""
        self.poller.poll()

    def recv(self):
        """Reads the next frame up to its blob: (message, blob_len). The caller
        reads or skips the blob."""
        json_len, blob_len = HEADER.unpack(self.read(HEADER.size, at_boundary=True))
        if not 1 <= json_len <= JSON_MAX or blob_len > BLOB_MAX:
            protocol_error(f"frame out of bounds (json_len {json_len}, blob_len {blob_len})")
        data = self.read(json_len)
        # The server nests values at most VALUE_DEPTH_MAX deep; the code may
        # be deep in its own recursion (a host call from a recursive function).
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(limit + VALUE_DEPTH_MAX + 64)
        try:
            msg = DECODE(data.decode())
        except (ValueError, RecursionError):
            protocol_error("a frame's JSON does not parse")
        finally:
            sys.setrecursionlimit(limit)
        if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
            protocol_error("a frame's JSON is not an object with an op")
        return msg, blob_len

    def read(self, size, at_boundary=False):
        """Reads exactly size bytes into one preallocated buffer. EOF ends the
        driver: quietly between frames, as a protocol error inside one."""
        buf = bytearray(size)
        got = 0
        with memoryview(buf) as view:
            while got < size:
                try:
                    n = os.readv(self.fd, [view[got:]])
                except OSError:
                    n = 0
                if n == 0:
                    if at_boundary and got == 0:
                        exit_driver(0)
                    protocol_error("the channel closed inside a frame")
                got += n
        return buf

    def skip(self, size):
        """Reads and drops a blob the op does not take."""
        while size:
            size -= len(self.read(min(size, 1 << 20)))


# ---- values ----


def with_raw(frame, key, raw):
    """ENCODE(frame) with key set to raw, text that is JSON already."""
    return f'{ENCODE(frame)[:-1]},"{key}":{raw}}}'


def type_name(value):
    return type(value).__name__[:NAME_MAX]


# ---- what the server reads ----
#
# The server reads frames with jansson: integers are signed 64-bit, a string
# is UTF-8 (no surrogate code points) and may hold NUL except as an object
# key, nesting stops at 2048. A value's JSON crosses only when the server
# reads back the very value the code has; anything else would be changed on
# the way or end the session. VALUE_DEPTH_MAX also keeps a value readable by
# JSON readers that recurse (Python's json stops near 1000).

INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1
VALUE_DEPTH_MAX = 512
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")  # only the depth matters
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')


def _int_within(text):
    number = int(text)
    if not INT_MIN <= number <= INT_MAX:
        raise ValueError("an integer beyond 64 bits")
    return number


def _keys_without_nul(pairs):
    for key, _ in pairs:
        if "\0" in key:
            raise ValueError("an object key with a NUL character")


class _CheckOptions(_DecodeOptions):
    parse_int = staticmethod(_int_within)
    object_pairs_hook = staticmethod(_keys_without_nul)


_CHECK_SCAN = _json.make_scanner(_CheckOptions())


def brackets_of(data):
    """The brackets of JSON data (bytes) outside its strings, each "(" or
    ")". Every backslash starts an escape: dropping the escaped backslashes,
    then the escaped quotes, leaves quotes that only delimit strings; two
    adjacent ones (once all but quotes and brackets are gone) hold no
    bracket between them."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = data.translate(_BRACKETS, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in kept:
        kept = b"".join(kept.split(b'"')[::2])
    return kept


def deeper_than(brackets, limit):
    """Whether balanced brackets nest deeper than limit: each pass drops
    the innermost level."""
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"()", b"")
    return bool(brackets)


def unreadable(text, data):
    """Why the server would not read text (VALUE_ENCODER's; data is its
    UTF-8) as the value it encodes; None when it would."""
    if deeper_than(brackets_of(data), VALUE_DEPTH_MAX):
        return f"nested more than {VALUE_DEPTH_MAX} deep"
    # An integer beyond 64 bits has at least 19 digits (so may a fraction
    # or a string): only then is the text scanned.
    if b"0" * 19 in data.translate(_DIGITS) or "\\u0000" in text:
        try:
            _CHECK_SCAN(text, 0)
        except ValueError as exc:
            return str(exc)
        except RecursionError:
            return f"nested more than {VALUE_DEPTH_MAX} deep"
    return None


class TooLarge(ValueError):
    """A value's JSON is longer than allowed."""


def checked_json(value, limit):
    """value's JSON when the server reads it back as value and it takes at
    most limit bytes of UTF-8. TooLarge, or ValueError saying why the server
    would not read it so; TypeError (or RecursionError) when it has no JSON."""
    text = _encode(value, _VALUE_ENCODER, _json.encode_basestring)
    if len(text) > limit:
        raise TooLarge(f"more than {limit} bytes of JSON")
    try:
        data = text.encode()
    except UnicodeEncodeError:
        raise ValueError("a string with a surrogate code point (not UTF-8)") from None
    if len(data) > limit:
        raise TooLarge(f"more than {limit} bytes of JSON")
    why = unreadable(text, data)
    if why is not None:
        raise ValueError(why)
    return text


def to_json(value, limit):
    """value's JSON if the server reads it back as value and it is at most
    limit bytes of UTF-8, else None."""
    if type(value) is str and len(value) > limit:
        return None  # its JSON is longer still: do not build it
    try:
        return checked_json(value, limit)
    except Exception:
        return None


def readable_text(text):
    """text with each surrogate code point (which has no UTF-8) spelled as
    its escape: for the text that describes a value or an error."""
    if text.isascii():
        return text
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()


def cut_utf8(text, limit):
    """text cut to at most limit bytes of UTF-8, on a character boundary."""
    if len(text) <= limit // 4:
        return text
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def capped_repr(value, limit):
    """repr(value) cut to limit bytes of UTF-8; huge strings are not copied whole."""
    if type(value) in (str, bytes, bytearray) and len(value) > limit:
        value = value[:limit]
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr() failed: {type_name(exc)}>"
    return cut_utf8(readable_text(text[:limit]), limit)


def describe(value, limit):
    """A run's (return_value JSON, return_repr): the JSON if value has one within
    limit, else null and the repr cut to limit."""
    text = to_json(value, limit)
    if text is not None:
        return text, None
    return "null", capped_repr(value, limit)


def size_of(value):
    """len(value) where it works, else sys.getsizeof(value)."""
    try:
        return len(value)
    except Exception:
        pass
    try:
        return sys.getsizeof(value)
    except Exception:
        return 0


# ---- errors ----


def user_traceback(tb, from_cell):
    """tb without the driver's frames. from_cell also drops every frame above
    the first one of a cell (the driver's, asyncio's that ran the cell)."""
    kept = []
    while tb is not None:
        frame = tb.tb_frame
        above = from_cell and not kept and not frame.f_code.co_filename.startswith("<cell-")
        if not above and frame.f_globals is not DRIVER_GLOBALS:
            kept.append(tb)
        tb = tb.tb_next
    result = None
    for old in reversed(kept):
        result = types.TracebackType(result, old.tb_frame, old.tb_lasti, old.tb_lineno)
    return result


def format_error(exc):
    """The traceback text of exc and the exceptions chained to it, user frames only."""
    seen = set()
    chained = exc
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = user_traceback(chained.__traceback__, chained is exc)
        chained = chained.__cause__ or chained.__context__
    import traceback

    cell_sources()
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def cell_sources():
    """Puts the cells' source into linecache, where tracebacks find it.
    Done when linecache is loaded anyway (an error, or code that imports it)."""
    import linecache

    for filename, lines in SOURCES.items():
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def error_info(exc):
    """The `error` object of a `done` for exc."""
    try:
        message = str(exc)
    except Exception:
        message = "<str() of the exception failed>"
    try:
        text = format_error(exc)
    except Exception:
        text = f"{type_name(exc)}: {message}\n"
    return {
        "type": type_name(exc),
        "message": readable_text(message[:TEXT_MAX]),
        "traceback": readable_text(text[-TEXT_MAX:]),
    }


def exit_code_of(exc):
    """The exit status `python3` running the code as a script would end with:
    0 without an uncaught exception, n & 0xff for SystemExit(n), 0 for
    SystemExit() / SystemExit(None), 1 for any other uncaught exception or a
    SystemExit with a message."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
    return 1


def figures():
    """The open matplotlib figures as PNG (base64 text), then closed: what a
    notebook shows at the end of a cell. Nothing when the code never
    imported pyplot; at most IMAGES_MAX images and IMAGES_TEXT_MAX of text."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    images, total = [], 0
    try:
        import base64
        import io

        for num in plt.get_fignums()[:IMAGES_MAX]:
            buf = io.BytesIO()
            plt.figure(num).savefig(buf, format="png")
            text = base64.b64encode(buf.getvalue()).decode("ascii")
            if total + len(text) > IMAGES_TEXT_MAX:
                break
            images.append(text)
            total += len(text)
        plt.close("all")
    except Exception:
        pass
    return images


def done_frame(value_json, value_repr, error, duration_ms, host_calls, exit_code=None,
               images=()):
    frame = {
        "op": "done",
        "status": "ok" if error is None else "error",
        "exit_code": exit_code,
        "return_repr": value_repr,
        "error": error,
        "duration_ms": round(duration_ms, 3),
        "host_calls": host_calls,
    }
    if images:
        frame["images"] = list(images)
    return with_raw(frame, "return_value", value_json)


def error_frame(exc_type, message):
    return ENCODE({"op": "error", "type": exc_type, "message": readable_text(message[:TEXT_MAX])})


# ---- requests ----

REQUIRED = object()


def field(msg, key, kind, default=REQUIRED):
    value = msg.get(key, default)
    if value is REQUIRED:
        raise BadRequest(f"{msg['op']}: missing field {key!r}")
    if value is default:
        return value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"{msg['op']}: field {key!r} must be a {kind.__name__}")
    return value


def run_env(env):
    """A run's `env`: names and values that os.environ takes."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or type(value) is not str or "\0" in value:
            raise BadRequest(f"run: env {name[:NAME_MAX]!r} must be a name with a string value")
    return env


def restore_env(saved):
    """Puts back what a run's `env` replaced (None: it was unset)."""
    for name, value in saved.items():
        try:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        except Exception:
            pass


def count(msg, key, default):
    value = field(msg, key, int, default)
    if value < 0:
        raise BadRequest(f"{msg['op']}: field {key!r} must not be negative")
    return value


def identifier(name):
    if not name.isidentifier() or keyword.iskeyword(name):
        raise BadRequest(f"{name[:NAME_MAX]!r} is not a Python identifier")
    return name


def compile_cell(source, filename):
    """(body, last): code for the statements and, when the cell ends with an
    expression, code for its value (else None). Parses once."""
    tree = compile(source, filename, "exec", _ast.PyCF_ONLY_AST | COMPILE_FLAGS)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = compile(_ast.Expression(tree.body.pop().value), filename, "eval", COMPILE_FLAGS)
    body = compile(tree, filename, "exec", COMPILE_FLAGS) if tree.body else None
    return body, last


def awaits(code):
    return code is not None and code.co_flags & CO_COROUTINE


async def run_async(body, last, ns):
    """Runs a cell that awaits: both parts in one event loop."""
    if body is not None:
        pending = eval(body, ns)
        if awaits(body):
            await pending
    if last is None:
        return None
    value = eval(last, ns)
    return await value if awaits(last) else value


def execute(body, last, ns):
    """Runs a compiled cell; returns the value of its last expression."""
    if awaits(body) or awaits(last):
        import asyncio

        return asyncio.run(run_async(body, last, ns))
    if body is not None:
        exec(body, ns)
    return None if last is None else eval(last, ns)


# ---- host objects ----


class Tools:
    """The host's tools: tools.<name>(**kwargs) calls one, tools.list() names them."""

    __slots__ = ("_call",)

    def __init__(self, call):
        self._call = call

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        call, fn = self._call, "tools." + name

        def tool(**kwargs):
            return call(fn, [], kwargs)

        tool.__name__ = tool.__qualname__ = name
        return tool

    def __repr__(self):
        return "<host tools: tools.list() names them>"


def host_function(call, fn):
    """A callable that makes host call fn with its arguments."""

    def function(*args, **kwargs):
        return call(fn, list(args), kwargs)

    function.__name__ = function.__qualname__ = fn
    function.__doc__ = f"Calls the host function {fn!r}."
    return function


def host_objects(call):
    """What the namespace starts with besides __name__ and __builtins__."""

    def llm_query(prompt, **kwargs):
        """Asks the host's language model; returns its answer."""
        return call("llm_query", [prompt], kwargs)

    def llm_query_batched(prompts, **kwargs):
        """Asks the host's language model each prompt; returns the answers in order."""
        return call("llm_query_batched", [list(prompts)], kwargs)

    llm_query.__qualname__ = "llm_query"
    llm_query_batched.__qualname__ = "llm_query_batched"
    return {
        "llm_query": llm_query,
        "llm_query_batched": llm_query_batched,
        "tools": Tools(call),
        "HostCallError": HostCallError,
        "HostCallBudgetExceeded": HostCallBudgetExceeded,
    }


# ---- the session ----


class Session:
    """The namespace, its runs, and the host calls the code makes.

    SIGINT raises KeyboardInterrupt only while the main thread runs user code
    (`interruptible`); anywhere else (idle, reading or writing a frame) it is
    only noted (`pending`), and raised when a host call returns to the code.
    """

    def __init__(self, channel):
        self.channel = channel
        self.lock = _thread.allocate_lock()  # the channel while a run goes on; running, calls
        self.running = False
        self.budget = self.calls = self.runs = 0
        self.next_id = 1
        self.abandoned = set()  # ids of host calls a KeyboardInterrupt gave up on
        self.interruptible = self.pending = False
        self.sigint = self.on_sigint  # one bound method, to recognise it later
        self.module = types.ModuleType("__main__")
        self.ns = self.module.__dict__
        self.host = host_objects(self.host_call)
        self.handlers = {
            "run": self.run,
            "set": self.set,
            "load_file": self.load_file,
            "get": self.get,
            "list": self.variables,
            "reset": self.reset,
            "host_reply": self.stray_reply,
            "ping": lambda msg: '{"op":"pong"}',
        }

    def serve(self):
        signal.signal(signal.SIGINT, self.sigint)
        self.reset(None)
        version = "%d.%d.%d" % sys.version_info[:3]
        self.channel.send(ENCODE({"op": "ready", "python": version, "pid": os.getpid()}))
        while True:
            msg, blob_len = self.channel.recv()
            reply = self.dispatch(msg, blob_len)
            if reply is not None:
                self.channel.send(reply)

    def dispatch(self, msg, blob_len):
        op = msg["op"]
        try:
            if op == "set_text":
                return self.set_text(msg, blob_len)
            self.channel.skip(blob_len)
            handler = self.handlers.get(op)
            if handler is None:
                raise BadRequest(f"unknown op {op[:NAME_MAX]!r}")
            return handler(msg)
        except BadRequest as exc:
            if op == "run":
                error = {"type": "BadRequest", "message": str(exc), "traceback": ""}
                return done_frame("null", None, error, 0.0, 0)
            return error_frame("BadRequest", str(exc))

    # -- signals --

    def on_sigint(self, signum, frame):
        if self.interruptible:
            raise KeyboardInterrupt
        self.pending = True

    def resume_user(self):
        """The main thread goes back to user code: a SIGINT noted meanwhile is raised now."""
        self.interruptible = True
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    # -- run --

    def run(self, msg):
        code = field(msg, "code", str)
        env = run_env(field(msg, "env", dict, {}))
        return_max = min(count(msg, "return_max", 65536), RETURN_MAX)
        budget = count(msg, "host_budget", 100)
        self.runs += 1
        filename = f"<cell-{count(msg, 'cell', self.runs)}>"
        for name in field(msg, "functions", list, ()):
            self.register(name)
        SOURCES[filename] = code.splitlines(True)
        while len(SOURCES) > SOURCES_KEPT:
            del SOURCES[next(iter(SOURCES))]
        if "linecache" in sys.modules:  # the code may format tracebacks itself
            lines = SOURCES[filename]
            sys.modules["linecache"].cache[filename] = (len(code), None, lines, filename)
        with self.lock:
            self.running, self.calls, self.budget = True, 0, budget
        start = time.perf_counter()
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            body, last = compile_cell(code, filename)
            self.pending, self.interruptible = False, True
            value = execute(body, last, self.ns)
            value_json, value_repr = describe(value, return_max)
            self.interruptible = False
            error, exit_code = None, 0
        except BaseException as exc:
            self.interruptible = False
            value_json, value_repr, error = "null", None, error_info(exc)
            exit_code = exit_code_of(exc)
        duration_ms = (time.perf_counter() - start) * 1000
        restore_env(saved)
        with self.lock:  # waits for a host call a thread of the code still has going
            self.running = False
        if signal.getsignal(signal.SIGINT) is not self.sigint:
            signal.signal(signal.SIGINT, self.sigint)
        flush_streams()
        images = figures()
        return done_frame(value_json, value_repr, error, duration_ms, self.calls, exit_code,
                          images)

    def register(self, name):
        """Installs a host function the server names in a run."""
        if not isinstance(name, str):
            raise BadRequest("run: functions must be names")
        if name not in self.host:
            self.host[name] = host_function(self.host_call, identifier(name))
        self.ns[name] = self.host[name]

    # -- host calls --

    def host_call(self, fn, args, kwargs):
        """Makes one host call and returns its value. Threads take turns; only
        the main thread can be interrupted while it waits."""
        main = _thread.get_ident() == MAIN_THREAD
        with self.lock:
            call_id, text = self.prepare_call(fn, args, kwargs)
            if main:
                self.interruptible = False
            try:
                self.channel.send(text)
                reply = self.await_reply(call_id, main)
            finally:
                if main:
                    self.resume_user()
        error = reply.get("error")
        if error is not None:
            raise HostCallError(str(error))
        return reply.get("value")

    def prepare_call(self, fn, args, kwargs):
        """Checks a host call against the run and its budget: (id, frame text)."""
        if not self.running:
            raise RuntimeError(f"{fn}: host calls are only possible while a run is going on")
        if self.calls >= self.budget:
            raise HostCallBudgetExceeded(
                f"host call budget of {self.budget} calls for this run is spent"
            )
        if "\0" in fn:
            raise ValueError(f"{fn!r}: a host function's name cannot hold NUL")
        frame = {"op": "host_call", "id": self.next_id, "fn": fn, "args": args, "kwargs": kwargs}
        try:
            text = checked_json(frame, JSON_MAX)
        except TooLarge:
            raise ValueError(
                f"{fn}: the arguments take more than {JSON_MAX} bytes of JSON") from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"{fn}: the arguments must be JSON-serialisable: {exc}") from None
        self.next_id += 1
        self.calls += 1
        return frame["id"], text

    def await_reply(self, call_id, main):
        """Reads frames until the host_reply for call_id; anything else but the
        reply to an abandoned call breaks the protocol."""
        while True:
            if main:
                self.wait_interruptibly(call_id)
            msg, blob_len = self.channel.recv()
            self.channel.skip(blob_len)
            if self.is_abandoned(msg):
                continue
            if msg["op"] != "host_reply" or msg.get("id") != call_id:
                protocol_error(f"expected the host_reply for call {call_id}, got {msg['op']}")
            return msg

    def wait_interruptibly(self, call_id):
        """Waits for the reply with KeyboardInterrupt allowed (nothing of it is
        read yet); an interrupted call is abandoned and its reply dropped later."""
        try:
            self.resume_user()
            self.channel.wait()
        except KeyboardInterrupt:
            self.abandoned.add(call_id)
            raise
        finally:
            self.interruptible = False

    def is_abandoned(self, msg):
        call_id = msg.get("id")
        if msg["op"] != "host_reply" or type(call_id) is not int or call_id not in self.abandoned:
            return False
        self.abandoned.discard(call_id)
        return True

    def stray_reply(self, msg):
        if not self.is_abandoned(msg):
            protocol_error(f"a host_reply for no pending call ({msg.get('id')!r})")

    # -- variables --

    def name(self, msg):
        return identifier(field(msg, "name", str))

    def set(self, msg):
        name = self.name(msg)
        self.ns[name] = field(msg, "value", object)
        return '{"op":"ok"}'

    def set_text(self, msg, blob_len):
        try:
            name = self.name(msg)
        except BadRequest:
            self.channel.skip(blob_len)
            raise
        data = self.channel.read(blob_len)
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            return error_frame("UnicodeDecodeError", str(exc))
        del data
        self.ns[name] = text
        return '{"op":"ok"}'

    def load_file(self, msg):
        name, path = self.name(msg), field(msg, "path", str)
        mode = field(msg, "mode", str, "text")
        if mode not in ("text", "bytes"):
            raise BadRequest(f"load_file: mode {mode[:NAME_MAX]!r} is neither 'text' nor 'bytes'")
        try:
            with open(path, "rb") as f:
                data = f.read()
            self.ns[name] = data if mode == "bytes" else data.decode()
        except (OSError, ValueError) as exc:
            return error_frame(type_name(exc), str(exc))
        return '{"op":"ok"}'

    def get(self, msg):
        name = self.name(msg)
        if name not in self.ns:
            return error_frame("NameError", f"name {name!r} is not defined")
        value = self.ns[name]
        frame = {
            "op": "value",
            "name": name,
            "type": type_name(value),
            "repr": capped_repr(value, TEXT_MAX),
        }
        return with_raw(frame, "value", to_json(value, VALUE_MAX) or "null")

    def variables(self, msg):
        entries, used, truncated = [], 0, False
        for name, value in list(self.ns.items()):
            if not self.is_public(name, value):
                continue
            entry = ENCODE(
                {"name": readable_text(name), "type": type_name(value), "size": size_of(value)}
            )
            used += len(entry) + 1
            if used > VALUE_MAX:
                truncated = True
                break
            entries.append(entry)
        frame = {"op": "variables", "truncated": truncated}
        return with_raw(frame, "variables", f"[{','.join(entries)}]")

    def is_public(self, name, value):
        return (
            type(name) is str
            and not name.startswith("_")
            and not issubclass(type(value), types.ModuleType)
            and self.host.get(name) is not value
        )

    def reset(self, msg):
        self.ns.clear()
        self.ns.update(__name__="__main__", __builtins__=builtins)
        self.ns.update(self.host)
        sys.modules["__main__"] = self.module  # pickle finds the code's classes there
        return '{"op":"ok"}'


def main():
    channel = Channel(CHANNEL_FD)
    # -I leaves the working directory (/workspace) off sys.path; code may
    # import the modules it wrote there, as in any REPL.
    sys.path.insert(0, os.getcwd())
    # -I also ignores PYTHONPATH; codecage sets it to the read-only layer of
    # the run's pip requirements, which code imports like any package.
    for entry in os.environ.get("PYTHONPATH", "").split(":"):
        if entry and entry not in sys.path:
            sys.path.insert(1, entry)
    if sys.stdout is not None:
        sys.stdout.reconfigure(line_buffering=True)
    Session(channel).serve()


if __name__ == "__main__":
    main()
