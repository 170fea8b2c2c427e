"""Kubernetes' own rules on what the pods will carry (k8s_validation/), as rules of the job where CEL can check
them at admission too: the image, object names, the queue label, topology-tier keys. Python and CEL give the same
message; a value is shown in double quotes."""

from __future__ import annotations

from collections.abc import Callable

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts.ascend import (
    DEVICE_PLUGIN_PREFIXES,
    PREDICATE_TIME_ANNOTATION,
    RACK_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_PREFIX,
)
from ascend_hybrid.spec import k8s_validation as k8s
from ascend_hybrid.spec.api import AscendHybridJobSpec
from ascend_hybrid.spec.cel import cel_format, cel_full_match, cel_string
from ascend_hybrid.spec.resolved import ResolvedJob, Rule

IMAGE_EMPTY = "spec.template.image: must not be empty (the container image of every pod)"
_IMAGE_TEXT = f"spec.template.image=\"%s\" {k8s.IMAGE_REFERENCE_MESSAGE}"
_SUBDOMAIN_TEXT = ("must be a lowercase RFC 1123 subdomain ({what} name): lower case alphanumeric characters, '-' or "
                   "'.', starting and ending with an alphanumeric character (e.g. 'example.com')")
_QUEUE_TEXT = ("spec.scheduling.queue=\"%s\" must name a Kueue LocalQueue the pods can carry as a label: a lowercase "
               "RFC 1123 subdomain (lower case alphanumeric characters, '-' or '.', starting and ending with an "
               f"alphanumeric character) of at most {k8s.LABEL_VALUE_MAX} characters (e.g. 'team-a')")
_TIER_TEXT = ("spec.scheduling.topologyTiers: \"%s\" is not a valid node label key: an optional DNS subdomain prefix "
              f"(at most {k8s.DNS1123_SUBDOMAIN_MAX} characters) and '/', then a name of at most "
              f"{k8s.LABEL_KEY_NAME_MAX} characters that {k8s.LABEL_KEY_NAME_MESSAGE} "
              f"(e.g. '{RACK_LABEL}')")


def _shown(text: str, value: str) -> str:
    return text.replace('"%s"', k8s.quoted(value))


def _image(e: ResolvedJob) -> str | None:
    image = e.spec.template.image
    if not image:
        return IMAGE_EMPTY
    return None if k8s.is_image_reference(image) else _shown(_IMAGE_TEXT, image)


def _image_details(e: ResolvedJob) -> str | None:
    """What only the kubelet's parser sees (a 64-hex id, a repository over 255 characters, the digest's algorithm
    and length): Python only, the regular expression of the CEL rule above cannot count or compare."""
    errors = k8s.image_detail_errors(e.spec.template.image)
    return f"spec.template.image={k8s.quoted(e.spec.template.image)}: {'; '.join(errors)}" if errors else None


def _subdomain_rule(path: str, what: str, value_of: Callable[[AscendHybridJobSpec], str | None], cel_guard: str) -> Rule:
    """`path` (spec.a.b) names an object the apiserver requires to be a DNS-1123 subdomain; empty means unset,
    except where `cel_guard` says the field is required (a claim name)."""
    text = f"{path}=\"%s\": {_SUBDOMAIN_TEXT.format(what=what)}"
    cel_path = "self." + path.removeprefix("spec.")
    optional = cel_guard == ""

    def check(e: ResolvedJob) -> str | None:
        value = value_of(e.spec)
        if value is None or (optional and value == "") or not k8s.dns1123_subdomain_errors(value):
            return None
        return _shown(text, value)

    guard = f"!has({cel_path}) || size({cel_path}) == 0" if optional else cel_guard
    return Rule(check, f"{guard} || {cel_full_match(cel_path, k8s.DNS1123_SUBDOMAIN)}", cel_format(text, cel_path))


_PULL_SECRET_TEXT = f"spec.template.imagePullSecrets: \"%s\" {_SUBDOMAIN_TEXT.format(what='a Secret')}"
_CEL_PULL_SECRETS = "self.template.imagePullSecrets"
_CEL_PULL_SECRET_OK = cel_full_match("s", k8s.DNS1123_SUBDOMAIN)


def _pull_secrets(e: ResolvedJob) -> str | None:
    bad = [name for name in e.spec.template.image_pull_secrets if k8s.dns1123_subdomain_errors(name)]
    return _shown(_PULL_SECRET_TEXT, bad[0]) if bad else None


def _queue(e: ResolvedJob) -> str | None:
    queue = e.spec.scheduling.queue
    if queue is None or (len(queue) <= k8s.LABEL_VALUE_MAX and not k8s.dns1123_subdomain_errors(queue)):
        return None
    return _shown(_QUEUE_TEXT, queue)


def _topology_tiers(e: ResolvedJob) -> str | None:
    bad = [tier for tier in e.spec.scheduling.topology_tiers if k8s.label_key_errors(tier)]
    return _shown(_TIER_TEXT, bad[0]) if bad else None


