"""Word terms in each unit's Chroma metadata: the lexical path of a store served by a Chroma server.

An embedded store ranks its lexical reads with a SQLite FTS5 file beside the data
(:mod:`memstrata.memory.store.words`). A store behind ``chroma run`` has no file of its own, and Chroma's sparse
(BM25) index exists only in its hosted and distributed deployments. So each unit of a searched kind carries its
distinct word terms as a metadata list (``terms``: BM25's vocabulary, :func:`memstrata.memory.index.bm25.tokenize`,
lower-cased, stop-worded, stemmed), written in the same upsert as the unit, so the terms can never disagree with
the text, whichever process or machine wrote it. A lexical read asks Chroma, per query term, for the ids of the
user's units whose list holds it (``{"terms": {"$contains": term}}``, ids only), and ranks them here by
:func:`rank`: BM25's idf summed over the query terms a unit holds. That is BM25 with term frequency 1 and no
length normalisation: the list keeps which words a unit has, not how often. A term held by more than
:data:`MAX_POSTINGS` of the user's units is read no further and weighs as that common.

A collection carries the terms when its metadata says ``terms: true``: set when a server store creates it empty,
or by ``memstrata reindex --words`` once every unit has them; ``memstrata check`` compares each unit's terms with its
text.

**Not used by the bounded path yet.** On a 100,413-turn user served by ``chroma run`` (2 cores, while a bench was
querying the same server), one term's postings took 4.1 s (68 ids) and 14.6 s (422 ids), and a three-word
:meth:`~memstrata.memory.store.vectors.VectorStore.matching` 14.6 s, against 3.6 s for a ``$contains`` read of one
word: Chroma 1.5 answers a list ``$contains`` by scanning the metadata, not from an index. So the bounded path keeps
``$contains`` on server stores (``words_ready`` is false there), and ``matching`` on terms is there for a Chroma that
indexes metadata lists.

Example:
    >>> unit_terms(["Caroline moved to Lisbon in May", "the the"])
    [['carolin', 'lisbon', 'may', 'move'], []]
    >>> rank({"lisbon": ["a", "b"], "carolin": ["b", "c"]}, total=10, limit=2)
    ['b', 'a']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

TERMS = "terms"  # the metadata list on each unit, and the collection flag
MAX_POSTINGS = 2000


def unit_terms(texts: Sequence[str]) -> list[list[str]]:
    """Each text's distinct BM25 terms, sorted (an empty list for a text of stop words only)."""
    from memstrata.memory.index.bm25 import tokenize

    if not texts:
        return []
    return [sorted(set(tokens)) for tokens in tokenize(list(texts))]


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
