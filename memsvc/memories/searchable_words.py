"""Words known to be searchable: text mode's empty results without a second statement.

A text search that matches nothing must tell "no memory matches" from "the
query has no searchable words" (only stop words or operators: a
``ValidationError``), which takes a look at the parsed tsquery. Asking the
server on every empty result costs a second round trip, as much again as the
search itself on a short query. But a word either parses to lexemes under a
text search configuration or it does not, whatever query it is in:
``websearch_to_tsquery``'s operators are quotes, ``-`` before a word and
``or`` as a word, and its parser splits at whitespace, so a query holding a
plain word (letters and digits between spaces, not ``or``) that parses to
lexemes on its own has searchable words. Closing punctuation after a word
(``?``, ``!``, ``,``, ``;``, ``:``) is a separator to the parser, so
``work?`` holds the plain word ``work``: questions end in one, and without it
a query such as ``how does omp_init_allocator work?`` (stop words, a word
with underscores, ``work?``) would ask on every empty result. When the
server is asked, it also says which of the query's plain words parse to
lexemes; later empty results of queries holding one of them need no question.

The configuration cannot change under a running service (a different one is
a migration, and the service refuses a schema built with another); only an
``ALTER TEXT SEARCH CONFIGURATION`` or dictionary change made while it runs
could make a remembered word unsearchable, and then an empty list is
returned where a ``ValidationError`` was due.
"""

from __future__ import annotations

import re

# A plain word: letters and digits only, between whitespace or the text's ends,
# maybe followed by closing punctuation the parser drops (only the word is kept).
_PLAIN_WORD = re.compile(r"(?<!\S)([^\W_]+)[?!,;:]*(?!\S)")
# Remembered at most; past it the set starts again (it is only a shortcut).
MAX_WORDS = 10_000
# Plain words of one query sent to the server to learn from, at most.
MAX_ASKED = 32


class SearchableWords:
    """The plain words found to parse to lexemes under the service's configuration."""

    def __init__(self) -> None:
        self._known: set[str] = set()

    @staticmethod
    def plain_words(text: str) -> list[str]:
        """The query's plain words worth asking about (``or`` is an operator)."""
        words = [w for w in _PLAIN_WORD.findall(text) if w.lower() != "or"]
        return list(dict.fromkeys(words))[:MAX_ASKED]

    def known_in(self, text: str) -> bool:
        """Whether the query holds a word known to be searchable."""
        known = self._known
        return any(w in known for w in _PLAIN_WORD.findall(text))

    def learn(self, words: list[str]) -> None:
        """Remember words the server found searchable."""
        if len(self._known) + len(words) > MAX_WORDS:
            self._known.clear()
        self._known.update(words)
