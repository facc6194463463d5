"""The words a question searches the memory for, and the objects a description names.

A question's objects and attributes ("the red chair", "a wooden table") are what full-text
search can find; its spatial and question words ("where", "relative", "left", "turn") are in
every description or none, so they only dilute the search and are dropped, as are time phrases
(they select by stamp instead). Object extraction from a VLM's free text is deliberately simple,
the noun phrases after an article (the geometric perception's objects come named in its
record); the full-text index covers the whole description anyway.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"[a-z][a-z0-9-]*")
_OPTION_LETTER = re.compile(r"^\s*\(?[A-Za-z]\s*[.):]\s+")
#: words that carry no object or attribute: function words, question words, ego-motion and
#: spatial relations, time and amounts
STOPWORDS = frozenset("""
a about above across after again against ago all almost along also am among an and another any
are around as at away back be been before behind being below beneath beside besides between
both but by can could currently degree degrees did do does doing done down during each either
else end ever every far farther few first for forward from front further had has have having
he her here hers him his hour hours how i if in into is it its itself just last least left less
let like many may me meter meters metre metres might mine minute minutes moment more most move
moved moving much must my myself near nearer nearest nearly next no nor not now of off on once
one only onto or other our out over past rather recently relative right rotate rotated
rotating saw second seconds see seen several shall she should side since so some start still
such than that the their them then there these they thing things this those though through
till time to too toward towards turn turned turning under until up upon us very via was way
we were what when where whether which while who whom whose why will with within would yet you
your yours about approximately closest farthest distance direction directions located position
positioned relation respect observe observed frame frames key camera video view appeared appear
appears visible object objects option options answer question choose following
""".split())
_ARTICLE_PHRASE = re.compile(r"\b(?:a|an|the|two|three|some|several)\s+((?:[a-z][a-z-]*\s+){0,2}"
                             r"[a-z][a-z-]*)")
#: words a noun phrase ends before: prepositions, conjunctions and the verbs scenes are
#: described with
_CUT = frozenset("""to of on in at by with from near next behind above below beside under over
and or but is are was were be that which who while as into onto toward towards stands stand
sits sit lies lie hangs hang rests rest leans lean appears appear seems seem stays stay has have
can could standing sitting lying hanging leaning resting walking moving parked placed""".split())


def question_terms(question: str, options: Sequence[str] = ()) -> list[str]:
    """The content words of a question and its options (option letters dropped), in order,
    once each: what the full-text index is searched for."""
    out: list[str] = []
    for text in (question, *options):
        for word in _WORD.findall(_OPTION_LETTER.sub("", text).lower()):
            word = word.strip("-")
            if len(word) > 1 and word not in STOPWORDS and word not in out:
                out.append(word)
    return out


def objects_in(description: str, limit: int = 12) -> tuple[str, ...]:
    """The objects a VLM's description names: the noun phrases after an article (``a red
    chair`` -> ``red chair``), cut before a preposition or verb."""
    out: list[str] = []
    for m in _ARTICLE_PHRASE.finditer(description.lower()):
        words: list[str] = []
        for word in m.group(1).split():
            if word in _CUT:
                break
            words.append(word)
        phrase = " ".join(words)
        if phrase and words[-1] not in STOPWORDS and phrase not in out:
            out.append(phrase)
        if len(out) >= limit:
            break
    return tuple(out)
