"""A kubeconfig without plugins, read in this process exactly as the official loader reads it.

Resolving a kubeconfig through the official client costs a child process that imports the
`kubernetes` package (k8s_watcher.credentials): about a second of CPU at every start of a
speaker, a controller or the CLI, and several seconds on a loaded node. Most kubeconfigs
on the nodes kube-bgpd runs on are static: a server, a CA, and a token, a token file or a
client certificate. For those the loader's work is a YAML read and a few file reads, done
here by `read_static` with the loader's own rules (kubernetes/aio/config/kube_config.py of
the pinned client: which of ``token`` and ``tokenFile`` wins, ``*-data`` over files,
relative paths against the kubeconfig's directory, the CA and client certificate read only
for an https server (where the loader also needs a user), ``insecure-skip-tls-verify``
taken as its truth value, a user the context names but the file lacks meaning no
credentials).

Anything else gets None, and the caller runs the official loader in its child: an exec
or auth-provider user (tokens with expiry, refreshed by the child), a KUBECONFIG list of
several files (the loader's merge), a missing key, a file that cannot be read or a value
of an unexpected type. So every error message stays the official loader's, and this
module never decides anything the loader would decide differently:
tests/unit/test_kubeconfig_static.py holds the two equal over a table of kubeconfigs.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from k8s_watcher.credentials import Credentials

#: User keys only the official loader's plugins handle (tokens that expire and refresh).
PLUGIN_KEYS = ("exec", "auth-provider")


class _NotStatic(Exception):
    """The kubeconfig needs the official loader (or would make it raise)."""


def _named(items: Any, name: Any) -> Mapping[str, Any] | None:
    """The one entry of a clusters/contexts/users list with this name, as the loader's
    get_with_name finds it; None when there is none; _NotStatic for a malformed list or a
    duplicate name (the loader raises for both)."""
    if not isinstance(items, list):
        raise _NotStatic
    found = None
    for item in items:
        if not isinstance(item, dict) or "name" not in item:
            raise _NotStatic
        if item["name"] == name:
            if found is not None:
                raise _NotStatic
            found = item
    return found


def _section(entry: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    """entry[key] as a non-empty mapping (the loader's ConfigNode raises otherwise)."""
    value = entry.get(key) if entry is not None else None
    if not isinstance(value, dict) or not value:
        raise _NotStatic
    return value


def _file_text(base: Path, name: Any) -> str:
    """A file a kubeconfig names, relative to its directory as the loader joins it;
    _NotStatic when it is not a readable file (the loader raises then)."""
    if not isinstance(name, str):
        raise _NotStatic
    path = Path(os.path.normpath(os.path.join(base, name)))
    if not path.is_file():
        raise _NotStatic
    return path.read_text()


def _file_or_data(obj: Mapping[str, Any], file_key: str, base: Path) -> str | None:
    """The loader's FileOrData(...).as_file() read back as text: ``<key>-data`` (base64)
    when present and non-empty, else the file (relative to `base`); None for neither."""
    data_key = f"{file_key}-data"
    if data_key in obj:
        data = obj[data_key]
        if not data:
            return None
        if not isinstance(data, str):
            raise _NotStatic
        try:
            return base64.standard_b64decode(data.encode()).decode()
        except (binascii.Error, ValueError) as exc:
            raise _NotStatic from exc
    if file_key in obj:
        return _file_text(base, obj[file_key])
    return None


def _authorization(user: Mapping[str, Any] | None, base: Path) -> str | None:
    """The Authorization header the loader sets: a token (``token`` before
    ``tokenFile``), else basic auth from username and password, else none."""
    if user is None:
        return None
    if "token" in user:
        token = user["token"]
    elif "tokenFile" in user:
        token = _file_text(base, user["tokenFile"])
    else:
        token = None
    if token:
        if not isinstance(token, str):
            raise _NotStatic
        return f"Bearer {token}"
    if "username" in user and "password" in user:
        username, password = user["username"], user["password"]
        if not isinstance(username, str) or not isinstance(password, str):
            raise _NotStatic
        return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
    return None


def _read(path: str, context: str | None) -> Credentials:
    kubeconfig = Path(os.path.expanduser(path))
    with open(kubeconfig) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict):
        raise _NotStatic
    name = context if context is not None else doc.get("current-context")
    if not name:
        raise _NotStatic
    chosen = _section(_named(doc.get("contexts") or [], name), "context")
    user_name, cluster_name = chosen.get("user"), chosen.get("cluster")
    if not isinstance(user_name, str | None) or not isinstance(cluster_name, str):
        raise _NotStatic
    user: Mapping[str, Any] | None = None
    if user_name and doc.get("users"):
        entry = _named(doc["users"], user_name)
        if entry is not None:
            user = entry.get("user")
            if not isinstance(user, dict):
                raise _NotStatic  # the loader fails on a user entry without a mapping
    if user is not None and any(key in user for key in PLUGIN_KEYS):
        raise _NotStatic
    cluster = _section(_named(doc.get("clusters") or [], cluster_name), "cluster")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise _NotStatic
    base = kubeconfig.absolute().parent
    host = server.rstrip("/")
    ca = cert = key = None
    if host.startswith("https"):
        if user is None:
            raise _NotStatic  # the loader fails looking for a client certificate in it
        ca = _file_or_data(cluster, "certificate-authority", base)
        cert = _file_or_data(user, "client-certificate", base)
        key = _file_or_data(user, "client-key", base)
    # The loader reads these three only when present, and fails on an explicit null.
    optional = ("insecure-skip-tls-verify", "tls-server-name", "proxy-url")
    if any(k in cluster and cluster[k] is None for k in optional):
        raise _NotStatic
    tls_server_name = cluster.get("tls-server-name")
    proxy = cluster.get("proxy-url")
    if not isinstance(tls_server_name, str | None) or not isinstance(proxy, str | None):
        raise _NotStatic
    namespace = chosen.get("namespace")
    return Credentials(
        source=f"kubeconfig {path}",
        server=host,
        authorization=_authorization(user, base),
        ca_data=ca,
        cert_data=cert,
        key_data=key,
        verify=not cluster["insecure-skip-tls-verify"]
        if "insecure-skip-tls-verify" in cluster
        else True,
        tls_server_name=tls_server_name or None,
        proxy=proxy or None,
        namespace=namespace if isinstance(namespace, str) and namespace else None,
    )


def read_static(path: str, context: str | None) -> Credentials | None:
    """The credentials of a static kubeconfig (one file, no plugin), read here; None when
    the official loader must read it (see the module's docstring), including every case
    in which the loader would fail, so that its message is the one the user sees."""
    if os.pathsep in path:
        return None
    try:
        return _read(path, context)
    except (_NotStatic, OSError, ValueError, yaml.YAMLError, TypeError, KeyError):
        return None
