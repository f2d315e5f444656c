"""The built-in tools, one module each; TOOLCHAT_TOOL_MODULES lists the ones to load."""
