"""SSE framing: events split at empty lines whatever the line ends and the read boundaries."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from redrive.recorders._sse import is_terminal_event, parse_event, split_events

LINE_ENDS = st.sampled_from([b"\r\n", b"\n", b"\r"])
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
    max_size=12,
)
EVENTS = st.lists(
    st.tuples(st.one_of(st.none(), st.sampled_from(["delta", "ping", "message_stop"])), TEXT),
    min_size=1,
    max_size=6,
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[tuple[str | None, str]], bytes]:
    """Events and their bytes, each line ended by a random line end (mixed freely)."""
    events = draw(EVENTS)
    out = b""

    def end() -> bytes:
        # a CR followed by an LF is one CRLF line end, not two: never draw LF after CR
        choice = draw(LINE_ENDS)
        return b"\r\n" if choice == b"\n" and out.endswith(b"\r") else choice

    for name, data in events:
        if name is not None:
            out += b"event: " + name.encode()
            out += end()
        out += b"data: " + data.encode()
        out += end()
        out += end()  # the empty line that ends the event
    return events, out


@given(streams(), st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_events_survive_any_line_ends_and_read_boundaries(
    stream: tuple[list[tuple[str | None, str]], bytes], cuts: list[int]
) -> None:
    """Fed in reads cut anywhere, the split gives back each event (name, data), in order."""
    events, data = stream
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    rest, found = b"", []
    for start, end in itertools.pairwise(bounds):
        complete, rest = split_events(rest + data[start:end])
        found.extend(complete)
    if rest:  # the stream's end: what is left is its last event (a final CR)
        found.append(rest)
    parsed = [parse_event(e) for e in found if parse_event(e).data is not None]
    assert [(p.name, p.data) for p in parsed] == events
    assert b"".join(found) == data


def test_a_cr_cut_from_its_lf_does_not_make_an_empty_event() -> None:
    """A CRLF cut between two reads ends one line, not two."""
    first, rest = split_events(b"data: a\r\n\r")
    assert first == [] and rest == b"data: a\r\n\r"
    events, rest = split_events(rest + b"\ndata: [DONE]\r\n\r\n")
    assert events == [b"data: a\r\n\r\n", b"data: [DONE]\r\n\r\n"] and rest == b""
    assert is_terminal_event(events[1])
