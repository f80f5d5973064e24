"""H-Mem's entity-relation graph: mentions, entity resolution, and expansion at query time.

- :mod:`memstrata.memory.entity_graph.mentions`: offline entity mentions by rules;
- :mod:`memstrata.memory.entity_graph.resolution`: entity linking within one conversation (identity, overlap
  edges for nickname-like variants, relations, profiles);
- :mod:`memstrata.memory.entity_graph.expansion`: seeds named in a query, one or two hops over the edge
  store's relations, and the facts (and through them the raw turns) they reach.

The units are :class:`memstrata.memory.levels.entity.Entity` and
:class:`memstrata.memory.levels.level1.fact.Fact`; edges live in the edge store.
"""
