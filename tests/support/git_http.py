"""Bare repositories served by ``git http-backend`` on loopback, behind HTTP Basic auth.

The server answers 401 with a ``WWW-Authenticate`` challenge to a request without the right
credentials (as a forge does), so a client that does not send them fails instead of being
let in; every request's path and ``Authorization`` header are kept for assertions.
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "alice",
    "GIT_AUTHOR_EMAIL": "alice@example.test",
    "GIT_COMMITTER_NAME": "alice",
    "GIT_COMMITTER_EMAIL": "alice@example.test",
    # Fixed dates: the same commits get the same SHAs on every run.
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(*args: str, cwd: Path | None = None, stdin: str | None = None) -> str:
    """Run git for a test's own setup (never with a token) and return its output."""
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", **GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def commit_file(work: Path, path: str, text: str, message: str) -> str:
    """Write ``path`` in the working copy ``work``, commit it and return the commit's SHA."""
    target = work / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git("add", path, cwd=work)
    git("commit", "--quiet", "-m", message, cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


@dataclass
class GitServer:
    """``url`` serves every bare repository under ``root`` as ``url/OWNER/NAME.git``."""

    root: Path
    url: str
    username: str
    password: str
    authorizations: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def bare(self, repo: str) -> Path:
        return self.root / f"{repo}.git"

    def create(self, repo: str, work: Path) -> str:
        """A bare repository ``repo`` holding ``main`` of the working copy ``work``."""
        bare = self.bare(repo)
        bare.parent.mkdir(parents=True, exist_ok=True)
        git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
        git("push", "--quiet", str(bare), "HEAD:refs/heads/main", cwd=work)
        return git("rev-parse", "HEAD", cwd=work)

    def push(self, repo: str, work: Path, refspec: str) -> None:
        git("push", "--quiet", "--force", str(self.bare(repo)), refspec, cwd=work)

    def ref(self, repo: str, ref: str) -> str:
        return git("--git-dir", str(self.bare(repo)), "rev-parse", "--verify", ref)


def _handler(server: GitServer) -> type[BaseHTTPRequestHandler]:
    expected = "Basic " + base64.b64encode(f"{server.username}:{server.password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            given = self.headers.get("Authorization", "")
            server.authorizations.append(given)
            server.paths.append(self.path)
            if given != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else self._chunked()
            env = {
                "PATH": os.environ.get("PATH", ""),
                "GIT_PROJECT_ROOT": str(server.root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "REMOTE_USER": server.username,  # lets receive-pack (push) through
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            }
            done = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status = 200
            headers: list[tuple[str, str]] = []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _chunked(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return b""
            chunks = []
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()

    return Handler


@contextmanager
def serving(root: Path, *, username: str, password: str) -> Iterator[GitServer]:
    """A :class:`GitServer` for the repositories under ``root`` while the block runs."""
    root.mkdir(parents=True, exist_ok=True)
    server = GitServer(root, "", username, password)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
