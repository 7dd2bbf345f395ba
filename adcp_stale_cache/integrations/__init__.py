"""Adapters to other libraries (MCP, A2A, the adcp SDK); the core never imports them."""
