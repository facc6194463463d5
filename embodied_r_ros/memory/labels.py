"""Which labelled objects of the memory a question names: its object words against the labels.

A VLM labels what it grounds in its own words ("office chair", "sofa"), a question in the
asker's ("the chair", "the couch"). A label is named by a word of the question or its options
(:func:`~embodied_r_ros.memory.query_terms.question_terms`) when, colour words aside,

- the word is the label's head noun, both normalised (lower case, singular, stop words
  dropped): "chairs" names "office chair"; or
- where the offline embedder is installed, the word and the label's words are closer than
  :data:`MATCH_COSINE`: "couch" names "sofa".

A colour a question names must not contradict one the label states ("the red chair" does not
name a "blue chair", it names a "chair"). Colour regions of the geometric perception are named
by their colour alone (:mod:`embodied_r_ros.memory.places`), never here.

:data:`MATCH_COSINE` is 0.70: of 20 pairs of words for one kind of object and 25 pairs for two
(``bench/label_match.py``), all-MiniLM-L6-v2 puts every different pair below 0.67 (cat and dog)
and 15 of the 20 same pairs above 0.70; a miss costs a line, a false match a wrong one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from embodied_r_ros.core.colors import COLOUR_NAMES
from embodied_r_ros.memory.embedder import TextEmbedder
from embodied_r_ros.memory.query_terms import STOPWORDS

#: cosine above which the embedder takes a word to name a label (see the module notes)
MATCH_COSINE = 0.70
#: label pairs whose verdict a matcher keeps
_SAME_CACHE = 4096
_WORD_RE = re.compile(r"[a-z]+")
_IRREGULAR = {"people": "person", "men": "man", "women": "woman", "children": "child",
              "mice": "mouse", "feet": "foot", "teeth": "tooth", "geese": "goose",
              "shelves": "shelf", "knives": "knife", "leaves": "leaf", "buses": "bus",
              "glasses": "glass", "boxes": "box", "dishes": "dish", "benches": "bench"}


def singular(word: str) -> str:
    """``word`` in the singular, by the regular English endings (and a few irregular
    nouns a scene names)."""
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 3 or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "zes", "sses")):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def label_words(text: str) -> list[str]:
    """The content words of a label or question, lower case and singular, stop words
    dropped, in order."""
    return [singular(w) for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS
            and singular(w) not in STOPWORDS]


def head_word(label: str) -> str | None:
    """The label's head noun (its last content word that is not a colour), None if none."""
    words = [w for w in label_words(label) if w not in COLOUR_NAMES]
    return words[-1] if words else None


def _colours(words: Sequence[str]) -> set[str]:
    return {w for w in words if w in COLOUR_NAMES}


class LabelMatcher:
    """Matches a question's words to labels (see the module notes); ``embedder``: None for
    words alone."""

    def __init__(self, embedder: TextEmbedder | None = None,
                 threshold: float = MATCH_COSINE) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self._same: dict[tuple[str, str], bool] = {}

    def named(self, terms: Sequence[str], labels: Sequence[str]) -> list[tuple[str, str]]:
        """``(word, label)`` for each of ``labels`` that a word of ``terms`` names (the first
        that does), in the order of the words."""
        words = [singular(t.lower()) for t in terms]
        colours = _colours(words)
        nouns = list(dict.fromkeys(w for w in words if w not in COLOUR_NAMES
                                   and w not in STOPWORDS))
        candidates = []
        for label in dict.fromkeys(labels):
            mine = label_words(label)
            stated = _colours(mine)
            content = " ".join(w for w in mine if w not in COLOUR_NAMES)
            if content and not (stated and colours and not stated & colours):
                candidates.append((label, content))
        if not nouns or not candidates:
            return []
        close = self._cosines(nouns, [c for _, c in candidates])
        out: list[tuple[int, str, str]] = []
        for j, (label, content) in enumerate(candidates):
            head = content.split()[-1]
            hit = next((i for i, w in enumerate(nouns)
                        if w == head or (close is not None and close[i, j] >= self.threshold)),
                       None)
            if hit is not None:
                out.append((hit, nouns[hit], label))
        return [(word, label) for _, word, label in sorted(out, key=lambda t: t[0])]

    def same(self, a: str, b: str) -> bool:
        """Whether labels ``a`` and ``b`` name one kind of object: colours they state agree,
        and their head nouns are one word or, with the embedder, their words are closer than
        the threshold ("sofa" and "couch")."""
        if a == b:
            return True
        key = (a, b) if a < b else (b, a)
        if key not in self._same:
            wa, wb = label_words(a), label_words(b)
            ca, cb = _colours(wa), _colours(wb)
            ha = " ".join(w for w in wa if w not in COLOUR_NAMES)
            hb = " ".join(w for w in wb if w not in COLOUR_NAMES)
            verdict = bool(ha and hb) and not (ca and cb and not ca & cb) and (
                ha.split()[-1] == hb.split()[-1] or (
                    self.embedder is not None and self._cosine(ha, hb) >= self.threshold))
            if len(self._same) >= _SAME_CACHE:
                self._same.clear()
            self._same[key] = verdict
        return self._same[key]

    def near(self, a: str, b: str, by_head: bool = True) -> bool:
        """Whether labels ``a`` and ``b`` may be one object named twice, though not
        :meth:`same`: both state a colour and share it ("green pylon" and "green cone": a
        synonym the matcher does not join) or, where ``by_head``, both have one head noun
        ("cyan cylinder" and "blue cylinder": a wrong colour). Only where rays of the two
        coincide does it count (:mod:`~embodied_r_ros.memory.placements`)."""
        if self.same(a, b):
            return True
        ha, hb = head_word(a), head_word(b)
        if not (ha and hb):
            return False
        return (by_head and ha == hb) or bool(_colours(label_words(a)) & _colours(label_words(b)))

    def _cosine(self, a: str, b: str) -> float:
        assert self.embedder is not None
        va, vb = self.embedder.embed([a, b])
        return float(va @ vb)

    def _cosines(self, words: Sequence[str], labels: Sequence[str]) -> np.ndarray | None:
        if self.embedder is None:
            return None
        a = self.embedder.embed(list(words), remember=False)
        b = self.embedder.embed(list(labels))
        return np.asarray(a @ b.T)
