"""JobState.with_payload, which every generated `_state()` calls: a payload that does not decode
is kept as stored, with one line saying why, instead of raising out of state()."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from inboxgen.descriptor import JobState

TIMES: dict[str, Any] = {"state": "dead", "id": 7, "attempt": 3, "due": None,
                         "finished_at": None}


class Email(msgspec.Struct):
    subject: str


def test_a_payload_that_decodes_is_given_decoded() -> None:
    found = JobState.with_payload(**TIMES, stored=b'{"subject": "hi"}',
                                  decode=lambda raw: msgspec.json.decode(raw, type=Email))
    assert found == JobState(**TIMES, payload=Email("hi"))
    assert found.payload_error is None


def test_null_stays_none_without_decoding() -> None:
    def decode(raw: Any) -> Any:
        raise AssertionError("NULL is not decoded")

    assert JobState.with_payload(**TIMES, stored=None, decode=decode).payload is None


@pytest.mark.parametrize(("stored", "decode", "error"), [
    (b'{"to": "x"}', lambda raw: msgspec.json.decode(raw, type=Email),
     "ValidationError: Object missing required field `subject`"),
    ("{not json", msgspec.json.decode,
     "DecodeError: JSON is malformed: object keys must be strings (byte 1)"),
    ({"to": "x"}, lambda raw: msgspec.convert(raw, type=Email),
     "ValidationError: Object missing required field `subject`"),
])
def test_a_payload_that_does_not_decode_is_kept_as_stored_with_its_error(
        stored: Any, decode: Any, error: str) -> None:
    found = JobState.with_payload(**TIMES, stored=stored, decode=decode)
    assert (found.payload, found.payload_error) == (stored, error)
    assert (found.state, found.id, found.attempt) == ("dead", 7, 3)


def test_the_error_is_one_line() -> None:
    def decode(raw: Any) -> Any:
        raise ValueError("first line\n  second line\n")

    def silent(raw: Any) -> Any:
        raise KeyError()

    assert JobState.with_payload(**TIMES, stored="x", decode=decode).payload_error == (
        "ValueError: first line second line")
    assert JobState.with_payload(**TIMES, stored="x", decode=silent).payload_error == "KeyError"
