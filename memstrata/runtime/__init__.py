"""What a graph run needs beyond its state: the store, the model, and one metered model step.

* :mod:`~memstrata.runtime.resolve`: the :class:`~memstrata.memory.store.MemoryStore` a context names,
  opened once per process (or the one the app compiled the graph with);
* :mod:`~memstrata.runtime.llm`: the model client: structured decisions with retries and fallbacks,
  streamed answers, token metering;
* :mod:`~memstrata.runtime.step`: :class:`~memstrata.runtime.step.Step`, the one metered model call
  every node makes, and a query's token budget, metered from the calls its state holds;
* :mod:`~memstrata.runtime.search`: the search handle a retrieval node opens once (snapshot, query
  vectors, scoring settings, reference time, entity graph, the theme path's settings);
* :mod:`~memstrata.runtime.process`: process-wide helpers (BLAS threads, heap trimming).

Nodes call into this package once per run, through :func:`~memstrata.runtime.node.open_node`.
Nothing under :mod:`memstrata.memory` imports it.
"""
