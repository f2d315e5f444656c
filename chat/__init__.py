"""Conversations, runs, the turn engine, providers, events, API, admin and UI views."""
