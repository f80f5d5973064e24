"""Level-1: the events the light module searches first (HyMem's summaries, H-Mem's facts and tree nodes)."""
