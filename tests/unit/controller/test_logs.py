"""The operator's log formats (controller/logs.py): text, or one JSON object per line with the job as fields."""

import argparse
import json
import logging

import pytest

from ascend_hybrid.controller import logs
from ascend_hybrid.controller.main import register, settings_from


def record(message: str, *args, exc_info=None, **extra) -> logging.LogRecord:
    made = logging.LogRecord("ascend_hybrid.controller.loop", logging.INFO, __file__, 1, message, args, exc_info)
    made.__dict__.update(extra)
    return made


def test_a_job_line_is_one_json_object_with_the_job_as_fields():
    line = logs.JsonFormatter().format(record("%s/%s: %s", "ns", "demo", "CreatePods", **logs.job_fields(("ns", "demo"))))
    parsed = json.loads(line)
    assert parsed["message"] == "ns/demo: CreatePods" and parsed["level"] == "INFO"
    assert (parsed["namespace"], parsed["name"]) == ("ns", "demo")
    assert parsed["logger"] == "ascend_hybrid.controller.loop" and parsed["time"].endswith("Z")
    assert "\n" not in line


def test_a_line_about_no_job_has_no_job_fields_and_an_exception_stays_on_its_line():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys
        line = logs.JsonFormatter().format(record("watch failed", exc_info=sys.exc_info()))
    parsed = json.loads(line)
    assert "namespace" not in parsed and "RuntimeError: boom" in parsed["exception"]
    assert "\n" not in line


def test_configure_installs_one_handler_in_the_chosen_format(capsys):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure("INFO", "json")
        logging.getLogger("x").info("hello", extra=logs.job_fields(("a", "b")))
        assert json.loads(capsys.readouterr().err.strip())["name"] == "b"
        with pytest.raises(ValueError, match="--log-format='xml': must be one of text, json"):
            logs.configure("INFO", "xml")
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_the_command_line_takes_the_format_into_the_settings():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert settings_from(parser.parse_args(["run", "--log-format", "json"])).log_format == "json"
    assert settings_from(parser.parse_args(["run"])).log_format == "text"
