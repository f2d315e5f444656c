"""The OpenAI-compatible surface (/v1/models, /v1/chat/completions): docs/openai-api.md."""
