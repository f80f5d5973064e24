"""Atomic facts (Bi-Mem's facts, xMemory's semantics): offline extraction by clauses, and knowledge updates.

- :mod:`memstrata.memory.facts.clauses`: the deterministic offline extractor;
- :mod:`memstrata.memory.facts.supersession`: which newer fact replaces which older one.

The unit itself is :class:`memstrata.memory.levels.level1.fact.Fact`; the model's extraction is
the ingestion stage :mod:`memstrata.nodes.ingest.facts`.
"""
