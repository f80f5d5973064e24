"""Export and import: one user's memory as a JSON-lines file, and back into any store, under any user id.

Raw turns are the source of truth; everything else a store holds (turn contexts, episodes, summaries, facts,
entities, themes, persona versions, the tree, tiers, vectors) is rebuilt from them by the ingestion graph. An
export therefore carries only what no ingestion can rebuild, one JSON object a line:

- a header, ``{"format": "memstrata-export", "version": 1, "user_id": ...}``;
- every raw turn (``"type": "turn"``): its conversation, session, position, id, speaker, text, photo caption, the
  time as given (``time_raw``) and as read (``time``), and the metadata the app attached;
- every session (``"session"``): whether its episodes are all closed, and its position counter and latest time
  (:mod:`memstrata.memory.store.sequences`), so later appends land where they would have;
- the rows of the user's side tables (``"row"``): the LangGraph store's ``items``, the ``journal`` of updates and
  deletions, and the ``tombstones`` that keep deleted turns from coming back;
- the facts a user removed from a persona (``"persona_exclusion"``, :meth:`Memstrata.forget_persona_item`);
- a trailer (``"end"``) with the counts, so a cut-off file is refused.

Records are sorted and serialized with sorted keys, so exporting, importing into an empty store and exporting again
gives the same bytes. :func:`import_user` validates the whole file before it writes anything, then re-ingests the
turns in their places (as :meth:`memstrata.memories.Memories.update` rebuilds a session) and restores the rest.

Example:
    >>> export_user(mem, "ann.jsonl", user_id="ann")  # doctest: +SKIP
    {'turns': 12, 'sessions': 2, 'items': 0, 'journal': 1, 'tombstones': 1, 'persona_exclusions': 0}
    >>> import_user(Memstrata(path="/tmp/copy"), "ann.jsonl", user_id="ann-2")["turns"]  # doctest: +SKIP
    12
    >>> users(mem)  # doctest: +SKIP
    ['ann', 'bo']
"""

from memstrata.portable.export import export_user, users
from memstrata.portable.format import FORMAT, TABLES, VERSION
from memstrata.portable.load import Export, load_export
from memstrata.portable.restore import import_user

__all__ = ["FORMAT", "TABLES", "VERSION", "Export", "export_user", "import_user", "load_export", "users"]
