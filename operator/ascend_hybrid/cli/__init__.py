"""The `ascend-hybrid` command (shell): `commands` parses and dispatches every sub-command, `inputs` reads files
strictly (YAML/JSON, duplicate keys, shapes) and `plan` is the planner's command. The operator (`run`), the dev tools
and the dev cluster load lazily, so that `validate` never imports kopf."""


def main(argv: list[str] | None = None) -> int:
    """The console script's entry point (pyproject), loaded lazily so that importing the package costs nothing."""
    from ascend_hybrid.cli.commands import main as run_command

    return run_command(argv)
