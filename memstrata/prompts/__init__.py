"""Prompt templates as UPPER_SNAKE constants; override any of them through ``Context.prompts``."""
