"""The retrieval graph's nodes and the prompt sections they share (wired by :mod:`memstrata.graphs.retrieval`)."""
