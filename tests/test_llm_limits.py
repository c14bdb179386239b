"""The LLM tests' time limit follows the machine (tests/conftest.py, ModelSpeed): the packaged
model's measured speed and how much busier the machine has become since, so a busy machine gives
the verdicts a quiet one gives instead of running out of a fixed 120 s."""

from __future__ import annotations

import os

import pytest

from .conftest import LEAST_LLM_TIMEOUT, WORST_READ, WORST_WRITTEN, ModelSpeed, busier

CORES = os.cpu_count() or 1


@pytest.fixture
def load(monkeypatch):
    """Set the 1-minute load average the limit reads."""
    def at(value: float) -> None:
        monkeypatch.setattr(os, "getloadavg", lambda: (value, value, value))
    return at


def test_a_fast_model_on_a_quiet_machine_keeps_the_least_limit(load):
    load(0.0)
    assert ModelSpeed(read_s=0.002, write_s=0.02, load=0.0).timeout() == LEAST_LLM_TIMEOUT


def test_a_slower_model_gets_the_time_its_largest_call_needs(load):
    load(0.0)
    slow = ModelSpeed(read_s=0.1, write_s=1.0, load=0.0)
    assert slow.timeout() == pytest.approx(WORST_READ * 0.1 + WORST_WRITTEN * 1.0)
    assert ModelSpeed(read_s=0.2, write_s=2.0, load=0.0).timeout() == pytest.approx(2 * slow.timeout())


def test_a_machine_busier_than_when_measured_scales_the_limit(load):
    speed = ModelSpeed(read_s=0.1, write_s=1.0, load=0.0)
    load(0.0)
    quiet = speed.timeout()
    load(3.0 * CORES)
    assert speed.timeout() == pytest.approx(3 * quiet)
    # measured while as busy as now: the measurement already holds it, nothing is counted twice
    assert ModelSpeed(read_s=0.1, write_s=1.0, load=3.0 * CORES).timeout() == pytest.approx(quiet)


def test_a_load_under_one_task_a_core_counts_as_quiet(load):
    load(0.5 * CORES)
    assert busier(0.0) == 1.0
    assert busier(4.0 * CORES) == 1.0  # quieter than when measured: the measured speed stands


@pytest.mark.llm
@pytest.mark.slow
def test_the_packaged_model_is_measured(llm_speed, llm_env):
    assert 0 < llm_speed.read_s < llm_speed.write_s * 10 and llm_speed.write_s > 0
    assert float(llm_env["SEMHIST_LLM_TIMEOUT"]) >= LEAST_LLM_TIMEOUT
    assert "tokens/s read" in str(llm_speed) and "written, measured at load" in str(llm_speed)
