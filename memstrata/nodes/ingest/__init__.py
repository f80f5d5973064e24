"""The ingestion graph's stages, one module per stage (wired by :mod:`memstrata.graphs.ingestion`)."""
