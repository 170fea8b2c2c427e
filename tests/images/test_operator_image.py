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


def test_the_operator_image_runs_the_rank_table_expander_and_has_its_probe_command(images):
    """Large jobs' pods run this image as their rank-table expander (render.expander_container): a 16 384-rank
    ConfigMap's files expanded to the complete hccl.json, and `test -s` (its startup probe) present."""
    script = (
        "import base64, os; from ascend_hybrid.gang import ranktable\n"
        "servers = [{'device': [{'device_id': str(c), 'device_ip': f'127.{64 + i // 250}.{i % 250}.{c}', "
        "'rank_id': str(8 * i + c)} for c in range(8)], 'server_id': f'127.15.{i // 250}.{i % 250 + 1}', "
        "'host_ip': f'127.15.{i // 250}.{i % 250 + 1}', 'container_ip': f'127.16.{i // 250}.{i % 250 + 1}'} "
        "for i in range(2048)]\n"
        "table = {'status': 'completed', 'server_list': servers, 'server_count': '2048', 'version': '1.0'}\n"
        "data, binary = ranktable.config_map_data(table, 2)\n"
        "os.makedirs('/tmp/source')\n"
        "[open(f'/tmp/source/{k}', 'w').write(v) for k, v in data.items()]\n"
        "[open(f'/tmp/source/{k}', 'wb').write(base64.b64decode(v)) for k, v in binary.items()]\n")
    shell = (f"python3 -c \"{script}\" && python3 -m ascend_hybrid.ranktable_sidecar --source /tmp/source "
             "--target /tmp/target --once && test -s /tmp/target/hccl.json && cat /tmp/target/version && echo && "
             "python3 -c \"import json; t = json.load(open('/tmp/target/hccl.json')); "
             "print(len([d for s in t['server_list'] for d in s['device']]))\"")
    proc = images.run(images.operator, "sh", "-c", shell, timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "status completed, version 2" in proc.stdout and proc.stdout.split()[-2:] == ["2", "16384"], proc.stdout
