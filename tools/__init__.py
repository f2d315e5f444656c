"""The tool framework: @tool, the registry, ToolContext, the executor, resources, built-in tools.

This app never imports `chat`: the turn engine uses tools, not the other way round.
"""
