"""Reading a perception text by rules: what it states decides which answer, and whether clearly.

The rule reader (:mod:`.rule_reader`) answers a question from its text and its structured basis,
the LM's ceiling; :mod:`.text_margins` says whether the text decides it clear of the boundaries
the questions keep; :mod:`.text_decides` is that check on the synthetic world's own text, which
the world generator calls for each question it drafts. :mod:`.dead_reckoning` adds a text's
motions up to poses; :mod:`.legacy_text` reads texts written before the typed record.
"""
