"""The operator image, as built by `make images`: its console scripts run, as the non-root user, offline."""

from __future__ import annotations

import pytest

from support.images import IMAGES_TIMEOUT_S

pytestmark = [pytest.mark.images, pytest.mark.timeout(IMAGES_TIMEOUT_S)]


def test_the_operator_image_runs_ascend_hybrid_help(images):
    proc = images.run(images.operator, "ascend-hybrid", "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ascend-hybrid"), proc.stdout
    for command in ("run", "validate", "render", "crd"):
        assert command in proc.stdout


def test_the_operator_image_defaults_to_the_operator_as_a_non_root_user(images):
    config = images.podman("image", "inspect", "--format", "{{json .Config.Cmd}} {{.Config.User}}",
                           images.operator).stdout.split()
    assert config == ['["ascend-hybrid","run"]', "10001"]
    proc = images.run(images.operator, "id", "-u", timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "10001"), proc.stderr


def test_the_operator_image_has_no_mindspore_and_its_trainer_command_says_how_to_get_it(images):
    proc = images.run(images.operator, "ascend-hybrid-trainer", "local", "--data", "1", timeout=60)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "pip install 'ascend-hybrid[trainer]'" in proc.stderr
