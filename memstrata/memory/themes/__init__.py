"""Themes: groups of a conversation's facts (xMemory's themes; Bi-Mem calls the same grouping scenes).

* :mod:`.partition`: the grouping itself, pure numpy and networkx: Bi-Mem's initial grouping by label
  propagation over the fact similarity graph (§4.2.1, Eq. 5), and xMemory's structure objective
  f(P) = SparsityScore + SemScore (§3.2, Eq. 1-3) with the attach, split and merge it guides.
"""
