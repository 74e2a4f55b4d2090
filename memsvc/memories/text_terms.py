"""How the text arm of a hybrid search reads a question: rare tokens required, words ranked.

``websearch_to_tsquery`` ANDs every word, so a question as a user asks it
("what did we decide about ENG-4312?") matches only memories that also say
"decide", which the memory about ENG-4312 rarely does. In hybrid search the
vector arm already judges the meaning; the text arm is there for what an
embedding blurs: identifiers, versions, paths, ticket ids. So a plain question
holding such tokens is split in two:

- **required**: the rare-looking tokens (a digit, ``_``, a ``.``, ``/`` or
  ``-`` inside a word, or camelCase), ANDed: a match contains every one;
- **ranked**: every word, ORed, for ``ts_rank_cd`` to order the matches
  (a match that also has the other words ranks higher).

A question without rare-looking tokens, a query longer than
``QUESTION_WORDS`` words (a passage, searched for its meaning: a token in it
is incidental, and requiring it pulls in memories that merely share it), and
any query using the websearch syntax (``"quotes"``, ``-word``, ``or``) is one
``websearch_to_tsquery`` as written: every word required, as in text mode.

When a question holds rare-looking tokens (``identifiers``), every match of
the text arm holds all of them, and the fusion ranks those matches above
memories found by the vector arm alone (see ``IDENTIFIER_BONUS`` in
:mod:`memsvc.memories.queries`): an exact identifier is what the
user asked about, and an embedding that cannot see it must not outrank it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Operators of websearch_to_tsquery: a quote, "-" starting a word, "or" as a word.
_OPERATORS = re.compile(r'"|(?:^|\s)-\w|(?:^|\s)or(?:\s|$)', re.IGNORECASE)
_EDGE_PUNCTUATION = "?!.,;:()[]{}'`-"
# A token an embedding blurs: digits, snake_case, dotted.names, paths,
# dashed-ids, camelCase. Plain words (even capitalised ones) are not, nor
# are abbreviations such as "e.g." (a dotted name has a part of 2+ letters).
_RARE = re.compile(r"\d|\w_\w|\w{2}\.\w|\w\.\w{2}|/\w|\w/|\w-\w|[a-z][A-Z]")


# "-" and "_" inside a word: read as spaces in text queries, as the text search
# column reads them in its raw-token half (see tables.content_tsv_expression),
# so "node-07" or "retry_backoff_ms" match however the parser split them. A
# "-" after a space stays websearch_to_tsquery's "not".
_JOINED = re.compile(r"(?<=\w)[-_](?=\w)")


def text_words(text: str) -> str:
    """A text query as the text arm sends it: ``-`` and ``_`` inside words read as spaces."""
    return _JOINED.sub(" ", text)


# The longest query read as a question (see the module docstring).
QUESTION_WORDS = 12


@dataclass(frozen=True, slots=True)
class TextTerms:
    """The two ``websearch_to_tsquery`` inputs of a hybrid search's text arm."""

    required: str  # every match satisfies it
    ranked: str  # ts_rank_cd orders the matches by it
    # A question holding identifier tokens: every match holds each of them.
    identifiers: bool = False


def hybrid_terms(text: str) -> TextTerms:
    """Split a text query for the hybrid text arm (see the module docstring)."""
    if _OPERATORS.search(text):
        return TextTerms(text, text)
    words = [w.strip(_EDGE_PUNCTUATION) for w in text.split()]
    words = [w for w in words if w]
    if len(words) > QUESTION_WORDS:
        return TextTerms(text, text)
    rare = [w for w in words if _RARE.search(w)]
    if not rare:
        return TextTerms(text, text)
    return TextTerms(" ".join(rare), " or ".join(words), identifiers=True)
