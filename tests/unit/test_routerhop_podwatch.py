"""The router hop's view of the engines follows the Kubernetes API: a list, then a watch from its
resourceVersion, and a fresh list when the watch fails (410 Gone), each call with the pod's
ServiceAccount token as it is on disk at that moment (the kubelet rotates it)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from hopfakes import pod

from llmfleet.routerhop.engines import EngineTable
from llmfleet.routerhop.podwatch import ApiAccess, PodWatch

SELECTOR = "app.kubernetes.io/component=engine,llmfleet.dev/deployment=chat"


class FakeApi:
    """Two lists and two watches: the first watch marks pod a, then fails with 410 Gone; the
    second list has pod b too; the second watch stays open."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str | None]] = []  # kind, token, resourceVersion
        self.lists = 0

    async def pods(self, request: web.Request) -> web.StreamResponse:
        assert request.query["labelSelector"] == SELECTOR
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if request.query.get("watch") != "1":
            self.lists += 1
            self.calls.append(("list", token, None))
            items = [pod("a", "10.0.0.1", [])]
            if self.lists > 1:
                items = [pod("a", "10.0.0.1", ["sql"]), pod("b", "10.0.0.2", ["sql"])]
            return web.json_response(
                {"items": items, "metadata": {"resourceVersion": str(10 * self.lists)}}
            )
        self.calls.append(("watch", token, request.query["resourceVersion"]))
        response = web.StreamResponse()
        await response.prepare(request)
        if self.lists == 1:
            events: list[dict[str, Any]] = [
                {"type": "MODIFIED", "object": pod("a", "10.0.0.1", ["sql"])},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}},
            ]
            for event in events:
                await response.write(json.dumps(event).encode() + b"\n")
                await asyncio.sleep(0.05)
            return response
        await asyncio.sleep(30)
        return response


def test_the_table_follows_list_watch_and_relist(tmp_path: Path) -> None:
    api = FakeApi()
    (tmp_path / "token").write_text("first\n")

    async def run() -> tuple[list[str], list[str]]:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/team/pods", api.pods)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        access = ApiAccess(f"http://127.0.0.1:{port}", tmp_path / "token", tmp_path / "ca.crt")
        table = EngineTable()
        seen: list[list[str]] = []
        async with aiohttp.ClientSession() as session:
            watch = asyncio.create_task(PodWatch(table, access, "team", SELECTOR, session).run())
            try:
                for _ in range(100):
                    names = sorted(e.name for e in table.serving("sql"))
                    if not seen or seen[-1] != names:
                        seen.append(names)
                        if names == ["a"]:
                            (tmp_path / "token").write_text("rotated\n")
                    if names == ["a", "b"]:
                        break
                    await asyncio.sleep(0.05)
            finally:
                watch.cancel()
                await runner.cleanup()
        return seen[0], seen[-1]

    first, last = asyncio.run(run())
    assert first == []  # the first list: a serves nothing yet
    assert last == ["a", "b"]  # the watch marked a; the relist after 410 found b
    kinds = [(kind, version) for kind, _, version in api.calls]
    assert kinds[:3] == [("list", None), ("watch", "10"), ("list", None)]
    assert kinds[3] == ("watch", "20")
    assert [token for _, token, _ in api.calls[:2]] == ["first", "first"]
    assert api.calls[2][1] == "rotated"
