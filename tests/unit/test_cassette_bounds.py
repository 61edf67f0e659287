"""Hostile cassettes are read with bounds; cut-off streams are refused; exit codes say who erred.

Issue 12 #11: a 674-byte YAML alias bomb ran 38 s and ended in ``MemoryError``;
deep nesting gave ``RecursionError``; a 0.5 MB gzip body inflated to 400 MB, and
under a memory cap the error blamed the journal. Issue 16: a stream without its
final event imported as a finished step; a malformed cassette exited 2 (usage).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.recorders.cassettes import (
    CassetteError,
    CassetteLimits,
    import_cassette,
    load_cassette,
)

URI = "https://api.openai.com/v1/chat/completions"
ANTHROPIC_URI = "https://api.anthropic.com/v1/messages"


def _interaction(
    body: bytes | str,
    headers: dict[str, list[str]] | None = None,
    uri: str = URI,
) -> dict[str, Any]:
    return {
        "request": {
            "method": "POST",
            "uri": uri,
            "body": {"string": json.dumps({"model": "m", "messages": []})},
            "headers": {"Content-Type": ["application/json"]},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": headers or {"Content-Type": ["application/json"]},
            "body": {"string": body},
        },
    }


def _write(path: Path, interactions: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"interactions": interactions, "version": 1}))
    return path


_VALID = yaml.safe_dump({"interactions": [_interaction('{"id": "x"}')], "version": 1})


def _bomb(levels: int, fan: int, leaf: str = "lol") -> str:
    """A YAML "billion laughs": each level lists the one before ``fan`` times, by alias."""
    lines = [f'l0: &l0 "{leaf}"']
    for level in range(1, levels + 1):
        refs = ", ".join(f"*l{level - 1}" for _ in range(fan))
        lines.append(f"l{level}: &l{level} [{refs}]")
    return _VALID + "extra:\n" + "".join(f"  {line}\n" for line in lines)


def test_alias_bomb_is_refused_quickly_naming_the_limit(tmp_path: Path) -> None:
    """The 9x9 "lol" alias bomb of yaml/pyyaml#235 (under 1 KB) is refused by the expansion
    limit at once, not by MemoryError after the data is walked."""
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(9, 9))
    assert path.stat().st_size < 1000
    with pytest.raises(CassetteError, match="max_expanded_bytes") as info:
        load_cassette(path)
    assert info.value.limit == "max_expanded_bytes"
    assert "top-level 'extra'" in str(info.value)


def test_one_big_string_aliased_many_times_is_refused(tmp_path: Path) -> None:
    """A large string aliased inside an interaction counts once per alias, naming it."""
    item = _interaction('{"id": "x"}')
    text = yaml.safe_dump({"interactions": [item], "version": 1})
    text = "a_big: &big " + "x" * 10_000 + "\n" + text
    text = text.replace("message: OK", "message: [" + ", ".join(["*big"] * 200) + "]")
    path = tmp_path / "big.yaml"
    path.write_text(text)
    limits = CassetteLimits(max_expanded_bytes=1_000_000)
    with pytest.raises(CassetteError, match=r"interaction 0: .*max_expanded_bytes=1000000"):
        load_cassette(path, limits=limits)


def test_alias_count_is_capped(tmp_path: Path) -> None:
    """More aliases than max_aliases stop the parser at the line where it went over."""
    path = tmp_path / "aliases.yaml"
    path.write_text(_VALID + "a: &a 1\nrefs: [" + ", ".join(["*a"] * 50) + "]\n")
    with pytest.raises(CassetteError, match=r"line \d+, column \d+: .*max_aliases=10") as info:
        load_cassette(path, limits=CassetteLimits(max_aliases=10))
    assert info.value.limit == "max_aliases"
    load_cassette(path, limits=CassetteLimits(max_aliases=50))


@pytest.mark.parametrize("fmt", ["yaml-flow", "yaml-block", "json"])
def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path, fmt: str) -> None:
    """Nesting 50,000 deep gives CassetteError(max_depth), never RecursionError."""
    depth = 50_000
    if fmt == "json":
        text = '{"interactions": [], "deep": ' + "[" * depth + "]" * depth + "}"
        path = tmp_path / "deep.json"
    elif fmt == "yaml-flow":
        text = _VALID + "deep: " + "[" * depth + "]" * depth + "\n"
        path = tmp_path / "deep.yaml"
    else:
        text = _VALID + "deep:\n" + "".join(" " * i + "- \n" for i in range(1, 2000))
        path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(CassetteError, match="max_depth") as info:
        load_cassette(path)
    assert info.value.limit == "max_depth"


def test_self_referencing_alias_is_refused(tmp_path: Path) -> None:
    """A list that contains itself (``&a [*a]``) nests forever: refused by max_depth."""
    path = tmp_path / "loop.yaml"
    path.write_text(_VALID + "loop: &a [1, *a]\n")
    with pytest.raises(CassetteError, match="max_depth"):
        load_cassette(path)


def test_gzip_bomb_stops_at_the_body_limit(tmp_path: Path) -> None:
    """A small gzip body inflating to 80 MiB is refused at max_body_bytes (64 MiB) by default."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    chunk = b"\0" * (1 << 20)
    body = b"".join(squeeze.compress(chunk) for _ in range(80)) + squeeze.flush()
    assert len(body) < 200_000
    headers = {"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]}
    path = _write(tmp_path / "gz.yaml", [_interaction(body, headers)])
    journal = redrive.open_journal(":memory:")
    with pytest.raises(CassetteError, match=r"interaction 0 \(POST .*max_body_bytes") as info:
        import_cassette(path, journal)
    assert info.value.limit == "max_body_bytes"
    assert journal.runs() == []


def test_decoded_bodies_are_capped_over_the_whole_cassette(tmp_path: Path) -> None:
    """Bodies under the per-body limit still may not add up past max_total_body_bytes."""
    headers = {"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]}
    body = gzip.compress(json.dumps({"id": "x", "pad": " " * 600}).encode())
    path = _write(tmp_path / "many.yaml", [_interaction(body, headers) for _ in range(3)])
    limits = CassetteLimits(max_body_bytes=1000, max_total_body_bytes=1500)
    with pytest.raises(CassetteError, match=r"interaction 2 .*max_total_body_bytes=1500"):
        import_cassette(path, redrive.open_journal(":memory:"), limits=limits)
    import_cassette(path, redrive.open_journal(":memory:"), limits=CassetteLimits())


def test_file_size_is_capped(tmp_path: Path) -> None:
    """A file over max_file_bytes is refused before it is read."""
    path = _write(tmp_path / "c.yaml", [_interaction('{"id": "x"}')])
    with pytest.raises(CassetteError, match="max_file_bytes=10"):
        load_cassette(path, limits=CassetteLimits(max_file_bytes=10))


@given(
    levels=st.integers(1, 8),
    fan=st.integers(1, 8),
    leaf=st.integers(1, 200),
    limits=st.builds(
        CassetteLimits,
        max_depth=st.integers(3, 12),
        max_aliases=st.integers(1, 60),
        max_expanded_bytes=st.integers(1_000, 200_000),
    ),
)
def test_any_alias_graph_parses_within_the_limits_or_is_refused_by_one(
    levels: int, fan: int, leaf: int, limits: CassetteLimits
) -> None:
    """Random alias graphs: either read, or refused by the one limit they exceed (never another
    error); one whose alias count, depth or expanded size is over a limit is always refused."""
    text = _bomb(levels, fan, "x" * leaf)
    aliases = levels * fan
    expanded = leaf * fan**levels  # a lower bound: the leaf strings of the last level alone
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.yaml"
        path.write_text(text)
        try:
            load_cassette(path, limits=limits)
        except CassetteError as exc:
            assert exc.limit in ("max_aliases", "max_depth", "max_expanded_bytes"), exc
            return
    assert aliases <= limits.max_aliases
    assert levels + 2 <= limits.max_depth
    assert expanded <= limits.max_expanded_bytes


# -- streams cut off while recording -------------------------------------------------------

_SSE = {"Content-Type": ["text/event-stream; charset=utf-8"]}


@pytest.mark.parametrize(
    ("uri", "events", "missing"),
    [
        (URI, ['data: {"id": "c", "choices": []}\n\n'], r"data: \[DONE\]"),
        (
            "https://api.openai.com/v1/responses",
            ['event: response.created\ndata: {"type": "response.created"}\n\n'],
            "response.completed",
        ),
        (
            ANTHROPIC_URI,
            [
                'event: message_start\ndata: {"type": "message_start", "message": {}}\n\n',
                'event: content_block_delta\ndata: {"type": "content_block_delta"}\n\n',
            ],
            "message_stop",
        ),
    ],
)
def test_a_stream_without_its_final_event_is_refused(
    tmp_path: Path, uri: str, events: list[str], missing: str
) -> None:
    """A streamed response cut off before its final event is no finished step: the import is
    refused naming the interaction and the missing event, and nothing is written."""
    path = _write(tmp_path / "cut.yaml", [_interaction("".join(events), _SSE, uri)])
    journal = redrive.open_journal(":memory:")
    with pytest.raises(CassetteError, match=rf"interaction 0 \(POST .*{missing}"):
        import_cassette(path, journal)
    assert journal.runs() == []


def test_a_complete_stream_imports(tmp_path: Path) -> None:
    """The same stream with its final event imports as before."""
    body = 'data: {"id": "c", "choices": []}\n\ndata: [DONE]\n\n'
    path = _write(tmp_path / "whole.yaml", [_interaction(body, _SSE)])
    assert import_cassette(path, redrive.open_journal(":memory:")) == "cassette:whole"


# -- the command line ----------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue()


def test_bad_cassette_exits_65_and_usage_errors_exit_2(tmp_path: Path) -> None:
    """import-cassette: bad input (malformed, over a limit, cut off) exits EXIT_DATA (65), a
    usage error 2; a refused cassette leaves no journal behind."""
    url = str(tmp_path / "runs.duckdb")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb(9, 9))
    cut = _write(tmp_path / "cut.yaml", [_interaction('data: {"id": "c"}\n\n', _SSE)])
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("interactions: [\n")
    for path in (bomb, cut, garbage):
        code, err = _cli("--journal", url, "import-cassette", str(path))
        assert code == cli.EXIT_DATA == 65, err
        assert err.startswith("redrive import-cassette: CassetteError: ") and "journal" not in err
        assert not os.path.exists(url)
    code, err = _cli("--journal", url, "import-cassette", str(cut), "--provider", "nope")
    assert code == cli.EXIT_USAGE


def test_running_out_of_memory_blames_the_cassette_not_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MemoryError while reading a cassette is reported as the cassette's, exit 65."""
    from redrive.recorders import cassettes

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(cassettes, "prepare_cassette", exhausted)
    path = _write(tmp_path / "c.yaml", [_interaction('{"id": "x"}')])
    url = str(tmp_path / "runs.duckdb")
    code, err = _cli("--journal", url, "import-cassette", str(path))
    assert code == cli.EXIT_DATA
    assert "CassetteError" in err and "c.yaml" in err and "memory" in err
    assert "cannot open journal" not in err and not os.path.exists(url)


def test_brotli_decoding_stops_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A brotli body is fed to the decoder in pieces and stops past the limit (a bomb costs at
    most the limit), and a truncated stream is refused; shown with a stand-in decoder."""
    from redrive.recorders import _exchange

    class Decompressor:
        def __init__(self) -> None:
            self.fed = 0

        def process(self, data: bytes) -> bytes:
            self.fed += len(data)
            return b"x" * (100 * len(data))  # inflates 100x

        def is_finished(self) -> bool:
            return self.fed >= 8192

    brotli = type("brotli", (), {"Decompressor": Decompressor})
    monkeypatch.setattr(_exchange, "_brotli", lambda: brotli)
    with pytest.raises(_exchange.ContentEncodingError, match="more than 100000 bytes"):
        _exchange.decode_content(b"b" * 100_000, ["br"], limit=100_000)
    with pytest.raises(_exchange.ContentEncodingError, match="truncated"):
        _exchange.decode_content(b"b" * 10, ["br"], limit=100_000)
    assert len(_exchange.decode_content(b"b" * 8192, ["br"], limit=1_000_000)) == 819_200


def test_brotli_output_is_drained_in_bounded_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a decoder that bounds its output (brotli >= 1.1), no piece exceeds what is left of
    the limit, and decoding stops once past it; shown with a stand-in decoder."""
    from redrive.recorders import _exchange

    asked: list[int] = []

    class Decompressor:
        def __init__(self) -> None:
            self.pending = 0

        def process(self, data: bytes, output_buffer_limit: int) -> bytes:
            asked.append(output_buffer_limit)
            self.pending += 1000 * len(data)
            give = min(self.pending, output_buffer_limit, 700)  # at most 700 bytes a call
            self.pending -= give
            return b"x" * give

        def can_accept_more_data(self) -> bool:
            return self.pending == 0

        def is_finished(self) -> bool:
            return self.pending == 0

    brotli = type("brotli", (), {"Decompressor": Decompressor})
    monkeypatch.setattr(_exchange, "_brotli", lambda: brotli)
    with pytest.raises(_exchange.ContentEncodingError, match="more than 5000 bytes"):
        _exchange.decode_content(b"b" * 1_000_000, ["br"], limit=5000)
    assert max(asked) == 5001 and len(asked) == 8  # stopped once past the limit
    asked.clear()
    assert len(_exchange.decode_content(b"b" * 3, ["br"], limit=10_000)) == 3000
    assert asked == [10_001, 9301, 8601, 7901, 7201]  # pending output drained, each bounded
