"""The flags and wiring of `ascend-hybrid run`'s reliability and security options (main.py calls these):
leader election (leader.py), the authenticated metrics endpoint (metrics_auth.py), per-job NetworkPolicies."""

from __future__ import annotations

import json
import logging
import os
import sys

from ascend_hybrid.controller.settings import OperatorSettings

log = logging.getLogger(__name__)
EXIT_LOST_LEADERSHIP = 3


def add_arguments(parser) -> None:
    defaults = OperatorSettings()
    election = parser.add_argument_group("leader election (coordination.k8s.io/v1 Lease)")
    election.add_argument("--leader-elect", action="store_true",
                          help="reconcile only while holding the Lease; standbys keep their watches warm")
    election.add_argument("--lease-name", default=defaults.lease_name, help="name of the Lease")
    election.add_argument("--lease-namespace", help="namespace of the Lease and of the observed-efficiency ConfigMap "
                          "(default: the namespace the operator runs in, else the kubeconfig context's, else default)")
    election.add_argument("--lease-duration-seconds", type=int, default=defaults.lease_seconds,
                          help="how long a standby waits after the last renewal before it takes the Lease")
    election.add_argument("--lease-renew-deadline-seconds", type=float, default=defaults.lease_renew_deadline_seconds,
                          help="how long the leader keeps leading without a successful renewal")
    election.add_argument("--lease-retry-seconds", type=float, default=defaults.lease_retry_seconds,
                          help="seconds between renewals (leader) and between tries (standby)")
    parser.add_argument("--watch-timeout-seconds", type=int, default=defaults.watch_timeout_seconds,
                        help="seconds a watch runs before it is renewed; a silent connection is dropped ~10%% "
                        "later and the operator lists again")
    security = parser.add_argument_group("security")
    security.add_argument("--metrics-auth", action="store_true",
                          help="serve /metrics over HTTPS, only to bearer tokens that a TokenReview authenticates "
                          "and a SubjectAccessReview allows to get /metrics (as controller-runtime's filter)")
    security.add_argument("--metrics-cert-dir", help="tls.crt and tls.key for --metrics-auth (default: a "
                          "self-signed certificate made at start)")
    security.add_argument("--network-policy", action="store_true",
                          help="give every job a NetworkPolicy: only its own pods reach its pods, and only "
                          "--metrics-peers reach the trainers' metrics port")
    security.add_argument("--metrics-peers", default="[]",
                          help="JSON list of NetworkPolicyPeers (the operator, Prometheus) allowed to the "
                          "trainers' :9400 under --network-policy")


def settings_of(args) -> dict:
    try:
        peers = json.loads(args.metrics_peers)
    except ValueError as error:
        raise SystemExit(f"error: --metrics-peers is not JSON: {error}") from None
    if not isinstance(peers, list) or not all(isinstance(peer, dict) for peer in peers):
        raise SystemExit("error: --metrics-peers must be a JSON list of NetworkPolicyPeer objects")
    return {"leader_elect": args.leader_elect, "lease_name": args.lease_name, "lease_namespace": args.lease_namespace,
            "lease_seconds": args.lease_duration_seconds,
            "lease_renew_deadline_seconds": args.lease_renew_deadline_seconds,
            "lease_retry_seconds": args.lease_retry_seconds, "metrics_auth": args.metrics_auth,
            "metrics_cert_dir": args.metrics_cert_dir, "network_policy": args.network_policy,
            "metrics_peers": tuple(peers), "watch_timeout_seconds": args.watch_timeout_seconds}


def _exit_on_lost_leadership() -> None:
    """As controller-runtime: a replica that lost the Lease ends, and starts again as a standby (the kubelet
    restarts it), so nothing of its leadership — a pass half done, a promise of chips — outlives it."""
    print("error: lost the leader Lease; exiting so that no stale reconcile outlives the leadership",
          file=sys.stderr, flush=True)
    logging.shutdown()
    os._exit(EXIT_LOST_LEADERSHIP)


def leader_elector(settings: OperatorSettings, api_client, on_lost=_exit_on_lost_leadership):
    """The elector for --leader-elect (not started), or None: then this process is the only one and leads."""
    from kubernetes import client

    from ascend_hybrid.controller.leader import (
        LEADER,
        LeaderElector,
        LeaseSettings,
        candidate_identity,
        default_lease_namespace,
    )

    if not settings.leader_elect:
        LEADER.set(1)
        return None
    lease = LeaseSettings(name=settings.lease_name,
                          namespace=settings.lease_namespace or default_lease_namespace(settings.kubeconfig),
                          identity=candidate_identity(), lease_seconds=settings.lease_seconds,
                          renew_deadline_seconds=settings.lease_renew_deadline_seconds,
                          retry_seconds=settings.lease_retry_seconds)
    return LeaderElector(client.CoordinationV1Api(api_client), lease, on_lost=on_lost)


def serve_metrics(settings: OperatorSettings, api_client) -> None:
    if not settings.metrics_port:
        return
    if settings.metrics_auth:
        from ascend_hybrid.controller.metrics_auth import serve_authenticated

        serve_authenticated(settings.bind_address, settings.metrics_port, api_client, settings.metrics_cert_dir)
        return
    from prometheus_client import start_http_server

    start_http_server(settings.metrics_port, addr=settings.bind_address)
