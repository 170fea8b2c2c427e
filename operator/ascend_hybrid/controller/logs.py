"""The operator's log lines: text for people, or one JSON object per line for a log pipeline (`--log-format json`).

A line about one job carries it as fields (`namespace`, `name`): callers pass `extra=job_fields(key)`, so a
pipeline can select a job's lines without parsing the message."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def job_fields(key: tuple[str, str]) -> dict[str, str]:
    """The `extra` of a log call about one job."""
    return {"job_namespace": key[0], "job_name": key[1]}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (RFC 3339, UTC), level, logger, message, the job's namespace and name
    where the record is about one, and the exception's traceback where there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        namespace, name = getattr(record, "job_namespace", None), getattr(record, "job_name", None)
        if namespace is not None:
            line["namespace"], line["name"] = namespace, name
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(level: str, log_format: str) -> None:
    """The root logger's one handler, on stderr, in the chosen format (replacing any handler set before)."""
    if log_format not in FORMATS:
        raise ValueError(f"--log-format={log_format!r}: must be one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
