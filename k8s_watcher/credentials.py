"""Kubernetes credentials: an in-cluster service account or a static kubeconfig read here,
any other kubeconfig resolved by the official client in a short-lived child process.

In a pod (no kubeconfig anywhere), the settings are what Kubernetes documents for
in-cluster clients: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the
service account's token, ca.crt and namespace files. That is a few file reads, done in
this process by `in_cluster` with no child (which would cost a second or more of start-up
importing the official client for nothing).

The `kubernetes` package is the supported reader of kubeconfig files (contexts, exec and
OIDC plugins, *-data fields, relative paths), but its package imports the whole generated
client: about 21 MiB more resident memory in every speaker, for settings read once. So
for a kubeconfig with an exec or auth-provider user (or several files in KUBECONFIG, or
one the loader would refuse) the loaders run in a child,
``python -m k8s_watcher.credentials [--kubeconfig PATH] [--context NAME]``, which prints
the resolved connection settings as one JSON object and exits; the daemon reads them into
`Credentials` and talks to the API with aiohttp itself (k8s_watcher.client), never
importing `kubernetes`. A static kubeconfig (a token, a token file, a client certificate or
basic auth: nothing that expires) is read in this process by k8s_watcher.kubeconfig with
the loader's rules, which costs milliseconds instead of the child's second.

Freshness, as the official client keeps it:

* in-cluster, the kubelet rotates the service account token in its file: the token is
  re-read from the file at most every TOKEN_REREAD seconds (the client's own period);
* an exec plugin or OIDC token comes with an expiry: the child is run again when a request
  is made within EXPIRY_MARGIN of it (at most every RERUN_INTERVAL);
* a 401 runs the child again (re-reads the token file in-cluster) once, and the request
  is retried once if that gave other credentials.

A missing or broken kubeconfig is a CredentialsError with the child's one-line reason; an
incomplete service account one with the missing piece (the official loader's wording).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import binascii
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Final

from bgpd.logs import log
from k8s_watcher.errors import CredentialsError

logger = logging.getLogger(__name__)

#: Seconds between re-reads of an in-cluster token file (the official client's period).
TOKEN_REREAD: Final = 60.0
#: Run the child again this many seconds before a reported token expiry.
EXPIRY_MARGIN: Final = 10.0
#: At most one child run per this many seconds for an expiry (a plugin reporting an
#: expiry in the past must not make every request start a process).
RERUN_INTERVAL: Final = 5.0
#: At most one child run per this many seconds for a 401 (a revoked static token is
#: retried by the informers; each retry must not cost a process).
RENEW_INTERVAL: Final = 30.0
#: Seconds the child may take (an exec plugin may ask a cloud API).
CHILD_TIMEOUT: Final = 60.0
#: The child's exit status when the credentials are unusable (its stdout says why).
EXIT_CREDENTIALS: Final = 2
#: Where the in-cluster account's settings come from, in messages.
IN_CLUSTER: Final = "in-cluster service account"
#: Where Kubernetes mounts a pod's service account: token, ca.crt, namespace.
SERVICE_ACCOUNT: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The environment variables naming the API server's Service, set in every pod.
SERVICE_HOST_ENV: Final = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV: Final = "KUBERNETES_SERVICE_PORT"


@dataclass(frozen=True, slots=True)
class Credentials:
    """Everything needed to reach the API server, as the child resolved it.

    `authorization` is the whole Authorization header value ("Bearer ...", "Basic ...");
    `token_file` (in-cluster) is where a rotated token is re-read; `expires` (Unix time)
    is when an exec plugin or OIDC token stops being valid. The PEM fields are the
    contents, never paths: the child's temporary files are gone when it exits.
    """

    source: str
    server: str
    authorization: str | None = None
    token_file: str | None = None
    expires: float | None = None
    ca_data: str | None = None
    cert_data: str | None = None
    key_data: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    #: The kubeconfig context's namespace (kubectl's default for -n), if it names one.
    namespace: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Credentials:
        """The child's output; CredentialsError if it is not what `to_json` writes."""
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or not isinstance(doc.get("server"), str):
                raise ValueError("not a credentials object")
            known = {f.name for f in fields(cls)}
            return cls(**{k: v for k, v in doc.items() if k in known})
        except (ValueError, TypeError) as exc:
            raise CredentialsError(f"credentials child printed no credentials: {exc}") from exc

    def needs_rerun(self, now: float, margin: float = EXPIRY_MARGIN) -> bool:
        """True when the token expires within `margin`: only the child can make a new one."""
        return self.expires is not None and now >= self.expires - margin


# --------------------------------------------------------------------------- where


