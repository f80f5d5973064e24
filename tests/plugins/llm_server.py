"""Fixtures for the real llama.cpp server (see tests/test_llm_server*.py)."""
