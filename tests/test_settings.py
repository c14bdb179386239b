import pytest

from semhist.kernel.errors import ConfigError, InputError
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings


def test_explicit_beats_env_beats_default(tmp_path):
    env = {"SEMHIST_TOP_N": "5", "SEMHIST_GAP_SECONDS": "60", "SEMHIST_CACHE_DIR": str(tmp_path)}
    s = Settings.load(env=env, top_n=7)
    assert s.top_n == 7            # explicit
    assert s.gap_seconds == 60.0   # environment
    assert s.recent == 6           # default
    assert s.cache_dir == tmp_path


def test_none_means_not_given():
    assert Settings.load(env={"SEMHIST_TOP_N": "4"}, top_n=None).top_n == 4


@pytest.mark.parametrize("env,match", [
    ({"SEMHIST_TOP_N": "three"}, "SEMHIST_TOP_N"),
    ({"SEMHIST_TOP_N": "0"}, "top_n"),
    ({"SEMHIST_KEYWORD": "magic"}, "keyword must be one of"),
    ({"SEMHIST_LENIENT": "maybe"}, "SEMHIST_LENIENT"),
    ({"AZURE_OPENAI_ENDPOINT": "https://x.openai.azure.com"}, "deployment"),
])
def test_bad_settings_are_clear_errors(env, match):
    with pytest.raises(ConfigError, match=match):
        Settings.load(env=env)


def test_llm_from_environment():
    assert Settings.load(env={}).llm is None
    s = Settings.load(env={"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "SEMHIST_LLM_MODEL": "m"})
    assert (s.llm.provider, s.llm.model, s.llm.base_url) == ("openai", "m", "http://127.0.0.1:1/v1")
    az = Settings.load(env={"AZURE_OPENAI_ENDPOINT": "https://x", "AZURE_OPENAI_API_KEY": "k",
                            "AZURE_OPENAI_DEPLOYMENT": "gpt4o", "OPENAI_API_VERSION": "2024-10-21"})
    assert (az.llm.provider, az.llm.model, az.llm.api_version) == ("azure", "gpt4o", "2024-10-21")
    assert "k" not in repr(az.llm)


@pytest.mark.parametrize("text,full,tokens", [("2000", 99999, 2000), ("10%", 5000, 500), ("2.5%", 1000, 25)])
def test_budget(text, full, tokens):
    assert Budget.parse(text).tokens(full) == tokens


@pytest.mark.parametrize("text", ["", "ten", "-5", "0", "150%", "10 %%"])
def test_bad_budget(text):
    with pytest.raises(InputError):  # the caller's input, like a bad message: exit 2, HTTP 422
        Budget.parse(text)


def test_cli_flags_are_derived_from_the_settings():
    from dataclasses import MISSING

    from semhist.kernel.settings import settings_fields
    from semhist.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    offered = {a.dest: a for a in commands["ask"]._actions}
    served = {a.dest: a for a in commands["serve"]._actions}
    for f in settings_fields():
        assert f.name in served, f"semhist serve does not offer the setting {f.name}"
        if f.metadata["group"] == "service":  # the HTTP service's limits
            assert f.name not in offered
            continue
        assert f.name in offered, f"semhist ask does not offer the setting {f.name}"
        if f.default is not MISSING and not isinstance(f.default, bool) and f.default is not None:
            assert f"default: {f.default}" in offered[f.name].help, f.name
    assert "default: 1200" in offered["max_block_tokens"].help
    threads = {a.dest for a in parser._subparsers._group_actions[0].choices["threads"]._actions}
    assert {"db", "data_dir"} <= threads and not threads & {"embedder", "top_n", "pii", "gap_seconds"}


def test_flags_beat_the_environment_which_beats_the_defaults(monkeypatch):
    from semhist.cli import build_parser
    from semhist.cli.options import settings_from

    monkeypatch.setenv("SEMHIST_TOP_N", "5")
    monkeypatch.setenv("SEMHIST_RECENT", "8")
    args = build_parser().parse_args(["ask", "f.json", "q", "--top-n", "7", "--no-fill-budget"])
    s = settings_from(args)
    assert (s.top_n, s.recent, s.fill_budget, s.window) == (7, 8, False, 10)