def kubeconfig_candidates(explicit: str | None, environ: Mapping[str, str]) -> list[str]:
    """Kubeconfig paths to try, in kubectl's order; empty means "use in-cluster"."""
    if explicit:
        return [explicit]
    env = environ.get("KUBECONFIG", "")
    if env:
        return [env]
    home = Path(environ.get("HOME", str(Path.home()))) / ".kube" / "config"
    return [str(home)] if home.exists() else []


def resolve_kubeconfig(explicit: str | None, environ: Mapping[str, str]) -> str | None:
    """The kubeconfig path (list) to load, None for in-cluster; CredentialsError if an
    explicitly named file is missing (a typo must not silently fall back to in-cluster)."""
    candidates = kubeconfig_candidates(explicit, environ)
    if not candidates:
        return None
    path = candidates[0]
    if not any(Path(os.path.expanduser(p)).exists() for p in path.split(":") if p):
        raise CredentialsError(f"kubeconfig {path} does not exist")
    return path


# --------------------------------------------------------------------------- in-cluster


def _join_host_port(host: str, port: str) -> str:
    """host:port, an IPv6 address (or one with a zone) in brackets, as Go's JoinHostPort."""
    return f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"


def _read_in_cluster(environ: Mapping[str, str], account: Path) -> Credentials:
    """The service account's settings; ValueError (the official loader's wording) or
    OSError naming what is missing."""
    host, port = environ.get(SERVICE_HOST_ENV), environ.get(SERVICE_PORT_ENV)
    if host is None or port is None:
        raise ValueError("Service host/port is not set.")
    if not host or not port:
        raise ValueError("Service host/port is set but empty.")
    token_file, ca_file = account / "token", account / "ca.crt"
    if not token_file.is_file():
        raise ValueError("Service token file does not exist.")
    token = token_file.read_text().strip()
    if not token:
        raise ValueError("Token file exists but empty.")
    if not ca_file.is_file():
        raise ValueError("Service certification file does not exist.")
    ca_data = ca_file.read_text()
    if not ca_data.strip():
        raise ValueError("Cert file exists but empty.")
    try:
        namespace = (account / "namespace").read_text().strip() or None
    except OSError:  # optional: the Lease namespace falls back to "default"
        namespace = None
    return Credentials(
        source=IN_CLUSTER,
        server=f"https://{_join_host_port(host, port)}",
        authorization=f"Bearer {token}",
        token_file=str(token_file),
        ca_data=ca_data,
        namespace=namespace,
    )


def in_cluster(
    environ: Mapping[str, str] | None = None, account: Path | None = None
) -> Credentials:
    """The pod's service account (`account`, default SERVICE_ACCOUNT), read in this
    process (no child: see the module's docstring); CredentialsError with one line
    naming the account and what is wrong."""
    env = os.environ if environ is None else environ
    try:
        return _read_in_cluster(env, SERVICE_ACCOUNT if account is None else account)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise CredentialsError(
            f"cannot load Kubernetes credentials from {IN_CLUSTER}: {cause}"
        ) from exc


# --------------------------------------------------------------------------- the child


def _read_text(path: Any) -> str | None:
    """A PEM file the loader named (its own temporary copy of *-data fields, or the
    user's file), as text; None when the loader named none."""
    if not path:
        return None
    return Path(str(path)).read_text()


