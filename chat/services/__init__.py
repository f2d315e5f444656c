"""Writes: every change to toolchat's data goes through a function here (STYLE.md)."""
