"""A FAKE GitHub and GitLab comment API, for testing `benchgate comment` without a forge.

GitHub and GitLab are remote services that cannot run here, so this stands in for the one part of
each that benchgate talks to: a plain HTTP server on 127.0.0.1 speaking, with their real wire format,

    GitHub REST v3   GET/POST /repos/{owner}/{repo}/issues/{n}/comments, PATCH
                     /repos/{owner}/{repo}/issues/comments/{id}; `Authorization: Bearer|token TOKEN`;
                     401 {"message": "Bad credentials", ...} on a bad token, 404 {"message": "Not Found"}.
    GitLab v4        GET/POST /api/v4/projects/{id}/merge_requests/{iid}/notes, PUT .../notes/{note_id};
                     the project as its number or its URL-encoded path; `PRIVATE-TOKEN: TOKEN`;
                     401 {"message": "401 Unauthorized"}, 404 {"message": "404 Not found"}.

JSON bodies; lists paged by `per_page` and `page` (the forge's defaults: page 1, 30 and 20 per page),
with the `Link` header (rel="next", "prev", "first", "last") both forges send, and GitLab's X-Page,
X-Per-Page, X-Next-Page and X-Total. `max_per_page` caps per_page (the forges cap it at 100): a test
sets it low to make a short thread span several pages. Only pull requests and merge requests a test
opened (`open_pull`, `open_merge_request`) exist; the others are 404, as are unknown comments.
`fail_with` makes every request answer that status (a forge that is down); `requests` logs
(method, path, query) of every request.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlparse

CREATED_AT = "2026-11-24T09:00:00Z"
GITHUB_LIST = re.compile(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments")
GITHUB_ITEM = re.compile(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)")
GITLAB_LIST = re.compile(r"/api/v4/projects/([^/]+)/merge_requests/(\d+)/notes")
GITLAB_ITEM = re.compile(r"/api/v4/projects/([^/]+)/merge_requests/(\d+)/notes/(\d+)")


@dataclass
class FakeForge:
    token: str = "forge-token"
    max_per_page: int = 100
    fail_with: int | None = None
    # (repository, number) -> comments; (project, iid) -> notes, each in creation order.
    pulls: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    merge_requests: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    base_url: str = ""
    next_id: int = 1000
    lock: threading.Lock = field(default_factory=threading.Lock)

    def open_pull(self, repository: str, number: int) -> list[dict[str, Any]]:
        return self.pulls.setdefault((repository, number), [])

    def open_merge_request(self, project: str, iid: int) -> list[dict[str, Any]]:
        return self.merge_requests.setdefault((project, iid), [])

    def github_comment(
        self, repository: str, number: int, body: str, login: str = "someone"
    ) -> dict[str, Any]:
        """A comment as GitHub stores and returns it (a test adds other people's with this too)."""
        self.next_id += 1
        comment = {
            "id": self.next_id,
            "node_id": f"IC_fake{self.next_id}",
            "url": f"{self.base_url}/repos/{repository}/issues/comments/{self.next_id}",
            "html_url": f"https://github.example/{repository}/pull/{number}#issuecomment-{self.next_id}",
            "issue_url": f"{self.base_url}/repos/{repository}/issues/{number}",
            "body": body,
            "user": {"login": login, "id": 1, "type": "User"},
            "created_at": CREATED_AT,
            "updated_at": CREATED_AT,
            "author_association": "CONTRIBUTOR",
        }
        self.open_pull(repository, number).append(comment)
        return comment

    def gitlab_note(self, project: str, iid: int, body: str, system: bool = False) -> dict[str, Any]:
        """A note as GitLab returns it (system notes are the forge's own "added 1 commit" lines)."""
        self.next_id += 1
        note = {
            "id": self.next_id,
            "type": None,
            "body": body,
            "author": {"id": 1, "username": "someone", "name": "Someone"},
            "created_at": CREATED_AT,
            "updated_at": CREATED_AT,
            "system": system,
            "noteable_id": 77,
            "noteable_type": "MergeRequest",
            "noteable_iid": iid,
            "resolvable": False,
            "confidential": False,
            "internal": False,
        }
        self.open_merge_request(project, iid).append(note)
        return note


class _Handler(BaseHTTPRequestHandler):
    fake: FakeForge

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = None
        return data if isinstance(data, dict) else {}

    def _page(self, items: list[dict[str, Any]], path: str, query: dict[str, str], gitlab: bool) -> None:
        default = 20 if gitlab else 30
        per_page = max(1, min(int(query.get("per_page", default)), self.fake.max_per_page))
        page = max(1, int(query.get("page", 1)))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]

        def link(n: int) -> str:
            return f"{self.fake.base_url}{path}?{urlencode(query | {'page': n, 'per_page': per_page})}"

        rels = {"first": 1, "last": last} | ({"next": page + 1} if page < last else {})
        rels |= {"prev": page - 1} if page > 1 else {}
        headers = {"Link": ", ".join(f'<{link(n)}>; rel="{rel}"' for rel, n in rels.items())}
        if gitlab:
            headers |= {
                "X-Page": str(page),
                "X-Per-Page": str(per_page),
                "X-Next-Page": str(page + 1) if page < last else "",
                "X-Total": str(len(items)),
            }
        self._send(200, chunk, headers)

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with self.fake.lock:
            self.fake.requests.append((method, url.path, url.query))
        if self.fake.fail_with is not None:
            return self._send(self.fake.fail_with, {"message": f"fake forge answering {self.fake.fail_with}"})
        if url.path.startswith("/api/v4/"):
            return self._gitlab(method, url.path, query)
        return self._github(method, url.path, query)

    def _github(self, method: str, path: str, query: dict[str, str]) -> None:
        docs = {"documentation_url": "https://docs.github.com/rest", "status": ""}
        auth = self.headers.get("Authorization", "")
        if auth not in (f"Bearer {self.fake.token}", f"token {self.fake.token}"):
            return self._send(401, {"message": "Bad credentials"} | docs | {"status": "401"})
        not_found = {"message": "Not Found"} | docs | {"status": "404"}
        with self.fake.lock:
            if (match := GITHUB_LIST.fullmatch(path)) and method in ("GET", "POST"):
                key = (match[1], int(match[2]))
                if key not in self.fake.pulls:
                    return self._send(404, not_found)
                if method == "GET":
                    return self._page(list(self.fake.pulls[key]), path, query, gitlab=False)
                body = self._body()
                if not isinstance(body.get("body"), str):
                    return self._send(422, {"message": "Invalid request.", "status": "422"})
                return self._send(
                    201, self.fake.github_comment(*key, body["body"], login="github-actions[bot]")
                )
            if (match := GITHUB_ITEM.fullmatch(path)) and method == "PATCH":
                found = _find(self.fake.pulls, match[1], int(match[2]))
                if found is None:
                    return self._send(404, not_found)
                found["body"], found["updated_at"] = (
                    self._body().get("body", found["body"]),
                    "2026-11-24T09:30:00Z",
                )
                return self._send(200, found)
        return self._send(404, not_found)

    def _gitlab(self, method: str, path: str, query: dict[str, str]) -> None:
        if self.headers.get("PRIVATE-TOKEN") != self.fake.token:
            return self._send(401, {"message": "401 Unauthorized"})
        with self.fake.lock:
            if (match := GITLAB_ITEM.fullmatch(path)) and method == "PUT":
                notes = self.fake.merge_requests.get((unquote(match[1]), int(match[2])), [])
                found = next((n for n in notes if n["id"] == int(match[3])), None)
                if found is None:
                    return self._send(404, {"message": "404 Not found"})
                found["body"], found["updated_at"] = (
                    self._body().get("body", found["body"]),
                    "2026-11-24T09:30:00Z",
                )
                return self._send(200, found)
            if (match := GITLAB_LIST.fullmatch(path)) and method in ("GET", "POST"):
                key = (unquote(match[1]), int(match[2]))
                if key not in self.fake.merge_requests:
                    return self._send(404, {"message": "404 Merge Request Not Found"})
                if method == "GET":
                    return self._page(list(self.fake.merge_requests[key]), path, query, gitlab=True)
                body = self._body()
                if not isinstance(body.get("body"), str):
                    return self._send(400, {"message": "400 Bad request - body is missing"})
                return self._send(201, self.fake.gitlab_note(*key, body["body"]))
        return self._send(404, {"error": "404 Not Found"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_PUT(self) -> None:
        self._handle("PUT")


def _find(pulls: dict[tuple[str, int], list[dict[str, Any]]], repository: str, comment_id: int) -> Any:
    for (repo, _), comments in pulls.items():
        if repo == repository:
            found = next((c for c in comments if c["id"] == comment_id), None)
            if found is not None:
                return found
    return None


@contextmanager
def serve(fake: FakeForge | None = None) -> Iterator[FakeForge]:
    """Run the fake on a free port of 127.0.0.1 for the `with` block; `fake.base_url` is its address."""
    fake = fake or FakeForge()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
