"""extract_boxed and format_score: hand-written tables, hostile strings."""

from __future__ import annotations

import random

import pytest

from marti_env.rewards import boxed, extract_boxed, format_score

BOXED_TABLE = [
    # (response, expected content)
    (r"The answer is \boxed{5}.", "5"),
    (r"\boxed{1} then \boxed{2}", "2"),  # the last one wins
    (r"\boxed {42}", "42"),  # space before the brace
    ("\\boxed\n{42}", "42"),
    (r"\fbox{7}", "7"),
    (r"\boxed{3} and \fbox{4}", "4"),
    (r"\fbox{4} and \boxed{3}", "3"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not nest
    (r"\boxed{a\}b}", r"a\}b"),
    (r"\boxed{ 12 }", "12"),  # surrounding whitespace stripped
    (r"\boxed{\boxed{5}}", "5"),  # nested: the inner box starts last
    (r"\boxed{2} but see \boxedanswer", "2"),  # a longer control word is no box
    (r"\boxed{2} in \boxed format", "2"),  # prose mention without a brace is skipped
    (r"$\boxed{x^2+1}$", "x^2+1"),
    (r"\boxed{(3, -1)}", "(3, -1)"),
    (r"\boxed{[2, 5)}", "[2, 5)"),
    (r"\boxed{\text{(C)}}", r"\text{(C)}"),
    ("\\boxed{ünïcødé π}", "ünïcødé π"),
    # no answer
    ("", None),
    ("the answer is 5", None),
    (r"\boxed{}", None),
    (r"\boxed{   }", None),
    (r"\boxed", None),
    (r"\boxed{5", None),  # cut off by the token limit
    (r"\boxed{1} ... \boxed{2", None),  # the final box is incomplete: no fallback
    (r"\boxed{\frac{1}{2}", None),
    ("boxed{5}", None),
    (r"\box{5}", None),
    (r"\boxed 5", None),
    ("\\boxed{5\\}", None),  # the only closing brace is escaped
]


@pytest.mark.parametrize(("response", "expected"), BOXED_TABLE)
def test_extract_boxed_table(response: str, expected: str | None) -> None:
    assert extract_boxed(response) == expected


@pytest.mark.parametrize(("response", "expected"), BOXED_TABLE)
def test_format_score_matches_extraction(response: str, expected: str | None) -> None:
    assert format_score(response) == (0.0 if expected is None else 1.0)


def _random_text(rng: random.Random, n: int) -> str:
    alphabet = "0123456789abcxyz{}{}\\\\ ^_()[]$.,\n" + "\\boxed" + "\\fbox"
    return "".join(rng.choice(alphabet) for _ in range(n))


@pytest.mark.timeout(120)
def test_hostile_strings_never_raise() -> None:
    rng = random.Random(0)
    hostile = [
        "{" * 100_000,
        "}" * 100_000,
        "\\boxed{" + "{" * 100_000,
        "\\boxed{" * 20_000,
        "\\boxed" * 20_000,
        "\\boxed " * 20_000 + "{5}",
        "\\" * 100_001,
        "\\boxed{" + "\\" * 100_001,
        "\x00\ud800\udfff\U0010ffff",
        bytes(rng.getrandbits(8) for _ in range(100_000)).decode("utf-8", errors="replace"),
        _random_text(rng, 100_000),
    ]
    for text in hostile:
        result = extract_boxed(text)
        assert result is None or isinstance(result, str)
        assert format_score(text) in (0.0, 1.0)
    # The ones whose answer we know:
    assert extract_boxed("\\boxed " * 20_000 + "{5}") == "5"
    assert extract_boxed("{" * 100_000 + "\\boxed{7}") == "7"
    assert extract_boxed("\\boxed{" + "a{" * 50_000 + "}" * 50_001) == "a{" * 50_000 + "}" * 50_000


def test_non_str_is_no_answer() -> None:
    assert extract_boxed(None) is None  # type: ignore[arg-type]
    assert extract_boxed(b"\\boxed{5}") is None  # type: ignore[arg-type]


def test_long_tails_match_braces_like_the_loop(monkeypatch) -> None:
    """Past 4,096 characters braces are matched in numpy; it must agree with the loop on
    random brace/backslash soup, escapes and lone surrogates included."""
    rng = random.Random(3)
    pad = " " * 5_000  # makes every tail long
    for _ in range(500):
        body = "".join(rng.choice("{}\\\\ab\ud800") for _ in range(rng.randrange(0, 40)))
        text = "\\boxed{" + body + "}" + pad
        long_result = boxed._match_braces(text, 6)
        monkeypatch.setattr(boxed, "_LONG_TAIL", 10**9)
        assert boxed._match_braces(text, 6) == long_result, body
        monkeypatch.undo()
    # "\\{" is an escaped backslash then a real brace; "\{" is an escaped brace
    assert extract_boxed("\\boxed{a\\\\{b}c}" + pad) == "a\\\\{b}c"
    assert extract_boxed("\\boxed{a\\{b}" + pad) == "a\\{b"
    assert extract_boxed("\\boxed{" + "7" * 1_000_000 + "}") == "7" * 1_000_000


def test_last_result_is_remembered_per_string_object() -> None:
    text = "so \\boxed{" + "{}" * 10 + "5}"
    assert extract_boxed(text) == "{}" * 10 + "5"
    assert extract_boxed(text) == "{}" * 10 + "5"  # the same object: remembered
    other = "".join(["so \\boxed{", "6}"])  # a different object, new content
    assert extract_boxed(other) == "6"
    assert extract_boxed(text) == "{}" * 10 + "5"
