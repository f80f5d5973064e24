"""Graph nodes: short async functions, one module per stage."""
