"""Start a process as in a pod: in-cluster credentials and no kubeconfig anywhere.

What Kubernetes documents for in-cluster clients: $KUBERNETES_SERVICE_HOST/PORT and the
service account's token, CA certificate and namespace at
/var/run/secrets/kubernetes.io/serviceaccount. :func:`in_cluster` wraps an argv so the
process runs in its own mount namespace (``unshare -m``, private propagation) with a
tmpfs on /run holding those files: the host's /run is untouched, and the process finds
the account where a pod has it. ``exec`` keeps the process's PID the wrapper's, so
signals and /proc reads reach it. The API simulator serves the matching HTTPS
(``ApiSimulator(tls=True, token=...)``, its ``ca_cert``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Where a pod has its service account (/var/run is a link to /run on Debian).
ACCOUNT = "/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    """The account's files as written by :meth:`write` (the source of the copies)."""

    directory: Path
    host: str
    port: int

    @classmethod
    def write(
        cls, directory: Path, *, token: str, ca_cert: Path, namespace: str, host: str, port: int
    ) -> ServiceAccount:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(token)
        (directory / "ca.crt").write_bytes(ca_cert.read_bytes())
        (directory / "namespace").write_text(namespace)
        return cls(directory, host, port)


def in_cluster(
    argv: Sequence[str], account: ServiceAccount, environ: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """``argv`` wrapped to run with ``account`` mounted as a pod's, and its environment:
    ``environ`` (default os.environ) without KUBECONFIG and POD_NAMESPACE, HOME pointing
    at the account's directory (no ~/.kube/config), and the Service's variables."""
    setup = [
        "mount -t tmpfs tmpfs /run",
        f"mkdir -p {ACCOUNT}",
        *(
            f"cp {shlex.quote(str(account.directory / name))} {ACCOUNT}/{name}"
            for name in ("token", "ca.crt", "namespace")
        ),
        shlex.join(["exec", *argv]),
    ]
    env = dict(os.environ if environ is None else environ)
    for name in ("KUBECONFIG", "POD_NAMESPACE"):
        env.pop(name, None)
    env |= {
        "HOME": str(account.directory),
        "KUBERNETES_SERVICE_HOST": account.host,
        "KUBERNETES_SERVICE_PORT": str(account.port),
    }
    wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", " && ".join(setup)]
    return wrapped, env
