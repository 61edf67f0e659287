"""A text holding none of the masking rules' signs has nothing to mask (no search, no cache)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redrive import _masking
from redrive._masking import _DEFAULT_SPANS, _signless, _Spans, mask_text

#: Letters and signs the rules look for, so that generated texts often hold secrets' shapes.
_ALPHABET = "abcdefABJXYZ0123456789 \t\n\"':=-_./+~earerEARERskghpxoxAKIAAIzahfeyJ"


@given(st.text(alphabet=_ALPHABET, max_size=80) | st.text(max_size=80))
def test_a_signless_text_has_no_span_under_any_rule(text: str) -> None:
    """The kind: ``_signless`` is never True for a text some rule masks (field names too)."""
    if _signless(text):
        assert _DEFAULT_SPANS.find(text) == []
        assert _Spans(frozenset({"ref", "detail", "x"})).find(text) == []


def test_a_text_without_signs_is_not_searched_or_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool result's text seen once costs neither a search nor a digest in the cache."""
    text = "[step 000000007] The customer asked about the refund policy " * 20

    def no_search(self: _Spans, text: str) -> list[tuple[int, int]]:
        raise AssertionError("searched")

    monkeypatch.setattr(_Spans, "find", no_search)
    monkeypatch.setattr(_Spans, "scan", no_search)
    before = len(_masking._MASKED)
    assert mask_text(text) is text
    assert len(_masking._MASKED) == before