def _jwt_expiry(authorization: str | None) -> float | None:
    """The `exp` claim of a bearer JWT (how an OIDC id-token says when it expires)."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    parts = authorization.split(" ", 1)[1].split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, (int, float)) else None


async def _load(path: str, context: str | None) -> Credentials:
    """Credentials through the official kubeconfig loader, into a Configuration we read."""
    from kubernetes.aio import client as _kclient
    from kubernetes.aio.config import kube_config as _kube_config

    # The client is only partly typed; keep its surface Any here.
    kclient: Any = _kclient
    kube_config: Any = _kube_config
    # type.__call__ avoids Configuration's copy-the-process-default behaviour.
    configuration = type.__call__(kclient.Configuration)
    expires = None
    loader = await kube_config.load_kube_config(
        config_file=path,
        context=context,
        client_configuration=configuration,
        persist_config=False,
    )
    expiry = getattr(loader, "exec_plugin_expiry", None)
    if expiry is not None:
        expires = expiry.timestamp()
    elif loader.provider == kube_config.PROVIDER_TYPE_OIDC:
        expires = _jwt_expiry(configuration.api_key.get("BearerToken"))
    chosen = loader.current_context.get("context") or {}
    namespace = chosen.get("namespace") if isinstance(chosen, dict) else None
    return Credentials(
        source=f"kubeconfig {path}",
        server=str(configuration.host),
        authorization=configuration.api_key.get("BearerToken"),
        expires=expires,
        ca_data=_read_text(configuration.ssl_ca_cert),
        cert_data=_read_text(configuration.cert_file),
        key_data=_read_text(configuration.key_file),
        verify=bool(configuration.verify_ssl),
        tls_server_name=configuration.tls_server_name or None,
        proxy=configuration.proxy or None,
        namespace=namespace if isinstance(namespace, str) and namespace else None,
    )


def resolve_here(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str] | None = None
) -> Credentials:
    """The child's work (also callable in a process that has `kubernetes` loaded anyway):
    CredentialsError with one line naming the file or the in-cluster account."""
    env = os.environ if environ is None else environ
    path = resolve_kubeconfig(kubeconfig, env)
    if path is None:
        return in_cluster(env)
    try:
        return asyncio.run(_load(path, context))
    except Exception as exc:  # the client's loader raises anything
        # ConfigException, or (a garbage kubeconfig, an unreadable CA file) a YAMLError,
        # OSError, ValueError, KeyError, TypeError... from inside the client: all one
        # credentials problem, said on one line naming the file.
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise CredentialsError(
            f"cannot load Kubernetes credentials from kubeconfig {path}: {cause}"
        ) from exc


def child_argv(kubeconfig: str | None, context: str | None) -> list[str]:
    """The child's command line: this interpreter, this module."""
    argv = [sys.executable, "-m", __name__]
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    if context:
        argv += ["--context", context]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """The child: one JSON object on stdout, {"error": "..."} and EXIT_CREDENTIALS when
    the credentials are unusable (stdout, so the parent never parses stray stderr)."""
    ap = argparse.ArgumentParser(prog="python -m k8s_watcher.credentials")
    ap.add_argument("--kubeconfig", default=None)
    ap.add_argument("--context", default=None)
    args = ap.parse_args(argv)
    try:
        creds = resolve_here(args.kubeconfig, args.context)
    except CredentialsError as exc:
        print(json.dumps({"error": exc.message}))
        return EXIT_CREDENTIALS
    print(creds.to_json())
    return 0


# --------------------------------------------------------------------------- the daemon


async def resolve(kubeconfig: str | None, context: str | None) -> Credentials:
    """This process's credentials for these flags: the service account read here when
    no kubeconfig is found (in a pod), else the child run on the kubeconfig."""
    path = resolve_kubeconfig(kubeconfig, os.environ)
    if path is None:
        return in_cluster()
    return _static(path, context) or await run_child(path, context)


def _static(path: str, context: str | None) -> Credentials | None:
    """A static kubeconfig read in this process (k8s_watcher.kubeconfig), or None for
    the child. Imported here because that module builds this module's Credentials."""
    from k8s_watcher.kubeconfig import read_static

    return read_static(path, context)


async def run_child(kubeconfig: str | None, context: str | None) -> Credentials:
    """Run the child once; its Credentials, or CredentialsError with its reason."""
    argv = child_argv(kubeconfig, context)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CHILD_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise _too_slow(argv) from None
    return child_answer(argv, proc.returncode, out, err)


def _too_slow(argv: Sequence[str]) -> CredentialsError:
    return CredentialsError(
        f"cannot load Kubernetes credentials: {' '.join(argv[1:])} took over {CHILD_TIMEOUT:g} s"
    )


def child_answer(
    argv: Sequence[str], returncode: int | None, out: bytes, err: bytes
) -> Credentials:
    """What the child's exit status and output say: Credentials, else CredentialsError
    with its one line (its own reason, else the last line of its stderr)."""
    text = out.decode(errors="replace")
    if returncode == 0:
        return Credentials.from_json(text)
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        raise CredentialsError(doc["error"])
    lines = err.decode(errors="replace").strip().splitlines()
    last = lines[-1] if lines else f"exit status {returncode}"
    raise CredentialsError(f"cannot load Kubernetes credentials: {' '.join(argv[1:])}: {last}")


