"""`semhist agent`: the agent hosted on aiohttp at POST /api/messages, as Teams calls it.

Authentication is the SDK's own: the service connection from the CONNECTIONS__* variables
(`CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID`, `__TENANTID`, `__CLIENTSECRET`, the
Azure Bot registration). `--anonymous` drops it, for local development on loopback only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from semhist.kernel.errors import ConfigError, SemhistError, missing_extra
from semhist.kernel.settings import Settings

from semhist import History

log = logging.getLogger("semhist.agent")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _sdk():
    try:
        from aiohttp import web
        from microsoft_agents.activity import Activity, InvokeResponse, load_configuration_from_env
        from microsoft_agents.authentication.msal import MsalConnectionManager
        from microsoft_agents.hosting.aiohttp import CloudAdapter, jwt_authorization_middleware, start_agent_process
        from microsoft_agents.hosting.core import AgentApplication, AgentAuthConfiguration, MemoryStorage, TurnState
        from microsoft_agents.hosting.core.authorization import ClaimsIdentity
    except ImportError as exc:
        raise missing_extra("microsoft-agents-hosting-aiohttp", "teams") from exc
    return {"web": web, "load_configuration_from_env": load_configuration_from_env, "Activity": Activity,
            "InvokeResponse": InvokeResponse,
            "MsalConnectionManager": MsalConnectionManager, "CloudAdapter": CloudAdapter,
            "jwt_authorization_middleware": jwt_authorization_middleware, "start_agent_process": start_agent_process,
            "AgentApplication": AgentApplication, "AgentAuthConfiguration": AgentAuthConfiguration,
            "MemoryStorage": MemoryStorage, "TurnState": TurnState, "ClaimsIdentity": ClaimsIdentity}


def connections(env: Mapping[str, str], anonymous: bool) -> Any:
    sdk = _sdk()
    config = sdk["load_configuration_from_env"](dict(env))
    if anonymous:
        anon = sdk["AgentAuthConfiguration"](anonymous_allowed=True)
        return config, sdk["MsalConnectionManager"](connections_configurations={"SERVICE_CONNECTION": anon})
    if not config.get("CONNECTIONS", {}).get("SERVICE_CONNECTION"):
        raise ConfigError("no Azure Bot credentials: set CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID, "
                          "__TENANTID and __CLIENTSECRET, or pass --anonymous for local development")
    return config, sdk["MsalConnectionManager"](**config)


def build_app(history: History, *, anonymous: bool = False, env: Mapping[str, str] | None = None,
              framework: Any = None) -> Any:
    """The aiohttp application: POST /api/messages (the SDK's JWT check unless anonymous) and
    GET /healthz. The history is closed when the application shuts down. `framework`: a
    `FrameworkAnswers` that writes the answers (framework.py)."""
    from .handler import SemhistAgent
    from .memory import ThreadMemory

    sdk = _sdk()
    web = sdk["web"]
    config, conns = connections(os.environ if env is None else env, anonymous)
    adapter = sdk["CloudAdapter"](connection_manager=conns)
    adapter.use(ThreadMemory(history))
    # The SDK's conversation state is not used: the store is the conversation's memory.
    app = sdk["AgentApplication"][sdk["TurnState"]](storage=sdk["MemoryStorage"](), connection_manager=conns,
                                                    start_typing_timer=False, **config)
    service = config.get("CONNECTIONS", {}).get("SERVICE_CONNECTION", {}).get("SETTINGS", {})
    SemhistAgent(history, app_id=service.get("CLIENTID", ""), framework=framework).register(app)

    async def messages(request):
        problem = await _malformed(request)
        if problem:  # the SDK would answer 500 with a traceback in the log
            return web.json_response({"error": problem}, status=400)
        return await sdk["start_agent_process"](request, app, adapter)

    async def healthz(request):
        import asyncio

        try:
            await asyncio.to_thread(history.store.totals)  # the store answers
        except SemhistError as exc:
            return web.json_response({"status": "unavailable", "error": str(exc)}, status=503)
        # no counts: the probe is open to anyone who can reach the agent (docs/guides/security.md)
        return web.json_response({"status": "ok"})

    async def close(_app):
        history.close()

    @web.middleware
    async def authenticate(request, handler):
        if request.path == "/healthz":  # liveness probes carry no Bot Framework token
            return await handler(request)
        return await sdk["jwt_authorization_middleware"](request, handler)

    web_app = web.Application(middlewares=[authenticate])
    web_app["agent_configuration"] = conns.get_default_connection_configuration()
    web_app.router.add_post("/api/messages", messages)
    web_app.router.add_get("/healthz", healthz)
    web_app.on_cleanup.append(close)
    return web_app


async def _malformed(request: Any) -> str | None:
    """Why the posted activity cannot be read (one line), or None. aiohttp keeps the body, so
    the SDK reads it again."""
    try:
        body = await request.json()
    except ValueError as exc:
        return f"not JSON: {exc}"
    # the SDK's validator logs its own traceback before it raises: this is a 400, not an error
    sdk_log = logging.getLogger("microsoft_agents.activity.activity")
    level = sdk_log.level
    sdk_log.setLevel(logging.CRITICAL)
    try:
        _sdk()["Activity"].model_validate(body)
    except ValueError as exc:  # not JSON, or not an activity (pydantic's errors are ValueErrors)
        errors = getattr(exc, "errors", None)
        if callable(errors) and errors():
            first = errors()[0]
            return f"not an activity: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        return f"not an activity: {exc}"
    finally:
        sdk_log.setLevel(level)
    return None


def run_agent(settings: Settings, *, host: str, port: int, anonymous: bool, framework_agent: str | None = None) -> None:
    if anonymous and host not in LOOPBACK:
        raise ConfigError(f"--anonymous listens on loopback only (127.0.0.1), not {host}")
    if anonymous:
        log.warning("anonymous: no authentication (local development); listening on %s only", host)
        # said once here rather than by the SDK on every turn
        logging.getLogger("microsoft_agents.hosting.core.connector.client.user_token_client").setLevel(logging.ERROR)
    from semhist.kernel.runtime import one_native_thread

    one_native_thread()
    history = History(settings)
    framework = None
    if framework_agent:  # made before listening: a broken factory stops the start and says why
        from .framework import FrameworkAnswers, load_factory

        framework = FrameworkAnswers(history, load_factory(framework_agent))
    app = build_app(history, anonymous=anonymous, framework=framework)
    history.parts.embedder.embed(["warm up"], "query")
    answers = (f"the agent of {framework_agent}" if framework else
               history.parts.llm.model if history.parts.llm else "none configured (replies say so)")
    log.info("agent at http://%s:%d/api/messages; store %s; answers by %s", host, port,
             _redacted(settings.db_url), answers)
    _sdk()["web"].run_app(app, host=host, port=port, print=None)


def _redacted(url: str) -> str:
    from semhist.kernel.settings import redact

    return redact(url)