# Annotation keys a pod's template may not set: those the Ascend device plugin, Volcano and Kueue write on the pods
# (the operator reads the device plugin's for the chips a pod holds and the rank table), and the operator's own.
RESERVED_ANNOTATION_PREFIXES = (*DEVICE_PLUGIN_PREFIXES, VOLCANO_PREFIX, f"{kueue.GROUP}/", f"{names.GROUP}/")
RESERVED_ANNOTATION_KEYS = (VOLCANO_GROUP_ANNOTATION, PREDICATE_TIME_ANNOTATION, names.RANK_INDEX_ANNOTATION)
_RESERVED_TEXT = ("spec.template.metadata.annotations: key \"%s\" is reserved: the Ascend device plugin, Volcano, "
                  "Kueue and the operator write it on the pods themselves (prefixes "
                  f"{', '.join(RESERVED_ANNOTATION_PREFIXES)}; keys {', '.join(RESERVED_ANNOTATION_KEYS)})")


def reserved_annotation(key: str) -> bool:
    return key.startswith(RESERVED_ANNOTATION_PREFIXES) or key in RESERVED_ANNOTATION_KEYS


def _reserved_annotations(e: ResolvedJob) -> str | None:
    reserved = [key for key in e.spec.template.metadata.annotations if reserved_annotation(key)]
    return _shown(_RESERVED_TEXT, reserved[0]) if reserved else None


_CEL_ANNOTATIONS = "self.template.metadata.annotations"
_CEL_RESERVED = " || ".join([*(f"k.startsWith({cel_string(prefix)})" for prefix in RESERVED_ANNOTATION_PREFIXES),
                             *(f"k == {cel_string(key)}" for key in RESERVED_ANNOTATION_KEYS)])

_LONG_PREFIX = "^[^/]{" + str(k8s.DNS1123_SUBDOMAIN_MAX + 1) + ",}/"  # a prefix over 253 characters
_CEL_TIER_OK = f"{cel_full_match('t', k8s.LABEL_KEY)} && !t.matches({cel_string(_LONG_PREFIX)})"
_CEL_IMAGE = "self.template.image"

FIELD_RULES: tuple[Rule, ...] = (
    Rule(_image, f"size({_CEL_IMAGE}) > 0 && {cel_full_match(_CEL_IMAGE, k8s.IMAGE_REFERENCE)}",
         f"size({_CEL_IMAGE}) == 0 ? {cel_string(IMAGE_EMPTY)} : {cel_format(_IMAGE_TEXT, _CEL_IMAGE)}"),
    Rule(_image_details),
    _subdomain_rule("spec.template.serviceAccountName", "a ServiceAccount", lambda s: s.template.service_account_name,
                    ""),
    _subdomain_rule("spec.template.priorityClassName", "a PriorityClass", lambda s: s.template.priority_class_name,
                    ""),
    _subdomain_rule("spec.scheduling.schedulerName", "a scheduler", lambda s: s.scheduling.scheduler_name, ""),
    Rule(_pull_secrets, f"!has({_CEL_PULL_SECRETS}) || {_CEL_PULL_SECRETS}.all(s, {_CEL_PULL_SECRET_OK})",
         cel_format(_PULL_SECRET_TEXT, f"{_CEL_PULL_SECRETS}.filter(s, !{_CEL_PULL_SECRET_OK})[0]")),
    _subdomain_rule("spec.scheduling.volcano.queue", "a Volcano Queue",
                    lambda s: s.scheduling.volcano.queue if s.scheduling.volcano else None,
                    "!has(self.scheduling.volcano)"),
    _subdomain_rule("spec.training.checkpoint.claimName", "a PersistentVolumeClaim",
                    lambda s: s.training.checkpoint.claim_name if s.training.checkpoint else None,
                    "!has(self.training.checkpoint)"),
    Rule(_queue, f"!has(self.scheduling.queue) || (size(self.scheduling.queue) <= {k8s.LABEL_VALUE_MAX} && "
                 f"{cel_full_match('self.scheduling.queue', k8s.DNS1123_SUBDOMAIN)})",
         cel_format(_QUEUE_TEXT, "self.scheduling.queue")),
    Rule(_reserved_annotations,
         f"!has(self.template.metadata.annotations) || {_CEL_ANNOTATIONS}.all(k, !({_CEL_RESERVED}))",
         cel_format(_RESERVED_TEXT, f"{_CEL_ANNOTATIONS}.filter(k, {_CEL_RESERVED})[0]")),
    Rule(_topology_tiers,
         f"!has(self.scheduling.topologyTiers) || self.scheduling.topologyTiers.all(t, {_CEL_TIER_OK})",
         cel_format(_TIER_TEXT, f"self.scheduling.topologyTiers.filter(t, !({_CEL_TIER_OK}))[0]")),
)
