"""Graph wiring. ``ingestion`` and ``retrieval`` each export ``builder`` and a compiled ``graph``."""
