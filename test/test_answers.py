"""The official letter extraction, exactly: a table of official results and a seeded generator.

The table's expected values are what the official code (EmbodiedCity/Embodied-R.code at 174ae99)
returns for each string. The generator checks thousands of random strings against a character-
by-character reading of the rules written here independently of the regular expressions.
"""

from __future__ import annotations

import random
import string

import pytest

from embodied_r_ros.core.answers import (
    official_eval_letter,
    official_normalize,
    reference_normalize,
    think_letter,
)
from embodied_r_training.rewards import accuracy_reward

# (text, training normalisation, reference-reply normalisation, evaluation extractor)
TABLE: list[tuple[str, str, str, str]] = [
    # rule (a): $\boxed{X}$, last match, exactly one letter
    ("$\\boxed{C}$", "C", "C", "$\\BOXED{C}$"),  # evaluation has no boxed rule
    ("$\\boxed{a}$ then $\\boxed{D}$", "D", "D", "$\\BOXED{A}$ THEN $\\BOXED{D}$"),
    ("$\\boxed{AB}$ C", "C", "C", "$\\BOXED{AB}$ C"),
    ("$\\boxed{ b }$", "B", "B", "$\\BOXED{ B }$"),
    ("<answer>A</answer> $\\boxed{E}$", "E", "E", "A"),
    ("$\\boxed{I}$", "$\\BOXED{I}$", "$\\BOXED{I}$", "$\\BOXED{I}$"),
    # rule (b): "answer" + whitespace + letter, FIRST match, anything may follow
    ("I answer based on the view", "B", "B", "I ANSWER BASED ON THE VIEW"),
    ("the answer is C", "C", "C", "THE ANSWER IS C"),
    ("Answer  d", "D", "D", "ANSWER  D"),
    ("answer\nA then answer B", "A", "A", "ANSWER\nA THEN ANSWER B"),
    ("answers B", "B", "B", "ANSWERS B"),  # (b) finds nothing; (d) finds B
    ("answer:B", "B", "B", "ANSWER:B"),
    ("ANSWER Cat.", "C", "C", "ANSWER CAT."),
    ("<answer> B </answer>", "B", "B", "B"),
    ("<think>x</think><answer>C</answer>", "C", "C", "C"),
    ("The final answer: <answer>D</answer>", "D", "D", "D"),
    # rule (c): standalone letter + optional whitespace + dot, last match, no overlaps
    ("A.B.", "A", "A", "A"),
    ("A. B.", "B", "B", "B"),
    ("1A.", "A", "A", "A"),
    ("2B", "B", "B", "2B"),
    ("e.g. <answer>B</answer>", "E", "E", "B"),
    ("e.g. the chair", "E", "E", "E"),
    ("i.e. C", "E", "E", "E"),  # "e." is a dotted letter
    ("A .", "A", "A", "A"),
    ("A \n .", "A", "A", "A"),
    ("(B).", "B", "B", "(B)."),
    ("xA.", "XA.", "XA.", "XA."),
    ("B.C.", "B", "B", "B"),
    ("B. C. D.", "D", "D", "D"),
    ("Option c. is right", "C", "C", "C"),
    ("see H.", "H", "H", "H"),
    ("A..", "A", "A", "A"),
    ("é.A.", "A", "A", "A"),
    ("中B.", "B", "B", "B"),
    # rule (d): standalone letter not followed by a letter, last match, no overlaps
    ("A B", "A", "A", "A B"),
    ("A,B", "A", "A", "A,B"),
    ("A, B", "B", "B", "A, B"),
    ("A B C", "C", "C", "A B C"),
    ("A  B", "B", "B", "A  B"),
    ("c", "C", "C", "C"),
    ("(b)", "B", "B", "(B)"),
    ("B)", "B", "B", "B)"),
    ("near the chair", "NEAR THE CHAIR", "NEAR THE CHAIR", "NEAR THE CHAIR"),
    ("a b", "A", "A", "A B"),
    ("<answer>B</answer>", "B", "B", "B"),
    ("<answer>Bx</answer>", "<ANSWER>BX</ANSWER>", "BX", "B"),
    ("I think A", "A", "A", "I THINK A"),
    ("I", "I", "I", "I"),
    ("Z", "Z", "Z", "Z"),
    ("9C9", "C", "C", "9C9"),
    ("_D_", "D", "D", "_D_"),
    ("-A-B-", "A", "A", "-A-B-"),
    ("A-B", "A", "A", "A-B"),  # "A-" takes the "-" B would need
    # rule (e): the whole stripped text, upper-cased
    ("  nothing here \n", "NOTHING HERE", "NOTHING HERE", "NOTHING HERE"),
    ("", "", "", ""),
    ("   ", "", "", ""),
    ("yes", "YES", "YES", "YES"),
    ("<answer>yes</answer>", "<ANSWER>YES</ANSWER>", "YES", "<ANSWER>YES</ANSWER>"),
    ("<answer> left </answer>", "<ANSWER> LEFT </ANSWER>", "LEFT", "<ANSWER> LEFT </ANSWER>"),
    ("<answer><answer>ok</answer></answer>", "<ANSWER><ANSWER>OK</ANSWER></ANSWER>",
     "<ANSWER>OK", "<ANSWER><ANSWER>OK</ANSWER></ANSWER>"),
    ("IJK", "IJK", "IJK", "IJK"),
    # mixtures: the rule order decides
    ("<think>A is closest</think> so A.", "A", "A", "A"),
    ("<think>b. wrong</think><answer>C</answer>", "B", "B", "C"),  # training: rule (c)
    ("<think>I answer based on it</think><answer>C</answer>", "B", "B", "C"),
    ("<think>a b</think><answer>c</answer>", "C", "C", "C"),
    ("<think>x</think><answer>$\\boxed{D}$</answer>", "D", "D",
     "<THINK>X</THINK><ANSWER>$\\BOXED{D}$</ANSWER>"),
    ("<answer>\n  e</answer>", "E", "E", "E"),
]


