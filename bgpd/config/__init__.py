"""Load MetalLB-style YAML documents into the frozen `bgpd.model.Config`.

Why this package exists: operators already have MetalLB files (IPAddressPool, BGPPeer,
BGPAdvertisement, Community, BFDProfile); they must load unchanged, and anything that would
not behave as MetalLB documents it must be refused loudly, before a single route goes out.
So the loader

* reads every document, collects *every* problem with its place (file, document, kind,
  metadata.name, field path) instead of stopping at the first one;
* rejects unknown kinds and unknown fields, and says "not supported" for MetalLB fields
  kube-bgpd parses but cannot honour (BFD echo mode, no configurable connect retry, ...)
  rather than silently ignoring them;
* rejects any text that can reach an ExaBGP command line or config file if it holds a
  newline or a control character (one newline would turn one command into two);
* cross-checks the objects (unknown pools and peers, overlapping pools, aggregation
  shorter than a pool, conflicting local-pref) with MetalLB's rules, which are cited where
  they are applied.

Rooms: `fields` (the one field table per kind, from which `schema` generates
config/schema.json), one module per kind (`pool`, `peer`, `advertisement`, `community`,
`bfd`, `speaker_config`), `values` (shared value readers), `documents` (kind dispatch and
`parse_documents`), `checks` (cross-object checks), `loader` (YAML with positions, files).

It must stay pure apart from reading the files it is given: no logging, no network, no
Kubernetes client, no clock. `parse_documents` takes already-parsed YAML and does no I/O at
all, so it is what the tests and the Hypothesis property drive.
"""

from bgpd.config.documents import SPEC_FIELDS, parse_documents
from bgpd.config.issues import ConfigError, ConfigIssue, LoadResult
from bgpd.config.loader import load_config, load_config_or_raise, parse_text
from bgpd.config.values import parse_duration

__all__ = [
    "SPEC_FIELDS",
    "ConfigError",
    "ConfigIssue",
    "LoadResult",
    "load_config",
    "load_config_or_raise",
    "parse_documents",
    "parse_duration",
    "parse_text",
]
