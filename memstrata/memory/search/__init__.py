"""Retrieval's pure logic, in the order a query meets it.

* :mod:`.query`: the :class:`Query` a search reads and the :class:`Hit` it finds;
* :mod:`.fusion`, :mod:`.hmem_score`, :mod:`.scoring`: one query scored against the snapshot
  (views fused, H-Mem's Eq. 3, rows turned into hits);
* :mod:`.light`: HyMem's light module, the Level-1 lookup and the turns it reaches;
* :mod:`.deep`: HyMem's deep module, the backtrack from Level-1 events to raw Level-2 turns;
* :mod:`.selection`: near-duplicates, MMR and captions, before packing;
* :mod:`.packing`: the context of at most ``budget`` tokens, rendered with citations.
"""
