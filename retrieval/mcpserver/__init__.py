"""`semhist mcp`: stored threads as an MCP server (extra `semhist[mcp]`)."""
