"""H-Mem's temporal-semantic tree (§3.2, App. A.2), as pure operations.

- :mod:`~memstrata.memory.tree.windows`: levels, windows (beta), thresholds (alpha), active levels by age;
- :mod:`~memstrata.memory.tree.build`: placing leaves and nodes bottom-up, pruning, stale marking;
- :mod:`~memstrata.memory.tree.consolidate`: the offline extractive summary of a node;
- :mod:`~memstrata.memory.tree.persist`: reading, recomputing and writing one conversation's tree;
- :mod:`~memstrata.memory.tree.search`: retrieval through the tree (windows of a temporal hint,
  evidence tags, reinforced robustness).

The leaves are HyMem's Level-1 event summaries; the nodes are the ``tree_node`` kind
(:mod:`memstrata.memory.levels.level1.tree_node`).
"""

from memstrata.memory.tree.build import Forest, Item, Node, Reinforcement, grow, prune
from memstrata.memory.tree.windows import (
    LEVELS,
    UPPER,
    TreeLevel,
    active_levels,
    tree_levels,
    window_key,
    window_span,
)

__all__ = [
    "LEVELS",
    "UPPER",
    "Forest",
    "Item",
    "Node",
    "Reinforcement",
    "TreeLevel",
    "active_levels",
    "grow",
    "prune",
    "tree_levels",
    "window_key",
    "window_span",
]
