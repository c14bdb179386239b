"""An MCP client (the official SDK's) using semhist's stored threads: it starts `semhist mcp` over
stdio, as a desktop assistant or IDE agent does, adds two messages and searches them.

    pip install 'semhist[mcp]'
    python docs/samples/mcp_client.py
"""

import asyncio
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    server = StdioServerParameters(command=sys.executable, args=["-m", "semhist.cli", "mcp"], env=dict(os.environ))
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for key, text in (("m1", "My train to Sapporo leaves at 7:40 from platform 3."),
                          ("m2", "The hotel is next to Odori park.")):
            await session.call_tool("add_message", {"thread_id": "sample-mcp", "role": "user", "content": text,
                                                    "id": key})  # the key: added once however often it is sent
        found = await session.call_tool("search", {"thread_id": "sample-mcp", "query": "which platform?"})
        print("".join(getattr(c, "text", "") for c in found.content))


asyncio.run(main())