def test_table_is_big_enough() -> None:
    assert len(TABLE) >= 60
    assert len({t for t, *_ in TABLE}) == len(TABLE)


@pytest.mark.parametrize(("text", "train", "reference", "evaluation"), TABLE)
def test_official_table(text: str, train: str, reference: str, evaluation: str) -> None:
    assert official_normalize(text) == train
    assert reference_normalize(text) == reference
    assert official_eval_letter(text) == evaluation


def test_official_accuracy_reward_normalises_the_solution_too() -> None:
    # the solution "b." normalises to B, as the official reward does it
    assert accuracy_reward(["A. B."], ["b."], answer_mode="official") == [1.0]
    assert accuracy_reward(["A.B."], ["B"], answer_mode="official") == [0.0]


@pytest.mark.parametrize(
    ("think", "letter"),
    [
        ("option C fits best", "C"),
        ("A. no; B. yes", "B"),  # the LAST dotted letter
        ("the answer B, not the answer A", "A"),  # the local fallback takes the LAST match
        ("so it must be the right one", ""),
        ("thus optionb", "B"),  # a conclusion phrase: rules (a)-(d) find nothing
        ("I choose the blue car", ""),  # [^A-H] stops at the "h" of "the"
        ("", ""),
    ],
)
def test_think_letter(think: str, letter: str) -> None:
    assert think_letter(think) == letter


# -- the seeded differential generator ------------------------------------------------------------

LETTERS = set("ABCDEFGHabcdefgh")
ASCII_LETTERS = set(string.ascii_letters)
WHITESPACE = " \t\n"
TOKENS = [
    *"ABCDEFGHabcdefgh", *"IJZxyz", *"0129", *" \t\n", *".,;:()-_{}<>$\\", "é", "中",
    "answer", "Answer", "ANSWER ", "answer ", "$\\boxed{", "}$", "<answer>", "</answer>",
    "<think>", "</think>", "e.g.", "i.e.", "A.", "B. ", " C ", "answer based",
    "$\\boxed{A}$", "$\\boxed{c}$", "$\\boxed{H}$",
]


