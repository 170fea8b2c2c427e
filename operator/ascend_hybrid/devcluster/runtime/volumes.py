"""The files of a container-runtime pod's volumes (pure), as the kubelet writes them before it starts the
container and keeps them in sync while it runs: ConfigMap volumes, downward API volumes and projected volumes
(ServiceAccount token, ConfigMap and downward API sources), each file with its mode.

The ServiceAccount admission plugin gives every pod a projected volume `kube-api-access-…` mounted at
/var/run/secrets/kubernetes.io/serviceaccount: a token (`serviceAccountToken`), the cluster's CA (`configMap`
kube-root-ca.crt, key ca.crt) and the namespace (`downwardAPI` metadata.namespace). The token comes from the
TokenRequest API (the shell asks for it, bound to the pod, for the source's audience and lifetime: token_sources
says which) and is refreshed once 80 % of its lifetime has passed (refresh_due), as the kubelet does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascend_hybrid.devcluster.runtime.launch import (
    NotRunnable,
    PodLayout,
    configmap_source_files,
    downward_value,
    relative_item_path,
)

DEFAULT_MODE = 0o644          # the API's default for defaultMode (420)
DEFAULT_TOKEN_SECONDS = 3600  # serviceAccountToken.expirationSeconds when unset
REFRESH_AT = 0.8              # of a token's lifetime
REFRESH_AT_LATEST_SECONDS = 24 * 3600


@dataclass(frozen=True)
class VolumeFile:
    content: bytes
    mode: int = DEFAULT_MODE


@dataclass(frozen=True, order=True)
class TokenSource:
    """One token a pod's volumes need: for its ServiceAccount, an audience ("" = the apiserver's own) and a
    lifetime."""

    service_account: str
    audience: str
    expiration_seconds: int


def _volumes(pod: dict) -> list[dict]:
    return (pod.get("spec") or {}).get("volumes") or []


def service_account(pod: dict) -> str:
    return (pod.get("spec") or {}).get("serviceAccountName") or "default"


def token_sources(pod: dict) -> list[TokenSource]:
    """Every token the pod's projected volumes hold, once each."""
    sources = set()
    for volume in _volumes(pod):
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is not None:
                sources.add(TokenSource(service_account(pod), token.get("audience") or "",
                                        int(token.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)))
    return sorted(sources)


def refresh_due(issued: float, expires: float, now: float) -> bool:
    """The kubelet's rule: a token older than 80 % of its lifetime, or than 24 h, is replaced."""
    return now >= min(issued + REFRESH_AT * (expires - issued), issued + REFRESH_AT_LATEST_SECONDS)


def format_map(values: dict) -> str:
    """How the kubelet writes metadata.labels or metadata.annotations into a file: key="value" lines, sorted."""
    return "\n".join(f'{key}="{_quoted(value)}"' for key, value in sorted(values.items()))


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _field_content(pod: dict, volume: str, item: dict) -> bytes:
    if "fieldRef" not in item:
        kind = next((key for key in item if key not in ("path", "mode")), "?")
        raise NotRunnable("CreateContainerConfigError", f"volume {volume!r}: downward API item {kind} is not "
                          "supported by the container runtime (fieldRef is)")
    path = item["fieldRef"]["fieldPath"]
    meta = pod.get("metadata") or {}
    if path in ("metadata.labels", "metadata.annotations"):
        return format_map(meta.get(path.split(".")[1]) or {}).encode()
    return downward_value(pod, path).encode()


def _downward_files(pod: dict, volume: str, items: list[dict], directory: Path, default_mode: int) -> dict:
    return {directory / relative_item_path(volume, item["path"]):
            VolumeFile(_field_content(pod, volume, item), item.get("mode", default_mode)) for item in items}


def _configmap_files(pod: dict, volume: str, source: dict, configmaps: dict, directory: Path,
                     default_mode: int) -> dict:
    contents = configmap_source_files(pod["metadata"]["namespace"], volume, source, configmaps, directory)
    modes = {directory / relative_item_path(volume, item["path"]): item["mode"]
             for item in source.get("items") or [] if "mode" in item}
    return {path: VolumeFile(content, modes.get(path, default_mode)) for path, content in contents.items()}


def _projected_files(pod: dict, volume: str, projected: dict, configmaps: dict, tokens: dict[TokenSource, str],
                     directory: Path) -> dict:
    default_mode, files = projected.get("defaultMode", DEFAULT_MODE), {}
    for source in projected.get("sources") or []:
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            wanted = TokenSource(service_account(pod), token.get("audience") or "",
                                 int(token.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS))
            if wanted not in tokens:
                raise NotRunnable("FailedMount", f"MountVolume.SetUp failed for volume {volume!r}: no token for "
                                  f"ServiceAccount {wanted.service_account!r} yet")
            files[directory / relative_item_path(volume, token["path"])] = VolumeFile(tokens[wanted].encode(),
                                                                                      default_mode)
        elif "configMap" in source:
            files.update(_configmap_files(pod, volume, source["configMap"], configmaps, directory, default_mode))
        elif "downwardAPI" in source:
            files.update(_downward_files(pod, volume, source["downwardAPI"].get("items") or [], directory,
                                         default_mode))
        else:
            kind = next(iter(source), "?")
            raise NotRunnable("CreateContainerConfigError", f"volume {volume!r}: projected source {kind} is not "
                              "supported by the container runtime (serviceAccountToken, configMap and "
                              "downwardAPI are)")
    return files


def volume_files(pod: dict, configmaps: dict, layout: PodLayout, tokens: dict[TokenSource, str]) -> dict[Path,
                                                                                                        VolumeFile]:
    """Every file of the pod's ConfigMap, downward API and projected volumes, local path → content and mode;
    NotRunnable (FailedMount) while a ConfigMap or a token is missing."""
    files: dict[Path, VolumeFile] = {}
    for volume in _volumes(pod):
        name, directory = volume["name"], layout.volume_dir(volume["name"])
        if "configMap" in volume:
            source = volume["configMap"]
            files.update(_configmap_files(pod, name, source, configmaps, directory,
                                          source.get("defaultMode", DEFAULT_MODE)))
        elif "downwardAPI" in volume:
            source = volume["downwardAPI"]
            files.update(_downward_files(pod, name, source.get("items") or [], directory,
                                         source.get("defaultMode", DEFAULT_MODE)))
        elif "projected" in volume:
            files.update(_projected_files(pod, name, volume["projected"], configmaps, tokens, directory))
    return files
