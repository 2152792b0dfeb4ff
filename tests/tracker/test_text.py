"""One line of text (:func:`tracker.text.one_line`), the one definition every error message,
log line, subject and chat card uses."""

from __future__ import annotations

from tracker.text import one_line


def test_line_breaks_tabs_and_control_characters_become_one_space() -> None:
    assert one_line("  a\r\n\tb\x00\x1b[31mc\u2028d\u2029 e\x7f  ") == "a b [31mc d e"


def test_bytes_are_decoded_with_a_bad_byte_replaced() -> None:
    assert one_line(b"gpu\xff\nrun") == "gpu\ufffd run"


def test_an_exception_is_its_message_or_its_type() -> None:
    assert one_line(OSError("disk\nfull")) == "disk full"
    assert one_line(TimeoutError()) == "TimeoutError"
    assert one_line(ValueError(" \n ")) == "ValueError"
    assert one_line("") == ""


def test_a_long_line_is_cut_with_an_ellipsis_at_the_limit() -> None:
    assert one_line("abcdef", 6) == "abcdef"
    assert one_line("abc defg", 5) == "abc…"  # the space before the cut is not kept
    assert len(one_line("x" * 500, 80)) == 80