def _letter_at(text: str, i: int) -> bool:
    return 0 <= i < len(text) and text[i] in LETTERS


def _scan(text: str, after_letter: str) -> list[str]:
    """Rules (c) (``after_letter == "dot"``) and (d) (``"end"``) read character by character:
    left to right, each match consuming its lead character, letter and trailing part."""
    found: list[str] = []
    pos = 0
    while pos < len(text):
        matched = False
        # the alternatives at this position, in regex order: start-of-text, then one non-letter
        for lead in ((0,) if pos == 0 else ()) + (1,):
            k = pos + lead
            if lead == 1 and text[pos] in ASCII_LETTERS:
                continue
            if not _letter_at(text, k):
                continue
            j = k + 1
            if after_letter == "dot":
                while j < len(text) and text[j] in WHITESPACE:
                    j += 1
                if j < len(text) and text[j] == ".":
                    found.append(text[k].upper())
                    pos, matched = j + 1, True
                    break
            else:
                if j == len(text):
                    found.append(text[k].upper())
                    pos, matched = j, True
                    break
                if text[j] not in ASCII_LETTERS:
                    found.append(text[k].upper())
                    pos, matched = j + 1, True
                    break
        if not matched:
            pos += 1
    return found


def _boxed(text: str) -> list[str]:
    out, low = [], text.lower()
    i = low.find("$\\boxed{")
    while i >= 0:
        k = i + len("$\\boxed{")
        if _letter_at(text, k) and text[k + 1 : k + 3] == "}$":
            out.append(text[k].upper())
            i = low.find("$\\boxed{", k + 3)
        else:
            i = low.find("$\\boxed{", i + 1)
    return out


def _answer_word(text: str) -> str | None:
    low = text.lower()
    i = low.find("answer")
    while i >= 0:
        j = i + len("answer")
        k = j
        while k < len(text) and text[k] in WHITESPACE:
            k += 1
        if k > j and _letter_at(text, k):
            return text[k].upper()
        i = low.find("answer", i + 1)
    return None


def reference_rules(text: str) -> str:
    text = text.strip()
    boxed = _boxed(text)
    if boxed:
        return boxed[-1]
    first = _answer_word(text)
    if first:
        return first
    for kind in ("dot", "end"):
        found = _scan(text, kind)
        if found:
            return found[-1]
    return text.upper()


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 14)))


def test_generated_strings_follow_the_rules() -> None:
    rng = random.Random(20250417)
    checked = {"a": 0, "b": 0, "c": 0, "d": 0, "e": 0}
    for _ in range(6000):
        text = _random_text(rng)
        assert official_normalize(text) == reference_rules(text), repr(text)
        stripped = text.strip()
        if _boxed(stripped):
            checked["a"] += 1
        elif _answer_word(stripped):
            checked["b"] += 1
        elif _scan(stripped, "dot"):
            checked["c"] += 1
        elif _scan(stripped, "end"):
            checked["d"] += 1
        else:
            checked["e"] += 1
    # every rule decided a good share of the corpus
    assert min(checked.values()) >= 200, checked


def test_generated_strings_evaluation_extractor() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        text = _random_text(rng)
        stripped = text.strip()
        low = stripped.lower()
        expected = None
        i = low.find("<answer>")
        while i >= 0 and expected is None:
            k = i + len("<answer>")
            while k < len(stripped) and stripped[k] in WHITESPACE:
                k += 1
            if _letter_at(stripped, k):
                expected = stripped[k].upper()
            i = low.find("<answer>", i + 1)
        if expected is None:
            dotted = _scan(stripped, "dot")
            expected = dotted[-1] if dotted else stripped.upper()
        assert official_eval_letter(text) == expected, repr(text)
