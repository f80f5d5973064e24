"""Bi-Mem's persona (§4.1, Eq. 7) and reflective calibration (§4.2.2, Eq. 8), pure code.

- :mod:`~memstrata.memory.persona.distill`: a speaker's facts to the five dimensions (offline: nearest cue,
  centrality and recurrence; with a model: the checks a distilled draft must pass);
- :mod:`~memstrata.memory.persona.versions`: a dimension's versions, history and point-in-time reads;
- :mod:`~memstrata.memory.persona.calibrate`: which scenes are checked against which persona, and how a
  compensatory condition is appended.

The ingestion stage is :mod:`memstrata.nodes.ingest.persona`; the retrieval side :mod:`memstrata.memory.search.persona`.
"""
