"""The per-step fast paths write the bytes the frames API defines (issue 14, items 3 and 5).

A step's frame is packed from the tree the writer already made canonical
(``make_frame(tree=True)``), and a scrubber without ``redact=`` patterns walks
without path strings and caches its text rules. These tests pin that nothing
of that changes a byte: every payload equals the full canonical walk of its
tree, every chain equals :func:`redrive.frames.chain_of`, every key equals
:func:`redrive.frames.call_key` of its request, and the committed fixture
journals still read back to the same bytes and replay strictly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive import _canonical
from redrive._scrub import Scrubber, mask_text
from redrive.frames import GENESIS, Frame, call_key, chain_of, pack_tree
from redrive.replay import expand_frames
from redrive.replay._policy import compile_paths, match_view
from redrive.storage import MemoryJournal
from redrive.storage.rdj import import_run
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "fixtures" / "runs"


def _tree(payload: bytes) -> Any:
    """The payload's msgpack tree with its ext values kept as ``ExtType``."""
    return msgpack.unpackb(
        payload, raw=False, strict_map_key=False, ext_hook=msgpack.ExtType, use_list=True
    )


def _check_frames(frames: list[Frame]) -> None:
    """Payload bytes, chains and keys of ``frames`` are what the frames API computes."""
    prev = GENESIS
    for frame, data in expand_frames(frames):
        # the full walk (what make_frame did before tree=True) gives the same bytes
        assert pack_tree(_canonical._canonical(_tree(frame.payload), "payload", 0)) == frame.payload
        assert _canonical.encode(_tree(frame.payload)) == frame.payload
        assert frame.chain == chain_of(
            prev,
            run_id=frame.run_id,
            seq=frame.seq,
            kind=frame.kind,
            name=frame.name,
            key=frame.key,
            payload=frame.payload,
            at=frame.at,
        )
        prev = frame.chain
        if frame.kind == "model_request":
            assert frame.key == call_key(frame.name, match_view(data["args"]))
        elif frame.kind == "tool_start":
            assert frame.key == call_key(frame.name, match_view(data["args"], kind="tool"))


def _record(journal: MemoryJournal, run_id: str, redact: list[str]) -> None:
    @redrive.model(name="model:m")  # type: ignore[untyped-decorator]
    def model(req: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": "done sk-" + "a" * 30, "n": [1, 2.5, -0.0]}

    @redrive.tool(name="t", restart_safe=False)
    def tool(ref: str, headers: list[list[str]] | None = None) -> dict[str, Any]:
        return {"ref": ref, "token": "x", "url": "https://u:pw@host/?key=k"}

    with redrive.run(journal, run_id, redact=redact):
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "Authorization: Bearer abc12345678 é"},
        ]
        for i in range(4):
            msgs.append({"role": "user", "content": f"q{i} password=hunter2 ünïcode"})
            model({"messages": msgs, "temperature": 0.0, "password": "p", "big": 2**70})
            tool(str(i), headers=[["Authorization", "x"], ["Accept", "y"]])
            msgs.append({"role": "assistant", "content": f"a{i}"})


def test_recorded_frames_are_the_frames_api_bytes() -> None:
    """A recorded run (prefix deltas, secrets, stored values) has exactly the API's bytes."""
    for run_id, redact in (("plain", []), ("redacting", ["$..password", "$.args.ref"])):
        journal = MemoryJournal()
        _record(journal, run_id, redact)
        frames = list(journal.frames(run_id))
        assert len(frames) > 10
        _check_frames(frames)


def test_fixture_journals_keep_their_bytes_and_replay() -> None:
    """Every committed fixture journal reads back to the same bytes, and the passing ones replay."""
    paths = sorted(RUNS.glob("*/*.rdj"))
    assert paths
    for path in paths:
        journal = MemoryJournal()
        record = import_run(path, journal)
        _check_frames(list(journal.frames(record.run_id)))
    report = redrive.check_runs([RUNS / "pass"], import_paths=[str(ROOT)])
    assert report.ok and len(report.results) == 2


_PIECES = [*"abAZ09 :=&?'\"\\{}[]/@-_.é\n", "sk-", "Bearer ", "password", "token", "key="]
_PIECES += ["https://u:p@", "data: ", "AKIA", "eyJ", "a" * 20, "12345678"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)
_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | _TEXT
    | st.binary(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            _TEXT | st.sampled_from(["password", "api_key", "headers", "max_tokens", "Token"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=examples(default=60, ci=120, thorough=2000), deadline=None)
@given(_JSONISH)
def test_unrooted_scrub_is_the_rooted_walk(value: Any) -> None:
    """Without patterns the scrubber (no paths, cached text) gives the rooted walk's result."""
    tree = _canonical.canonical(value)
    never = Scrubber(compile_paths(["$.no_such_field_anywhere"]))
    assert Scrubber().value(tree) == never.value(tree)
    assert Scrubber(defaults=False).value(tree) is tree


@settings(max_examples=examples(default=60, ci=120, thorough=2000), deadline=None)
@given(_TEXT)
def test_cached_mask_text_is_the_rules(text: str) -> None:
    """mask_text (cached) equals the uncached rules, and keeps the object when nothing changes."""
    from redrive._scrub import _mask

    expected = text if len(text) < 8 else _mask(text, frozenset())  # the old first check
    assert mask_text(text) == expected
    assert mask_text(text) == expected  # a cache hit
    if expected is text:
        assert mask_text(text) is text


def test_the_mask_cache_keeps_no_secret_it_masked() -> None:
    """The cache of mask_text holds digests and masked copies, never a masked secret."""
    from redrive import _scrub

    secret = "sk-proj-" + "Zq9" * 16
    text = f"calling the API failed: Authorization: Bearer {secret} (status 401)"
    masked = mask_text(text)
    assert secret not in masked
    assert mask_text(text) == masked  # a cache hit gives the same masked copy
    with _scrub._CACHE_LOCK:
        entries = list(_scrub._MASKED.items())
    assert entries, "the text was not cached"
    for (digest, _names), value in entries:
        assert isinstance(digest, bytes) and len(digest) == 16
        assert value is None or secret not in value


@settings(max_examples=examples(default=60, ci=120, thorough=2000), deadline=None)
@given(
    st.sampled_from(["model_request", "model_response", "tool_start", "note", "run_end"]),
    st.dictionaries(st.sampled_from(["args", "result", "token", "data", "x"]), _JSONISH),
)
def test_unrooted_payload_scrub_is_the_rooted_walk(kind: str, payload: dict[str, Any]) -> None:
    """A frame's payload: without patterns, the same result as the rooted walk."""
    tree = _canonical.canonical(payload)
    never = Scrubber(compile_paths(["$.no_such_field_anywhere"]))
    assert Scrubber().payload(kind, tree) == never.payload(kind, tree)
