"""A `codecage serve` process for tests: its own config, data directory,
Unix socket and TCP port, with helpers to call the HTTP API, reload its
config (SIGHUP), restart the server and kill it with SIGKILL."""
import http.client
import json
import os
import signal
import socket
import subprocess
import time

from conftest import BUILD

MAX_BODY = 16 * 1024 * 1024  # the smallest limits.max_body_bytes a config may set


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX socket."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Response:
    def __init__(self, resp):
        self.status = resp.status
        self.headers = resp.headers
        self.body = resp.read()

    @property
    def json(self):
        return json.loads(self.body)

    def error_code(self):
        return self.json["error"]["code"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`codecage serve --config` with a config written for the test."""

    def __init__(self, tmp, tenants=None, extra=None, env=None, build=BUILD, unix=True,
                 prefix=None, pass_fds=()):
        self.tmp = tmp
        self.pass_fds = tuple(pass_fds)  # inheritable fds the server starts with
        self.prefix = list(prefix or [])  # argv put in front of the codecage command
        self.build = build
        self.unix = unix  # the transport request() uses unless told otherwise
        self.port = free_port()
        self.socket_path = str(tmp / "api.sock")
        self.data_dir = tmp / "data"
        self.audit_path = tmp / "audit.jsonl"
        config = {
            "data_dir": str(self.data_dir),
            "listen": {"http": f"127.0.0.1:{self.port}", "unix": self.socket_path},
            "audit_log": str(self.audit_path),
            "limits": {"max_body_bytes": MAX_BODY},
        }
        if tenants:
            config["tenants"] = [{"name": n, "token": t} for n, t in tenants.items()]
        config.update(extra or {})
        self.e2b_listen = (config.get("e2b") or {}).get("listen")
        self.config_path = tmp / "config.json"
        self.config_path.write_text(json.dumps(config))
        self.log_path = tmp / "serve.log"
        self.env = env
        self.proc = None
        self.start()

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.prefix, str(self.build / "codecage"), "serve", "--config",
             str(self.config_path)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=self.env,
            pass_fds=self.pass_fds)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"codecage serve exited: {self.log_text()}")
            try:
                if self.request("GET", "/healthz").status == 200 and self.e2b_answers():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"codecage serve did not answer: {self.log_text()}")

    def e2b_answers(self):
        """The E2B listener, when the config has one, accepts connections
        (the server starts it after the API's)."""
        if not self.e2b_listen:
            return True
        host, port = self.e2b_listen.rsplit(":", 1)
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            return True

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def connection(self, unix=None, timeout=60):
        if self.unix if unix is None else unix:
            return UnixHTTPConnection(self.socket_path, timeout=timeout)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, token=None, headers=None, timeout=60,
                unix=None):
        """body: a dict/list (sent as JSON), bytes (sent as they are) or None;
        over the Unix socket or TCP (unix=None: the server's default)."""
        hdrs = dict(headers or {})
        data = body
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        conn = self.connection(unix, timeout)
        try:
            try:
                conn.request(method, path, body=data, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                # Refused by its headers (413 on Content-Length): the server
                # answered and closed before the whole body was sent.
                pass
            return Response(conn.getresponse())
        finally:
            conn.close()

    def ok(self, method, path, body=None, token=None, status=(200, 201)):
        """A request that must succeed; returns the JSON body."""
        r = self.request(method, path, body, token=token)
        assert r.status in status, (r.status, r.body)
        return r.json

    def alive(self):
        return self.proc.poll() is None and self.request("GET", "/healthz").status == 200

    def audit_records(self):
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text().splitlines()]

    def reload(self, change):
        """Rewrites the config file with change(config) (a dict changed in
        place) and sends SIGHUP; returns once the server logged that it
        reloaded (fails if it refused the file)."""
        config = json.loads(self.config_path.read_text())
        change(config)
        self.config_path.write_text(json.dumps(config))
        done = self.log_text().count("codecage: reloaded")
        refused = self.log_text().count("reload refused")
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while self.log_text().count("codecage: reloaded") <= done:
            assert self.log_text().count("reload refused") == refused, self.log_text()[-2000:]
            assert time.monotonic() < deadline, self.log_text()[-2000:]
            time.sleep(0.05)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self):
        """SIGTERM; the server must exit cleanly (0), which under ASan also
        means LeakSanitizer found nothing."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"codecage serve ignored SIGTERM: {self.log_text()}")
            self.log.close()
            assert self.proc.returncode == 0, \
                f"codecage serve exited {self.proc.returncode}: {self.log_text()[-4000:]}"
        self.log.close()


def pids_of_server(server_pid):
    """Host pids inside the cgroups of the server with that pid."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as f:
                if f"/codecage/run-{server_pid}-" in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def cgroups_of_server(server_pid):
    """Every codecage cgroup directory of that server left on the host (v1 and v2)."""
    left = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if os.path.basename(root) == "codecage":
            left += [os.path.join(root, d) for d in dirs if d.startswith(f"run-{server_pid}-")]
            dirs[:] = []
    return left