class CredentialSource:
    """The credentials of one (kubeconfig, context), kept fresh; shared by every client
    of the process (see `shared`), so the child runs once at start, not once per client.

    Holds nothing bound to an event loop between calls (the speaker's pre-flight check
    runs on a loop of its own before the daemon's).
    """

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        runner: Callable[[str | None, str | None], Any] = resolve,
        token_reread: float = TOKEN_REREAD,
        expiry_margin: float = EXPIRY_MARGIN,
        rerun_interval: float = RERUN_INTERVAL,
        renew_interval: float = RENEW_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self._runner = runner
        self._token_reread = token_reread
        self._expiry_margin = expiry_margin
        self._rerun_interval = rerun_interval
        self._renew_interval = renew_interval
        self._clock = clock
        self._wall = wall
        self._creds: Credentials | None = None
        self._refused: Credentials | None = None
        self._ran_at = -float("inf")
        self._token_read_at = -float("inf")
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        #: What start_early began: the child and its argv, or a static kubeconfig's
        #: credentials already read (the first `get` takes either).
        self._early: tuple[subprocess.Popen[bytes], list[str]] | Credentials | None = None
        #: How many times credentials were resolved (for tests and the log).
        self.runs = 0

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    def start_early(self) -> None:
        """Start the child now, from synchronous code, so that it runs while the caller
        imports and parses (the speaker's start); the first `get` collects its answer.
        A static kubeconfig is read now instead (the first `get` takes what was read);
        nothing to start in-cluster: the first `get` reads the account directly."""
        if self._creds is None and self._early is None:
            try:
                path = resolve_kubeconfig(self.kubeconfig, os.environ)
            except CredentialsError:
                path = self.kubeconfig  # a named file is missing: the child says so
            if path is None:
                return
            self._early = _static(path, self.context)
            if self._early is not None:
                return
            argv = child_argv(path, self.context)
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            self._early = (proc, argv)
            atexit.register(self._abandon_early)

    def _abandon_early(self) -> None:
        """At exit (the caller stopped before it needed credentials: a bad config), the
        child is not left running behind it."""
        if isinstance(self._early, tuple):
            proc = self._early[0]
            self._early = None
            proc.kill()
            proc.communicate()

    @staticmethod
    async def _collect_early(proc: subprocess.Popen[bytes], argv: list[str]) -> Credentials:
        try:
            out, err = await asyncio.to_thread(proc.communicate, timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise _too_slow(argv) from None
        return child_answer(argv, proc.returncode, out, err)

    async def _run(self) -> Credentials:
        early, self._early = self._early, None
        creds: Credentials
        if isinstance(early, Credentials):
            creds = early
        elif early is not None:
            creds = await self._collect_early(*early)
        else:
            creds = await self._runner(self.kubeconfig, self.context)
        self.runs += 1
        self._ran_at = self._clock()
        self._token_read_at = self._clock()
        self._creds = creds
        log(logger, logging.DEBUG, "k8s.credentials", source=creds.source, runs=self.runs)
        return creds

    async def _rerun_or_keep(self, held: Credentials) -> Credentials:
        """The child again for credentials that worked before; if it fails now (a broken
        plugin), the ones in hand are kept: the API's refusal, retried with back-off like
        any other, says the rest, and the next run waits for the usual interval."""
        try:
            return await self._run()
        except CredentialsError as exc:
            self._ran_at = self._clock()
            log(logger, logging.WARNING, "k8s.credentials_failed", error=exc.message)
            return held

    async def get(self) -> Credentials:
        """The credentials to use now: resolved on first use, the child run again near a
        reported expiry, an in-cluster token re-read from its file when due."""
        creds = self._creds
        if creds is None or (
            creds.needs_rerun(self._wall(), self._expiry_margin)
            and self._clock() - self._ran_at >= self._rerun_interval
        ):
            async with self._loop_lock():
                if self._creds is not creds:
                    creds = self._creds
                elif creds is None:
                    creds = await self._run()
                else:
                    creds = await self._rerun_or_keep(creds)
        assert creds is not None
        if creds.token_file and self._clock() - self._token_read_at >= self._token_reread:
            creds = self._reread_token(creds)
        return creds

    def _reread_token(self, creds: Credentials) -> Credentials:
        """The in-cluster token file again (the kubelet rotates it); on a read error the
        token in hand is kept, as the official client does between its reads."""
        self._token_read_at = self._clock()
        assert creds.token_file is not None
        try:
            token = Path(creds.token_file).read_text().strip()
        except OSError:
            return creds
        if token and f"Bearer {token}" != creds.authorization:
            creds = replace(creds, authorization=f"Bearer {token}")
            self._creds = creds
        return creds

    async def renew(self, failed: Credentials) -> Credentials | None:
        """After a 401 with `failed`: fresh credentials to retry with once, or None when
        they are the same (the refusal stands). Concurrent 401s share one child run, and
        credentials the child gave again after a 401 run it again only `renew_interval`
        later."""
        async with self._loop_lock():
            if self._creds is not None and self._creds is not failed:
                fresh = self._creds
            elif failed.token_file:
                fresh = self._reread_token(failed)
            elif failed is self._refused and self._clock() - self._ran_at < self._renew_interval:
                fresh = failed
            else:
                fresh = await self._rerun_or_keep(failed)
        # A new expiry alone is no new access: the request would be refused again.
        if replace(fresh, expires=failed.expires) == failed:
            self._refused = fresh
            return None
        return fresh


_shared: dict[tuple[str | None, str | None], CredentialSource] = {}


def shared(kubeconfig: str | None, context: str | None = None) -> CredentialSource:
    """The process's one CredentialSource for these flags (the speaker's pre-flight check,
    its informers, its controller and its Event recorder all use the same)."""
    key = (kubeconfig, context)
    source = _shared.get(key)
    if source is None:
        source = _shared[key] = CredentialSource(kubeconfig, context)
    return source


if __name__ == "__main__":
    sys.exit(main())
