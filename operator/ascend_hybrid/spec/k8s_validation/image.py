"""Image references as the kubelet parses them (github.com/distribution/reference)."""

from __future__ import annotations

import re

from ascend_hybrid.spec.k8s_validation.names import _full

# --- distribution/reference: the image the kubelet will pull -------------------------------------------------------

_ALPHANUMERIC = "[a-z0-9]+"
_SEPARATOR = "(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_AND_PORT = ("(?:" + _DOMAIN_COMPONENT + "(?:\\." + _DOMAIN_COMPONENT + ")*|\\[(?:[a-fA-F0-9:]+)\\])"
                    "(?::[0-9]+)?")
_PATH_COMPONENT = _ALPHANUMERIC + "(?:" + _SEPARATOR + _ALPHANUMERIC + ")*"
_REMOTE_NAME = _PATH_COMPONENT + "(?:/" + _PATH_COMPONENT + ")*"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
_NAME = "(?:" + _DOMAIN_AND_PORT + "/)?" + _REMOTE_NAME
IMAGE_REFERENCE = _NAME + "(?::" + _TAG + ")?(?:@" + _DIGEST + ")?"
IMAGE_REFERENCE_MESSAGE = ("is not an image reference the kubelet can pull ([registry[:port]/]lowercase/path[:tag]"
                           "[@sha256:digest], no whitespace; e.g. 'registry.example.com/team/trainer:1.0')")
IMAGE_MAX = 4096
_REPOSITORY_MAX = 255  # reference.RepositoryNameTotalLengthMax
_DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}


def image_detail_errors(image: str) -> list[str]:
    """What ParseNormalizedNamed refuses beyond IMAGE_REFERENCE: a bare 64-hex id, a repository name over 255
    characters, a digest of an unknown algorithm or of the wrong length (lower-case hex, as go-digest wants)."""
    if not _full(IMAGE_REFERENCE, image):
        return []
    if _full("[a-f0-9]{64}", image):
        return ["cannot specify 64-byte hexadecimal strings (an image id is not a name)"]
    errors = []
    path = _repository_path(image)
    if path is not None and len(path) > _REPOSITORY_MAX:
        errors.append(f"repository name must not be more than {_REPOSITORY_MAX} characters")
    if "@" in image:
        algorithm, _, encoded = image.rpartition("@")[2].partition(":")
        if algorithm not in _DIGEST_HEX:
            errors.append(f"unsupported digest algorithm {algorithm!r} (sha256, sha384 or sha512)")
        elif not _full(f"[a-f0-9]{{{_DIGEST_HEX[algorithm]}}}", encoded):
            errors.append(f"a {algorithm} digest is {_DIGEST_HEX[algorithm]} lower-case hexadecimal characters")
    return errors


def _repository_path(image: str) -> str | None:
    """The repository path Parse measures, after ParseNormalizedNamed's splitDockerDomain: a first component
    without '.', ':' or upper case is no registry (docker.io is), and a one-component name gets 'library/'."""
    first, slash, rest = image.partition("/")
    if not slash:
        domain, remainder = "docker.io", image
    elif first == "localhost" or "." in first or ":" in first or first.lower() != first:
        domain, remainder = first, rest
    elif first == "index.docker.io":
        domain, remainder = "docker.io", rest
    else:
        domain, remainder = "docker.io", image
    if domain == "docker.io" and "/" not in remainder:
        remainder = "library/" + remainder
    reference = re.fullmatch("(" + _NAME + ")(?::" + _TAG + ")?(?:@" + _DIGEST + ")?", f"{domain}/{remainder}")
    name = reference and re.fullmatch("(?:" + _DOMAIN_AND_PORT + ")/(" + _REMOTE_NAME + ")", reference.group(1))
    return name.group(1) if name else None


def is_image_reference(image: str) -> bool:
    return bool(image) and _full(IMAGE_REFERENCE, image)
