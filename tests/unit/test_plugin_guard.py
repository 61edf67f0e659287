"""The pytest plugin's network guard does not import httpx, yet guards an httpx imported under it.

A suite that never uses httpx paid for importing it in every guarded test's
process (issue 26 #5: a fifth of a replayed test's added wall time); the guard
now patches a transport module as its import ends, while the guard is on.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import redrive._plugin_guard as guard_module
from redrive._plugin_guard import NetworkBlocked, _network_guard

TRANSPORT = """
IMPORTED = True

class ConnectionPool:
    def handle_request(self, request):
        return "sent"

class AsyncConnectionPool:
    async def handle_async_request(self, request):
        return "sent"
"""


@pytest.fixture
def transport_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh, not yet imported transport package the guard watches instead of httpx."""
    name = f"fakehttp_{uuid.uuid4().hex}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(TRANSPORT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(guard_module, "_HTTPX_MODULES", (name,))
    yield name
    sys.modules.pop(name, None)


def _send(module: Any, is_async: bool) -> Any:
    request = SimpleNamespace(method="GET", url="http://127.0.0.1:9/")
    if is_async:
        return asyncio.run(module.AsyncConnectionPool().handle_async_request(request))
    return module.ConnectionPool().handle_request(request)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_the_guard_imports_no_transport_and_guards_one_imported_under_it(
    transport_name: str, is_async: bool
) -> None:
    """Not imported by the guard; imported inside it: refused, recorded; after it: restored."""
    blocked: list[str] = []
    hooks = list(sys.meta_path)
    with _network_guard("test_x", blocked, True):
        assert transport_name not in sys.modules  # the guard did not import it
        module = importlib.import_module(transport_name)
        assert module.IMPORTED
        with pytest.raises(NetworkBlocked, match="outside recorded steps"):
            _send(module, is_async)
    assert blocked == ["GET http://127.0.0.1:9/"]
    assert sys.meta_path == hooks  # the import hook is gone
    assert _send(module, is_async) == "sent"  # the transport is as it was
    # already imported: patched when the next guard starts, restored after
    with _network_guard("test_y", blocked, True), pytest.raises(NetworkBlocked):
        _send(module, is_async)
    assert _send(module, is_async) == "sent"


def test_a_transport_imported_after_the_guard_is_left_alone(transport_name: str) -> None:
    """Imported after the guard ended: not patched (the hook left with the guard)."""
    with _network_guard("test_x", [], True):
        pass
    module = importlib.import_module(transport_name)
    assert _send(module, False) == "sent"
    assert type(module.__loader__).__name__ != "_PatchingLoader"


def test_nested_guards_patch_and_restore_a_transport_imported_under_both(
    transport_name: str,
) -> None:
    """A fixture's guard around a test's: the inner one ends first, the outer still refuses."""
    outer: list[str] = []
    inner: list[str] = []
    with _network_guard("fixture", outer, True):
        with _network_guard("test", inner, True):
            module = importlib.import_module(transport_name)
            with pytest.raises(NetworkBlocked, match="test sent"):
                _send(module, False)
        with pytest.raises(NetworkBlocked, match="fixture sent"):
            _send(module, False)
    assert _send(module, False) == "sent"
    assert (len(outer), len(inner)) == (1, 1)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_request_answered_by_a_mock_of_httpcores_pool_is_not_refused(
    monkeypatch: pytest.MonkeyPatch, is_async: bool
) -> None:
    """respx (default ``using="httpcore"``) mocks the pool's ``handle_request``: not refused.

    Such a request is answered in the process, as the guard's own message
    advises ("or mock it"); respx#131 and pytest_httpx#165 are the peers'
    reports of where a mock sits. The guard refused it at httpx's transport,
    above the pool. An unmocked request stays refused, and the guard's method
    keeps its name: respx patches only a method named as the one it targets.
    """
    import httpcore
    import httpx

    pool: Any = httpcore.AsyncConnectionPool if is_async else httpcore.ConnectionPool
    attr = "handle_async_request" if is_async else "handle_request"

    def mocked(self: Any, request: Any) -> Any:
        return httpcore.Response(200, content=b"mocked")

    async def amocked(self: Any, request: Any) -> Any:
        return httpcore.Response(200, content=b"mocked")

    async def get(url: str) -> str:
        async with httpx.AsyncClient() as client:
            return (await client.get(url)).text

    def send(url: str) -> str:
        if is_async:
            return asyncio.run(get(url))
        with httpx.Client() as client:
            return client.get(url).text

    blocked: list[str] = []
    with _network_guard("test_x", blocked, True):
        assert getattr(pool, attr).__name__ == attr
        with pytest.raises(NetworkBlocked):  # not mocked: refused
            send("http://127.0.0.1:9/")
        monkeypatch.setattr(pool, attr, amocked if is_async else mocked)
        assert send("http://api.example.test/x") == "mocked"
        monkeypatch.undo()
    assert blocked == ["GET http://127.0.0.1:9/"]
