"""Word terms in each unit's Chroma metadata: the lexical path of a store served by a Chroma server.

An embedded store ranks its lexical reads with a SQLite FTS5 file beside the data
(:mod:`memstrata.memory.store.words`). A store behind ``chroma run`` has no file of its own, and Chroma's sparse
(BM25) index exists only in its hosted and distributed deployments. So each unit of a searched kind carries its
distinct word terms as a metadata list (``terms``: BM25's vocabulary, :func:`memstrata.memory.index.bm25.tokenize`,
lower-cased, stop-worded, stemmed), written in the same upsert as the unit, so the terms can never disagree with
the text, whichever process or machine wrote it.

Each stored term is prefixed by its user's tag (:func:`memstrata.memory.store.tenant.term_key`). A lexical read
asks Chroma, per query term, for the ids of the units whose list holds the user's tagged term
(``{"terms": {"$contains": key}}``, ids only, no user clause), and ranks them here by :func:`rank`: BM25's idf
summed over the query terms a unit holds. That is BM25 with term frequency 1 and no length normalisation: the list
keeps which words a unit has, not how often. A term held by more than :data:`MAX_POSTINGS` units is read no
further and weighs as that common. The records finally read are checked against the tenant like every read.

Why the tag: Chroma answers a list ``$contains`` from an index, but it evaluates every clause of a filter over
every record that clause matches, and a user clause matches all of the user's units. On a 100,413-turn user served
by ``chroma run`` (2 cores, idle server), one term's postings took 21-34 ms alone and 1.3-1.4 s with the user
clause beside it. A conversation's reads keep its ``scope`` clause, which matches that conversation only.

Every unit of a searched kind on a server store carries its tagged terms from the store's first write: they are part
of the store's format (:mod:`~memstrata.memory.store.format`). ``memstrata check`` compares each unit's terms with its
text, and ``memstrata reindex --words`` writes them again from the stored text.

Example:
    >>> unit_terms(["Caroline moved to Lisbon in May", "the the"])
    [['carolin', 'lisbon', 'may', 'move'], []]
    >>> tagged_terms(["alice"], ["Lisbon"])[0][0].endswith(":lisbon")
    True
    >>> rank({"lisbon": ["a", "b"], "carolin": ["b", "c"]}, total=10, limit=2)
    ['b', 'a']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from memstrata.memory.store import tenant

TERMS = "terms"  # the metadata list on each unit
MAX_POSTINGS = 2000


def unit_terms(texts: Sequence[str]) -> list[list[str]]:
    """Each text's distinct BM25 terms, sorted (an empty list for a text of stop words only)."""
    from memstrata.memory.index.bm25 import tokenize

    if not texts:
        return []
    return [sorted(set(tokens)) for tokens in tokenize(list(texts))]


def tagged_terms(user_ids: Sequence[str], texts: Sequence[str]) -> list[list[str]]:
    """Each text's terms as its user's unit stores them (:func:`memstrata.memory.store.tenant.term_key`)."""
    return [[tenant.term_key(user, t) for t in terms] for user, terms in zip(user_ids, unit_terms(texts), strict=True)]


def query_terms(words: Sequence[str]) -> list[str]:
    """The distinct terms of a query's words, in order."""
    return list(dict.fromkeys(t for terms in unit_terms([" ".join(words)]) for t in terms))


def rank(postings: Mapping[str, Sequence[str]], *, total: int, limit: int) -> list[str]:
    """Up to ``limit`` keys, best first: the sum of BM25's idf over the terms each holds (ties by key).

    ``postings`` maps a term to the keys of the units holding it; ``total`` is how many units the scope holds
    (a term read to :data:`MAX_POSTINGS` counts as that common).
    """
    n = max(total, 1)
    score: dict[str, float] = {}
    for keys in postings.values():
        df = len(keys)
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        for key in keys:
            score[key] = score.get(key, 0.0) + idf
    return sorted(score, key=lambda k: (-score[k], k))[: max(0, limit)]
