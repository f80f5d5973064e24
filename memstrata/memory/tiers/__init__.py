"""HMO's memory orchestration (Hierarchical Memory Orchestration, §3.1-3.4): importance, priority and tiers.

A *record* is one closed episode, keyed by its Level-1 summary (``(conversation_id, "summary", "sum:...")``);
its tier, scores and use live in the counters store (:mod:`memstrata.memory.store.counters`), never in the
units, so scoring or promoting a record never invalidates a search snapshot.

- :mod:`.importance`: the initial importance of a record, 1-10 (§3.1, Appendix A's rubric): a model's score with
  our own wording of the rubric, or offline a documented heuristic;
- :mod:`.priority`: the priority of Eq. 5 and the persona drift of Eq. 6 (the seed's text lost both formulas;
  the module says which reading of the prose it takes);
- :mod:`.persona`: a conversation's persona as the tiers read it: its text for the importance call, its vector for
  the alignment A (Eq. 5) and the drift (Eq. 6);
- :mod:`.anchor`: the drift gate (§3.4), one persona anchor per conversation;
- :mod:`.assign`: the three tiers (§3.2): the cache (recent sessions plus the top pivotal records), the buffer
  (high priority that does not fit the cache) and the archive (everything else), and what a retrieval that
  used a record does to its tier (lazy scoring, promotion and demotion, §3.3).

Nothing here imports LangGraph or the store: the ingestion stage :mod:`memstrata.nodes.ingest.tiers` and the
retrieval's tiered search (:mod:`memstrata.memory.index.active`, :mod:`memstrata.runtime.search`) call it.
"""

from memstrata.memory.tiers.assign import ARCHIVE, BUFFER, CACHE, Record, assign_tiers, place_recalled
from memstrata.memory.tiers.importance import Signals, offline_importance
from memstrata.memory.tiers.priority import PriorityWeights, decay, drift

__all__ = [
    "ARCHIVE",
    "BUFFER",
    "CACHE",
    "PriorityWeights",
    "Record",
    "Signals",
    "assign_tiers",
    "decay",
    "drift",
    "offline_importance",
    "place_recalled",
]
