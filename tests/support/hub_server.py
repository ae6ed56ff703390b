"""A loopback stand-in for the Hugging Face Hub, speaking the HTTP subset our clients use.

The live Hub cannot be reached from tests, so this server implements, in memory, the routes that
`huggingface_hub` 2.4 (create_repo, create_commit over LFS, create_tag, list_repo_refs, ...) and
`datasets` 5.2 (`load_dataset(repo, config, revision=...)`) call, with the request and response
shapes those clients send and read (huggingface_hub 2.4.0: hf_api.py `create_repo` :4577,
`create_commit` :5018, `create_tag` :7096, `list_repo_refs` :4112; _commit_api.py preupload
:703-771, LFS uploads :378-551 and the commit's NDJSON lines :909; lfs.py's batch call :133; reads
through file_download.py's resolve HEAD and hf_file_system.py's tree). The real client libraries talk to it unchanged: point them
at `server.url` with `HF_ENDPOINT` (set before import) or `HfApi(endpoint=server.url)`, and set
`HF_HUB_DISABLE_XET=1` (Xet is a client-side choice; this server speaks LFS only).

What it models, because the tests depend on it:
- repos with git-like history: commits (parent, full tree), branches, tags; revisions resolve from a
  branch, a tag, `refs/heads/x`, `refs/tags/x` or a 40-hex sha;
- a commit is applied all at once or not at all; a stale `parentCommit` gets 412;
- LFS objects are stored on PUT (sha256 and size checked) and must exist before a commit names them;
- write routes need `Authorization: Bearer <token>` when the server has a token;
- failures can be injected per route (`fail_next`) to test that a publish is atomic;
- every request is recorded (`requests`), tokens redacted, so tests can say what happened.

Start it with `HubServer()` as a context manager (in-process thread), or run
`python tests/support/hub_server.py --port-file F` for a separate process.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

LFS_CONTENT_TYPE = "application/vnd.git-lfs+json"
REGULAR_LIMIT = 10 * 1024 * 1024  # bigger files go to LFS, as on the Hub
LFS_SUFFIXES = (".parquet", ".arrow", ".png", ".bin", ".safetensors")
GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.png filter=lfs diff=lfs merge=lfs -text\n"
ZERO_SHA = "0" * 40


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class Blob:
    """One file in a tree. LFS files are stored whole here too; `lfs` decides how they are served."""

    data: bytes
    lfs: bool

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def git_oid(self) -> str:
        """The git blob id: of the content for a regular file, of the pointer file for LFS."""
        return git_blob_sha1(lfs_pointer(self.sha256, len(self.data)) if self.lfs else self.data)

    def entry(self, path: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "oid": self.git_oid, "size": len(self.data), "path": path}
        if self.lfs:
            pointer = lfs_pointer(self.sha256, len(self.data))
            entry["lfs"] = {"oid": self.sha256, "size": len(self.data), "pointerSize": len(pointer)}
        return entry


@dataclass
class Commit:
    sha: str
    parent: str | None
    summary: str
    tree: dict[str, Blob]
    date: str


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    # LFS objects uploaded to this repo (sha256 -> bytes), committed or not.
    lfs: dict[str, bytes] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit | None:
        """A branch, tag, `refs/heads/x`, `refs/tags/x` or a full commit sha -> its commit."""
        for prefix, table in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if revision.startswith(prefix):
                sha = table.get(revision[len(prefix):])
                return self.commits.get(sha) if sha else None
        sha = self.branches.get(revision) or self.tags.get(revision)
        if sha is None and revision in self.commits:
            sha = revision
        return self.commits.get(sha) if sha else None


class HubError(Exception):
    """An HTTP error answered with the Hub's error headers (`X-Error-Code`, `X-Error-Message`)."""

    def __init__(self, status: int, message: str, code: str | None = None, commit: str | None = None,
                 body: dict[str, Any] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.commit = status, message, code, commit
        self.body = body or {}


@dataclass
class Request:
    method: str
    path: str
    route: str
    authorized: bool


class HubState:
    """Everything the server knows; all mutation happens under `lock`."""

    def __init__(self, token: str | None):
        self.token = token
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.failures: dict[str, deque[tuple[int, str]]] = {}
        self.requests: list[Request] = []
        self._counter = 0

    def new_sha(self, *parts: str) -> str:
        self._counter += 1
        return hashlib.sha1("\0".join((str(self._counter), *parts)).encode()).hexdigest()

    def create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_type, repo_id, private)
        sha = self.new_sha(repo_id, "initial")
        repo.commits[sha] = Commit(sha, None, "initial commit", {".gitattributes": Blob(GITATTRIBUTES, False)}, _now())
        repo.branches["main"] = sha
        self.repos[(repo_type, repo_id)] = repo
        return repo


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _children(tree: dict[str, Blob], folder: str, recursive: bool) -> list[dict[str, Any]]:
    """Tree entries under `folder` ("" = root): files and directories, full repo-relative paths."""
    prefix = f"{folder}/" if folder else ""
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(tree):
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix):].split("/")
        depth = len(parts) if recursive else 1
        for level in range(1, min(depth, len(parts)) + 1):
            sub = prefix + "/".join(parts[:level])
            if level == len(parts):
                entries[sub] = tree[path].entry(sub)
            elif sub not in entries:
                entries[sub] = {"type": "directory", "oid": hashlib.sha1(sub.encode()).hexdigest(), "size": 0, "path": sub}
    return list(entries.values())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    # -- plumbing ----------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    @property
    def state(self) -> HubState:
        return self.server.state

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _authorized(self) -> bool:
        if self.state.token is None:
            return True
        return self.headers.get("Authorization") == f"Bearer {self.state.token}"

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              content_type: str = "application/json", head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _error(self, error: HubError, head: bool = False) -> None:
        headers = {"X-Error-Message": error.message}
        if error.code:
            headers["X-Error-Code"] = error.code
        if error.commit:
            headers["X-Repo-Commit"] = error.commit
        self._send(error.status, json.dumps({"error": error.message, **error.body}).encode(), headers, head=head)

    def _dispatch(self, method: str) -> None:
        raw = urlsplit(self.path)
        # Route on the raw path: a revision like refs%2Ftags%2Fv1 is one segment.
        segments = [unquote(s) for s in raw.path.split("/")[1:]]
        query = parse_qs(raw.query)
        route = self._route_name(method, segments)
        with self.state.lock:
            self.state.requests.append(Request(method, raw.path, route, self._authorized()))
            queue = self.state.failures.get(route)
            injected = queue.popleft() if queue else None
        body = self._body() if method in ("POST", "PUT") else b""
        if injected is not None:
            status, message = injected
            self._error(HubError(status, message, "InjectedFailure"), head=method == "HEAD")
            return
        try:
            handler = getattr(self, f"route_{route}", None)
            if handler is None:
                raise HubError(404, f"loopback hub: no route for {method} {raw.path}")
            handler(segments, query, body, method)
        except HubError as error:
            self._error(error, head=method == "HEAD")

    @staticmethod
    def _route_name(method: str, s: list[str]) -> str:
        """A short name per route: used for dispatch, request records and failure injection."""
        if s[:1] == ["api"]:
            if s[1:3] == ["repos", "create"]:
                return "create_repo"
            if s[1:2] == ["validate-yaml"]:
                return "validate_yaml"
            if s[1:2] == ["agent-harnesses"]:
                return "agent_harnesses"
            if len(s) >= 4 and s[1] in ("datasets", "models", "spaces"):
                action = s[4] if len(s) > 4 else ""
                known = {"preupload", "commit", "tag", "refs", "revision", "tree", "paths-info"}
                if action in known:
                    return action.replace("-", "_")
                if action == "" and method == "GET":
                    return "revision"
        if s[:1] == ["_lfs"]:
            return {"PUT": "lfs_put", "POST": "lfs_verify"}.get(method, "unknown")
        if len(s) >= 4 and s[-4:] == ["info", "lfs", "objects", "batch"]:
            return "lfs_batch"
        if "resolve" in s:
            return "resolve"
        return "unknown"

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    # -- helpers -------------------------------------------------------------------------------------
    def _repo(self, repo_type: str, namespace: str, name: str, write: bool = False) -> Repo:
        repo = self.state.repos.get((repo_type, f"{namespace}/{name}"))
        if write and not self._authorized():
            raise HubError(401, "Invalid credentials in Authorization header", "RepoNotFound")
        if repo is None or (repo.private and not self._authorized()):
            raise HubError(404, f"Repository {namespace}/{name} not found", "RepoNotFound")
        return repo

    def _api_repo(self, s: list[str], write: bool = False) -> Repo:
        # /api/{type}s/{ns}/{name}/...
        return self._repo(s[1][:-1], s[2], s[3], write)

    def _commit(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    @staticmethod
    def _rest_path(s: list[str], start: int) -> str:
        return "/".join(p for p in s[start:] if p)

    # -- publishing routes ---------------------------------------------------------------------------
    def route_create_repo(self, s, query, body, method) -> None:
        if not self._authorized():
            raise HubError(401, "Invalid credentials in Authorization header")
        payload = json.loads(body)
        repo_type = payload.get("type") or "model"
        namespace = payload.get("organization") or "user"
        repo_id = f"{namespace}/{payload['name']}"
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        url = f"{self.base}/{prefix}{repo_id}"
        with self.state.lock:
            if (repo_type, repo_id) in self.state.repos:  # the Hub's 409 carries the url too
                raise HubError(409, f"You already created this {repo_type} repo", body={"url": url})
            self.state.create_repo(repo_type, repo_id, private)
        self._json(200, {"url": url, "name": repo_id})

    def route_validate_yaml(self, s, query, body, method) -> None:
        """Parse the card's front matter; report what the Hub would refuse for `configs`."""
        content = json.loads(body).get("content", "")
        errors: list[dict[str, str]] = []
        if content.startswith("---"):
            try:
                meta = yaml.safe_load(content.split("---", 2)[1]) or {}
            except yaml.YAMLError as exc:
                meta = {}
                errors.append({"message": f"Invalid YAML: {exc}"})
            configs = meta.get("configs") or []
            if sum(1 for c in configs if c.get("default")) > 1:
                errors.append({"message": '"configs" can have at most one "default": true'})
            for config in configs:
                if "config_name" not in config:
                    errors.append({"message": '"configs[].config_name" is required'})
        self._json(400 if errors else 200, {"errors": errors, "warnings": []})

    def route_preupload(self, s, query, body, method) -> None:
        repo = self._api_repo(s, write=True)
        with self.state.lock:
            tree = self._commit(repo, s[5]).tree
        files = []
        for item in json.loads(body)["files"]:
            sample = base64.b64decode(item["sample"])
            lfs = item["path"].endswith(LFS_SUFFIXES) or item["size"] >= REGULAR_LIMIT or b"\0" in sample
            existing = tree.get(item["path"])
            oid = None
            if existing is not None:
                oid = existing.sha256 if existing.lfs else existing.git_oid
            files.append({"path": item["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
        self._json(200, {"files": files})

    def route_lfs_batch(self, s, query, body, method) -> None:
        # /{datasets/}{ns}/{name}.git/info/lfs/objects/batch
        repo_type, rest = ("dataset", s[1:]) if s[0] == "datasets" else ("model", s)
        repo = self._repo(repo_type, rest[0], rest[1].removesuffix(".git"), write=True)
        objects = []
        for obj in json.loads(body)["objects"]:
            answer: dict[str, Any] = {"oid": obj["oid"], "size": int(obj["size"])}
            with self.state.lock:
                stored = obj["oid"] in repo.lfs
            if not stored:  # the client PUTs only objects that get actions
                href = f"{self.base}/_lfs/{repo_type}/{repo.repo_id}/{obj['oid']}"
                answer["actions"] = {
                    "upload": {"href": f"{href}?size={obj['size']}", "header": {}},
                    "verify": {"href": f"{href}/verify"},
                }
            objects.append(answer)
        self._send(200, json.dumps({"transfer": "basic", "objects": objects}).encode(), content_type=LFS_CONTENT_TYPE)

    def route_lfs_put(self, s, query, body, method) -> None:
        # /_lfs/{type}/{ns}/{name}/{oid}?size=N: the signed upload URL (no Authorization header)
        repo, oid = self.state.repos[(s[1], f"{s[2]}/{s[3]}")], s[4]
        if hashlib.sha256(body).hexdigest() != oid or len(body) != int(query["size"][0]):
            raise HubError(400, f"LFS object {oid}: content does not match its oid/size")
        with self.state.lock:
            repo.lfs[oid] = body
        self._send(200)

    def route_lfs_verify(self, s, query, body, method) -> None:
        repo = self._repo(s[1], s[2], s[3], write=True)
        payload = json.loads(body)
        with self.state.lock:
            stored = repo.lfs.get(payload["oid"])
        if stored is None or len(stored) != payload["size"]:
            raise HubError(404, f"LFS object {payload['oid']} not found")
        self._json(200, {"oid": payload["oid"], "size": payload["size"]})

    def route_commit(self, s, query, body, method) -> None:
        repo = self._api_repo(s, write=True)
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not lines or lines[0]["key"] != "header":
            raise HubError(400, "commit payload must start with a header line")
        header = lines[0]["value"]
        branch = s[5]
        with self.state.lock:
            if branch not in repo.branches:
                raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            head = repo.branches[branch]
            parent = header.get("parentCommit")
            if parent and not head.startswith(parent):
                raise HubError(412, f"A commit has happened since. Please refresh and try again. ({parent} is not {head})")
            tree = dict(repo.commits[head].tree)
            for line in lines[1:]:  # build the whole new tree first: all or nothing
                value = line["value"]
                if line["key"] == "file":
                    tree[value["path"]] = Blob(base64.b64decode(value["content"]), False)
                elif line["key"] == "lfsFile":
                    data = repo.lfs.get(value["oid"])
                    if data is None:
                        raise HubError(422, f"LFS object {value['oid']} for {value['path']} was never uploaded")
                    tree[value["path"]] = Blob(data, True)
                elif line["key"] == "deletedFile":
                    if tree.pop(value["path"], None) is None:
                        raise HubError(404, f"cannot delete {value['path']}: no such file", "EntryNotFound")
                elif line["key"] == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    for path in [p for p in tree if p.startswith(prefix)]:
                        del tree[path]
                else:
                    raise HubError(400, f"unknown commit line key {line['key']!r}")
            sha = self.state.new_sha(repo.repo_id, head, header.get("summary", ""))
            repo.commits[sha] = Commit(sha, head, header.get("summary", ""), tree, _now())
            repo.branches[branch] = sha
        prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
        self._json(200, {"commitOid": sha, "commitUrl": f"{self.base}/{prefix}{repo.repo_id}/commit/{sha}"})

    def route_tag(self, s, query, body, method) -> None:
        repo = self._api_repo(s, write=True)
        tag = json.loads(body)["tag"]
        with self.state.lock:
            commit = self._commit(repo, s[5])
            if tag in repo.tags:
                raise HubError(409, f"Tag {tag} already exists")
            repo.tags[tag] = commit.sha
        self._json(200, {})

    # -- reading routes ------------------------------------------------------------------------------
    def route_refs(self, s, query, body, method) -> None:
        repo = self._api_repo(s)
        with self.state.lock:
            payload = {
                "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": c} for n, c in repo.branches.items()],
                "converts": [],
                "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": c} for n, c in repo.tags.items()],
            }
        if query.get("include_prs"):
            payload["pullRequests"] = []
        self._json(200, payload)

    def route_revision(self, s, query, body, method) -> None:
        repo = self._api_repo(s)
        with self.state.lock:
            commit = self._commit(repo, s[5] if len(s) > 5 else "main")
        siblings = []
        for path, blob in sorted(commit.tree.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if query.get("blobs"):
                entry = blob.entry(path)
                sibling.update(size=entry["size"], blobId=entry["oid"], **({"lfs": entry["lfs"]} if blob.lfs else {}))
            siblings.append(sibling)
        card_data = None
        readme = commit.tree.get("README.md")
        if readme is not None and readme.data.startswith(b"---"):
            card_data = yaml.safe_load(readme.data.decode().split("---", 2)[1])
        self._json(200, {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0], "sha": commit.sha, "lastModified": commit.date,
            "private": repo.private, "gated": False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "cardData": card_data, "siblings": siblings,
        })

    def route_tree(self, s, query, body, method) -> None:
        repo = self._api_repo(s)
        with self.state.lock:
            commit = self._commit(repo, s[5])
        folder = self._rest_path(s, 6).strip("/")
        if folder in commit.tree:
            self._json(200, [commit.tree[folder].entry(folder)])
            return
        recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
        entries = _children(commit.tree, folder, recursive)
        if folder and not entries:
            raise HubError(404, f"{folder} does not exist on {s[5]}", "EntryNotFound")
        self._json(200, entries)

    def route_paths_info(self, s, query, body, method) -> None:
        repo = self._api_repo(s)
        with self.state.lock:
            commit = self._commit(repo, s[5])
        form = parse_qs(body.decode())
        entries = []
        for path in form.get("paths", []):
            if path in commit.tree:
                entries.append(commit.tree[path].entry(path))
            elif any(p.startswith(path.rstrip("/") + "/") for p in commit.tree):
                entries.append({"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path})
        self._json(200, entries)

    def route_resolve(self, s, query, body, method) -> None:
        # /{datasets/|spaces/|}{ns}/{name}/resolve/{rev}/{path...}
        at = s.index("resolve")
        repo_type = {"datasets": "dataset", "spaces": "space"}.get(s[0], "model")
        owner = s[at - 2:at]
        repo = self._repo(repo_type, owner[0], owner[1])
        with self.state.lock:
            commit = self._commit(repo, s[at + 1])
        path = self._rest_path(s, at + 2)
        blob = commit.tree.get(path)
        if blob is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", commit=commit.sha)
        etag = blob.sha256 if blob.lfs else blob.git_oid
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if blob.lfs:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(blob.data))})
        data, status = blob.data, 200
        byte_range = self.headers.get("Range")
        if byte_range and byte_range.startswith("bytes="):
            first, _, last = byte_range[len("bytes="):].partition("-")
            start = int(first) if first else max(0, len(data) - int(last))
            end = min(int(last), len(data) - 1) if (last and first) else len(data) - 1
            if start >= len(data):
                self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, head=method == "HEAD")
                return
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start:end + 1], 206
        self._send(status, data, headers, content_type="application/octet-stream", head=method == "HEAD")

    def route_agent_harnesses(self, s, query, body, method) -> None:
        self._json(200, {"standardEnvVars": [], "harnesses": {}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState


class HubServer:
    """The loopback Hub in a background thread; use as a context manager."""

    def __init__(self, token: str | None = None, port: int = 0):
        self.state = HubState(token)
        self._httpd = _Server(("127.0.0.1", port), Handler)
        self._httpd.state = self.state
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- for tests -----------------------------------------------------------------------------------
    def fail_next(self, route: str, status: int = 403, message: str = "injected failure", times: int = 1) -> None:
        """Answer the next `times` requests to `route` (e.g. "lfs_put", "commit") with an error.

        Use a 4xx status: the client retries 5xx with backoff, which only slows the test down.
        """
        with self.state.lock:
            self.state.failures.setdefault(route, deque()).extend([(status, message)] * times)

    def repo(self, repo_id: str, repo_type: str = "dataset") -> Repo:
        return self.state.repos[(repo_type, repo_id)]

    def routes(self, since: int = 0) -> list[str]:
        """Route names of the requests seen so far (from index `since`)."""
        with self.state.lock:
            return [r.route for r in self.state.requests[since:]]

    def request_count(self) -> int:
        with self.state.lock:
            return len(self.state.requests)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the loopback Hub on 127.0.0.1 until killed.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token")
    parser.add_argument("--port-file", help="write the chosen URL here once listening")
    args = parser.parse_args()
    server = HubServer(token=args.token, port=args.port).start()
    if args.port_file:
        with open(args.port_file, "w", encoding="utf-8") as handle:
            handle.write(server.url)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
