"""aiohttp as the product imports it: once, here, without three import-time costs it
never uses (issue 18: the daemon's memory and start on every node).

Every product module takes aiohttp's names from this module (an import-linter contract
forbids importing aiohttp anywhere else in `bgpd` and `k8s_watcher`), so aiohttp's
first import in a product process is this one, whichever module comes first.

* `aiohttp.connector` builds two default TLS client contexts when it is imported
  (`_SSL_CONTEXT_VERIFIED`, `_SSL_CONTEXT_UNVERIFIED`), each loading the system's CA
  store (`set_default_verify_paths`: about 140 certificates, ~20 ms and ~1 MiB each on
  the benchmark machine). aiohttp uses them only for a TLS request whose `ssl` is left
  at `True`. The product makes none: the API client passes a context of its own for an
  https server (the cluster's CA, or the system store when a kubeconfig names no CA:
  `k8s_watcher.client.ssl_context`) and `system_tls()` for an HTTPS proxy, the
  data-plane probe `system_tls()` for an https node URL. So aiohttp is imported with
  `set_default_verify_paths` doing nothing: its default contexts trust no CA, and a
  request that fell through to them would fail verification (closed, never open).
* `aiohttp.web` builds a `mimetypes.MimeTypes` table at import (for serving files),
  which reads /etc/mime.types (~0.35 MiB, ~2 ms). The product serves no files and
  guesses no types: the table is built from Python's built-in types only. That
  initialises `mimetypes` for the process, so its module functions know those types
  only too.
* frozenlist (the lists behind aiohttp's signals) is imported without its C extension
  (`FROZENLIST_NO_EXTENSIONS`, frozenlist's own switch): that extension is the one part
  of aiohttp and its dependencies built as C++, and loading it maps the C++ runtime
  (libstdc++, ~1 MiB RSS per process) for lists that are read a few times per request.

All three last only for the import: `set_default_verify_paths`, the list of known files
and the environment are restored right after, so a context built later loads the system
store as before and child processes inherit the environment as it was. They are made
only if aiohttp is not imported yet (in a kube-bgpd process: at start, before any
thread). In a process that imported aiohttp before this module (a test, a tool) nothing
is changed and aiohttp's defaults are its own; the product's requests do not depend on
them either way.
"""

from __future__ import annotations

import mimetypes
import os
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

#: The SSLContext method that loads the system's CA store (create_default_context and
#: aiohttp's unverified context both call it).
_LOAD_SYSTEM_STORE = "set_default_verify_paths"
#: frozenlist's switch to its Python implementation.
_PURE_FROZENLIST = "FROZENLIST_NO_EXTENSIONS"


def _trust_nothing(self: ssl.SSLContext) -> None:
    """`set_default_verify_paths` for aiohttp's import: load no CA."""


@contextmanager
def _without_unused_tables() -> Iterator[None]:
    if "aiohttp" in sys.modules:
        # Imported already: nothing to leave out, and no process-wide change to make
        # while other threads may be running.
        yield
        return
    own = ssl.SSLContext.__dict__.get(_LOAD_SYSTEM_STORE)
    known_files = mimetypes.knownfiles
    pure = os.environ.get(_PURE_FROZENLIST)
    setattr(ssl.SSLContext, _LOAD_SYSTEM_STORE, _trust_nothing)
    mimetypes.knownfiles = []
    os.environ[_PURE_FROZENLIST] = "1"
    try:
        yield
    finally:
        if pure is None:
            del os.environ[_PURE_FROZENLIST]
        else:
            os.environ[_PURE_FROZENLIST] = pure
        mimetypes.knownfiles = known_files
        if own is None:
            delattr(ssl.SSLContext, _LOAD_SYSTEM_STORE)
        else:
            setattr(ssl.SSLContext, _LOAD_SYSTEM_STORE, own)


with _without_unused_tables():
    import aiohttp
    from aiohttp import web
    from aiohttp.helpers import get_env_proxy_for_url


@cache
def system_tls() -> ssl.SSLContext:
    """A client context that verifies against the system's CA store (what aiohttp's
    verified default was), for the product's TLS that names no CA of its own. Built on
    first use, so a node that needs none never loads the store."""
    return ssl.create_default_context()


__all__ = ["aiohttp", "get_env_proxy_for_url", "system_tls", "web"]
