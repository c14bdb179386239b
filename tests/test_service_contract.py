"""Requests generated from the service's own OpenAPI document (schemathesis, property-based):
whatever they send, the service never answers with a server error."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import status_code_conformance

from .servers import Process, free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory, cache_dir):
    base = tmp_path_factory.mktemp("contract")
    # an upstream that is not there: generated chat requests are stored and built, then answered 502
    env = {"SEMHIST_DATA_DIR": str(base / "data"), "SEMHIST_CACHE_DIR": str(cache_dir), "SEMHIST_MAX_BATCH": "20",
           "SEMHIST_UPSTREAM": f"http://127.0.0.1:{free_port()}/v1"}
    server = Process(["serve"], env, base / "serve.log")
    # something to find: generated requests hit a stored thread now and then
    httpx.post(server.url + "/v1/threads/a/messages", timeout=60, json={"messages": [
        {"role": "user", "content": "ラーメンの話"}, {"role": "assistant", "content": "一蘭です"}]})
    yield schemathesis.openapi.from_url(server.url + "/openapi.json")
    server.stop()
    log = server.output()
    assert "Traceback" not in log, log


OPERATIONS = [("POST", "/v1/threads/{thread_id}/messages"), ("POST", "/v1/threads/{thread_id}/context"),
              ("GET", "/v1/threads"), ("GET", "/v1/threads/{thread_id}/log"), ("DELETE", "/v1/threads/{thread_id}"),
              ("DELETE", "/v1/threads/{thread_id}/messages/{message_id}"), ("GET", "/healthz"), ("GET", "/metrics"),
              ("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/v1/responses"),
              ("GET", "/v1/threads/{thread_id}/messages"), ("GET", "/v1/threads/{thread_id}/blocks"),
              ("GET", "/v1/threads/{thread_id}/memory"), ("GET", "/v1/threads/{thread_id}/stats"),
              ("POST", "/v1/threads/{thread_id}/try"), ("POST", "/v1/threads/{thread_id}/search"),
              ("GET", "/v1/threads/{thread_id}/forgotten")]


UPSTREAM = {("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/v1/responses")}


# One test per operation, cases drawn from the document (schemathesis' pytest plugin predates pytest 9).
@pytest.mark.parametrize("method,path", OPERATIONS)
def test_no_request_gets_a_server_error(api_schema, method, path):
    operations = {(op.method.upper(), op.path): op for op in (r.ok() for r in api_schema.get_all_operations())}
    assert set(operations) == set(OPERATIONS)  # a new route joins this list

    @given(case=operations[(method, path)].as_strategy())
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    def check(case):
        response = case.call()
        # the upstream here is down: a 502 saying so is the proxy routes' documented answer
        down = (method, path) in UPSTREAM and response.status_code == 502 \
            and response.json()["error"]["type"] == "upstream_unavailable"
        checks = [status_code_conformance] if down else [schemathesis.checks.not_a_server_error,
                                                         status_code_conformance]
        case.validate_response(response, checks=checks)
        if response.status_code >= 400:
            assert set(response.json()["error"]) >= {"type", "message"}

    check()

