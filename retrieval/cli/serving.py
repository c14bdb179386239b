"""`semhist serve` (the HTTP API), `semhist ui` (the inspector over a local store), `semhist agent`
(a Microsoft 365 Agents SDK / Teams agent) and `semhist mcp` (an MCP server)."""

from __future__ import annotations

import argparse

from semhist.kernel.settings import Settings, settings_fields


def _overrides(args: argparse.Namespace) -> dict:
    return {f.name: getattr(args, f.name, None) for f in settings_fields()}


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from ..service.run import serve

    serve(settings, _overrides(args), host=args.host, port=args.port, workers=args.workers,
          access_log=args.access_log)
    return 0


def cmd_agent(args: argparse.Namespace, settings: Settings) -> int:
    from ..agent.host import run_agent

    run_agent(settings, host=args.host, port=args.port, anonymous=args.anonymous,
              framework_agent=args.framework_agent)
    return 0


def cmd_ui(args: argparse.Namespace, settings: Settings) -> int:
    """The service on loopback, one worker, and the inspector opened in the browser when it is up."""
    import sys
    import threading
    import urllib.request
    import webbrowser

    from ..service.run import serve

    url = f"http://127.0.0.1:{args.port}/ui/"

    def open_when_up() -> None:
        for _ in range(240):
            try:
                with urllib.request.urlopen(url, timeout=1):
                    break
            except OSError:
                threading.Event().wait(0.25)
        else:
            return
        sys.stderr.write(f"inspector at {url}\n")
        if not args.no_browser:
            webbrowser.open(url)

    threading.Thread(target=open_when_up, daemon=True).start()
    serve(settings, _overrides(args), host="127.0.0.1", port=args.port, workers=1)
    return 0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from ..mcpserver.run import run_mcp

    run_mcp(settings, transport=args.transport, host=args.host, port=args.port)
    return 0
