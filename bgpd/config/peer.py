"""BGPPeer (metallb.io/v1beta2 and v1beta1): ASNs, addresses, timers, passwords."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Final

from bgpd.config.fields import (
    METALLB_V1BETA1,
    METALLB_V1BETA2,
    NO_CONTROL,
    NO_DEFAULT,
    REQUIREMENT_FIELDS,
    SELECTOR_FIELDS,
    Api,
    Column,
    Field,
    KindTable,
    bounds,
    definition,
    field,
    names,
)
from bgpd.config.issues import MISSING, Doc
from bgpd.config.parsed import Parsed
from bgpd.config.values import (
    DNS_LABEL_RE,
    dns_subdomain_error,
    join_path,
    read_bool,
    read_fields,
    read_int,
    read_ip,
    read_secret,
    read_selectors,
    read_text,
    read_whole_seconds,
    show,
)
from bgpd.model import (
    BGPPeer,
    PeerName,
    SecretRef,
)

#: MetalLB's BGPPeer dynamicASN values (api/v1beta2): the peer's ASN equals myASN, or
#: differs from it.
DYNAMIC_ASN_INTERNAL: Final = "internal"
DYNAMIC_ASN_EXTERNAL: Final = "external"
#: BGPPeer.peer_asn of a dynamicASN external peer: learnt from the router's OPEN.
DYNAMIC_ASN_EXTERNAL_PEER_ASN: Final = 0

#: A Linux interface name (IFNAMSIZ - 1 bytes) as ExaBGP's tokeniser can carry it: no
#: space, quote, ';', '{', '}' or '/' (the kernel refuses '/', ':' and whitespace too).
VRF_NAME_MAX = 15
VRF_NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
_VRF_NAME_RE: Final = re.compile(VRF_NAME_PATTERN)

#: Linux TCP_MD5SIG_MAXKEYLEN; ExaBGP enforces the same limit.
MAX_MD5_PASSWORD = 80


#: RFC 4271 4.2: the hold time is a 16-bit number of seconds; keepalive and MetalLB's
#: connectTime share the bound.
HOLD_TIME_MAX: Final = 65535

_PEER_FIELDS: Final = (
    Field("myASN", ref="asn", required=True, api=Api(required=True)),
    Field("peerASN", ref="asn", description="Required unless dynamicASN is internal."),
    Field("peerAddress", ref="ip", required=True),
    Field("peerPort", ref="port", default=179, api=Api(minimum=1, maximum=16384, default=179)),
    Field("sourceAddress", ref="ip"),
    Field("routerID", type="string", format="ipv4"),
    Field("holdTime", ref="duration", default="90s", max_seconds=HOLD_TIME_MAX),
    Field(
        "keepaliveTime",
        ref="duration",
        max_seconds=HOLD_TIME_MAX,
        description="Accepted; ExaBGP sends keepalives every holdTime/3 whatever the value "
        "(a warning names that interval when it differs).",
    ),
    Field("password", type="string", max_length=MAX_MD5_PASSWORD, pattern=NO_CONTROL),
    Field(
        "passwordFile",
        type="string",
        pattern="^/" + NO_CONTROL[1:],
        description="kube-bgpd extension: an absolute path to a file holding the TCP MD5 key.",
    ),
    Field("ebgpMultiHop", type="boolean", default=False),
    Field("nodeSelectors", ref="labelSelectors"),
    Field(
        "bfdProfile",
        type="string",
        description="The BFDProfile of this peer's BFD session (run by bfdd beside ExaBGP).",
    ),
)
#: Fields metallb.io/v1beta2 added to BGPPeer.
_PEER_V1BETA2_ONLY: Final = (
    Field(
        "connectTime",
        ref="duration",
        max_seconds=HOLD_TIME_MAX,
        description="1s-65535s, accepted with a warning: ExaBGP's connect retry is fixed "
        "(it backs off up to 60 s).",
        api=Api(
            rules=(
                (
                    "duration(self).getSeconds() >= 1 && duration(self).getSeconds() <= 65535",
                    "connect time should be between 1 seconds to 65535",
                ),
                (
                    "duration(self).getMilliseconds() % 1000 == 0",
                    "connect time should contain a whole number of seconds",
                ),
            )
        ),
    ),
    Field(
        "passwordSecret",
        type="object",
        fields=(Field("name", ref="name", required=True), Field("namespace", ref="namespace")),
        api=Api(map_type="atomic"),
    ),
    Field(
        "enableGracefulRestart",
        type="boolean",
        default=False,
        api=Api(
            rules=(("self == oldSelf", "EnableGracefulRestart cannot be changed after creation"),)
        ),
    ),
    Field(
        "dynamicASN",
        type="string",
        enum=(DYNAMIC_ASN_INTERNAL, DYNAMIC_ASN_EXTERNAL),
        description="Set instead of peerASN: internal, the peer's ASN is myASN; external, "
        "the router's ASN is learnt from its OPEN message.",
        api=Api(enum=(DYNAMIC_ASN_INTERNAL, DYNAMIC_ASN_EXTERNAL)),
    ),
    Field(
        "vrf",
        type="string",
        max_length=VRF_NAME_MAX,
        pattern=VRF_NAME_PATTERN,
        description="The Linux VRF device the session runs in: ExaBGP binds its socket to it "
        "(SO_BINDTODEVICE, which needs CAP_NET_RAW) and the local address is the one the "
        "kernel picks in that VRF.",
    ),
)
#: MetalLB's v1beta2 fields the loader refuses (_PEER_UNSUPPORTED says why).
_PEER_API_ONLY: Final = (
    Field("disableMP", type="boolean", api=Api(default=False)),
    Field("dualStackAddressFamily", type="boolean", api=Api(default=False)),
    Field("interface", type="string"),
    Field("localASN", type="integer", api=Api(format="int64", minimum=1, maximum=4294967295)),
)
#: What `kubectl get bgppeers` shows (MetalLB's columns).
_PEER_COLUMNS: Final = (
    Column("Address", ".spec.peerAddress", "string"),
    Column("ASN", ".spec.peerASN", "string"),
    Column("BFD Profile", ".spec.bfdProfile", "string"),
    Column("Multi Hops", ".spec.ebgpMultiHop", "string"),
)
PEER_V1BETA2: Final = KindTable(
    kind="BGPPeer",
    api_version=METALLB_V1BETA2,
    definition="BGPPeerV1beta2",
    description="MetalLB BGPPeer (current version).",
    spec_required=True,
    spec=_PEER_FIELDS + _PEER_V1BETA2_ONLY,
    api_only=_PEER_API_ONLY,
    columns=_PEER_COLUMNS,
)
#: v1beta1's own label selector type (MetalLB's NodeSelector): the same keys as a
#: LabelSelector (the loader reads both alike), but MetalLB's CRD requires `values`.
_V1BETA1_SELECTOR: Final = replace(
    definition("labelSelector"),
    name="",
    api=None,
    fields=(
        field(SELECTOR_FIELDS, "matchLabels"),
        replace(
            field(SELECTOR_FIELDS, "matchExpressions"),
            api=None,
            items=Field(
                type="object",
                fields=tuple(
                    replace(f, api=Api(required=True, min_items=1 if f.name == "values" else None))
                    for f in REQUIREMENT_FIELDS
                ),
            ),
        ),
    ),
)
#: What MetalLB's v1beta1 CRD states otherwise than v1beta2's (bgpd.config.crds).
_V1BETA1_API: Final = {
    "peerASN": Api(required=True),
    "peerAddress": Api(required=True),
    "peerPort": Api(minimum=0, maximum=16384),
}


def _v1beta1(f: Field) -> Field:
    """A v1beta2 field as MetalLB's v1beta1 CRD states it (the loader reads both alike)."""
    if f.name == "nodeSelectors":
        return replace(f, ref=None, type="array", nullable=True, items=_V1BETA1_SELECTOR)
    return replace(f, api=_V1BETA1_API.get(f.name, f.api))


#: The older metallb.io/v1beta1 BGPPeer has a subset of the fields (same meaning).
PEER_V1BETA1: Final = KindTable(
    kind="BGPPeer",
    api_version=METALLB_V1BETA1,
    definition="BGPPeerV1beta1",
    description="MetalLB BGPPeer (older version; same meaning).",
    spec_required=True,
    spec=tuple(_v1beta1(f) for f in _PEER_FIELDS),
    columns=_PEER_COLUMNS,
    deprecation="v1beta1 is deprecated, please use v1beta2",
)
_PEER_UNSUPPORTED: Final = {
    "localASN": "every BGPPeer has its own myASN, which is the session's local AS; set myASN "
    "to this value",
    "interface": "ExaBGP has no BGP unnumbered (it cannot learn the router's link-local "
    "address from an interface); set peerAddress to an address of the router",
    "disableMP": "kube-bgpd always runs one session per address family",
    "dualStackAddressFamily": "kube-bgpd runs one session per address family; add a BGPPeer "
    "for the other family",
}


#: MetalLB's CRD defaults (the API server stores them on every v1beta2 BGPPeer).
_API_DEFAULTS: Final = {
    f.name: f.api.default
    for f in _PEER_API_ONLY
    if f.api is not None and f.api.default is not NO_DEFAULT
}


def _without_api_defaults(spec: object) -> object:
    """The spec without refused fields that hold their CRD default: disableMP and
    dualStackAddressFamily false mean what kube-bgpd does, and the API server writes them
    on every BGPPeer, so only another value is refused."""
    if not isinstance(spec, Mapping):
        return spec
    return {
        k: v
        for k, v in spec.items()
        if not (k in _API_DEFAULTS and type(v) is type(_API_DEFAULTS[k]) and v == _API_DEFAULTS[k])
    }


def parse_peer(doc: Doc, spec: object, name: str, version: str, out: Parsed) -> BGPPeer | None:
    table = PEER_V1BETA2 if version == METALLB_V1BETA2 else PEER_V1BETA1
    f = read_fields(doc, "spec", _without_api_defaults(spec), names(table.spec), _PEER_UNSUPPORTED)
    if f is None:
        return None
    before = doc.errors

    def required(key: str) -> object:
        v = f.get(key, MISSING)
        if v is MISSING or v is None:
            doc.error(f"spec.{key}", "is required")
            return MISSING
        return v

    # RFC 6793 four-octet ASNs; MetalLB: "missing local ASN" for 0.
    my_asn = peer_asn = None
    if (v := required("myASN")) is not MISSING:
        if v == 0 and not isinstance(v, bool):
            doc.error("spec.myASN", "must not be 0 (missing local ASN)")
        else:
            my_asn = read_int(doc, "spec.myASN", v, *bounds(definition("asn")))
    dynamic = f.get("dynamicASN")
    if dynamic is None:
        if (v := required("peerASN")) is not MISSING:
            if v == 0 and not isinstance(v, bool):
                doc.error("spec.peerASN", "must not be 0 (missing peer ASN)")
            else:
                peer_asn = read_int(doc, "spec.peerASN", v, *bounds(definition("asn")))
    else:
        peer_asn = _dynamic_asn(doc, dynamic, f.get("peerASN"), my_asn)
        dynamic = dynamic if peer_asn is not None else None
    peer_address = None
    if (v := required("peerAddress")) is not MISSING:
        peer_address = read_ip(doc, "spec.peerAddress", v)
    port = 179
    if "peerPort" in f and f["peerPort"] is not None:
        port = read_int(doc, "spec.peerPort", f["peerPort"], *bounds(definition("port"))) or 179
    source = None
    if "sourceAddress" in f and f["sourceAddress"] not in (None, ""):
        source = read_ip(doc, "spec.sourceAddress", f["sourceAddress"])
        if (
            source is not None
            and peer_address is not None
            and source.version != peer_address.version
        ):
            doc.error(
                "spec.sourceAddress",
                f"{source} is IPv{source.version} but peerAddress {peer_address} is "
                f"IPv{peer_address.version}",
            )
    router_id = None
    if "routerID" in f and f["routerID"] not in (None, ""):
        rid = read_ip(doc, "spec.routerID", f["routerID"])
        if isinstance(rid, ipaddress.IPv6Address):
            doc.error(
                "spec.routerID", f"{rid}: must be an IPv4 address (a BGP identifier is 32 bits)"
            )
        elif rid is not None:
            router_id = rid

    hold_time, keepalive = _timers(doc, f)

    connect_time = None
    if "connectTime" in f and f["connectTime"] is not None:
        connect_time = _connect_time(doc, f["connectTime"])

    password = None
    if "password" in f and f["password"] not in (None, ""):
        password = _password(doc, "spec.password", f["password"])
    secret = None
    if "passwordSecret" in f and f["passwordSecret"] is not None:
        secret = _secret_ref(doc, "spec.passwordSecret", f["passwordSecret"])
    password_file = None
    if "passwordFile" in f and f["passwordFile"] not in (None, ""):
        pf = read_text(doc, "spec.passwordFile", f["passwordFile"])
        if pf is not None and not os.path.isabs(pf):
            doc.error("spec.passwordFile", f"{pf!r} must be an absolute path")
        elif pf is not None:
            password_file = Path(pf)
    given = [
        k
        for k, v in (
            ("password", password),
            ("passwordSecret", secret),
            ("passwordFile", password_file),
        )
        if v is not None
    ]
    if len(given) > 1:
        # MetalLB: "can not have both password and secret ref set"; passwordFile likewise.
        doc.error("spec", f"{' and '.join(given)} are mutually exclusive: set one")

    multihop = False
    if "ebgpMultiHop" in f:
        multihop = read_bool(doc, "spec.ebgpMultiHop", f["ebgpMultiHop"]) is True
        if multihop and my_asn is not None and my_asn == peer_asn:
            # MetalLB: "invalid ebgp-multihop parameter set for an ibgp peer".
            doc.error("spec.ebgpMultiHop", "must not be set for an iBGP peer (myASN == peerASN)")
    graceful = False
    if "enableGracefulRestart" in f:
        graceful = read_bool(doc, "spec.enableGracefulRestart", f["enableGracefulRestart"]) is True
    node_selectors = read_selectors(doc, "spec.nodeSelectors", f.get("nodeSelectors"))

    bfd = None
    if "bfdProfile" in f and f["bfdProfile"] not in (None, ""):
        bfd = read_text(doc, "spec.bfdProfile", f["bfdProfile"])
        if bfd is not None:
            out.bfd_references.append((bfd, doc))

    vrf = None
    if "vrf" in f and f["vrf"] not in (None, ""):
        vrf = _vrf(doc, f["vrf"])
    if bfd is not None and vrf is not None:
        # bfdd runs without zebra, which is where it would learn the VRF's devices.
        doc.error("spec.bfdProfile", "not supported together with vrf (bfdd runs without zebra)")

    if doc.errors != before or my_asn is None or peer_asn is None or peer_address is None:
        return None
    return BGPPeer(
        name=PeerName(name),
        my_asn=my_asn,
        peer_asn=peer_asn,
        peer_address=peer_address,
        peer_port=port,
        source_address=source,
        router_id=router_id,
        hold_time=hold_time,
        keepalive_time=keepalive,
        connect_time=connect_time,
        password=password,
        password_secret=secret,
        password_file=password_file,
        ebgp_multihop=multihop,
        enable_graceful_restart=graceful,
        node_selectors=node_selectors or (),
        bfd_profile=bfd,
        vrf=vrf,
        dynamic_asn=dynamic if isinstance(dynamic, str) else None,
    )


def _timers(doc: Doc, f: Mapping[str, object]) -> tuple[int, int | None]:
    """holdTime and keepaliveTime with MetalLB's rules (parseTimers): either one implies the
    other (hold = 3 x keepalive), hold must be 0 or >= 3 s (RFC 4271 4.2), keepalive must
    not exceed hold. ExaBGP always sends keepalives every hold/3; another keepalive is
    accepted with a warning (keepalive_note), since keepalives more often than asked never
    break a session and fewer (0: none) are not what the hold time needs anyway."""
    hold: int | None = None
    ka: int | None = None
    if f.get("holdTime") is not None:
        hold = read_whole_seconds(doc, "spec.holdTime", f["holdTime"], maximum=HOLD_TIME_MAX)
        if hold is None:
            return 90, None
        if 0 < hold < 3:
            doc.error("spec.holdTime", f"{show(f['holdTime'])} is invalid: must be 0 or >= 3s")
            return 90, None
        if hold > 65535:
            doc.error("spec.holdTime", f"{show(f['holdTime'])} is out of range (0-65535s)")
            return 90, None
    if f.get("keepaliveTime") is not None:
        ka = read_whole_seconds(
            doc, "spec.keepaliveTime", f["keepaliveTime"], maximum=HOLD_TIME_MAX
        )
        if ka is None:
            return hold if hold is not None else 90, None
    if hold is None and ka is None:
        return 90, None
    if hold is None:
        assert ka is not None
        hold = ka * 3
        if 0 < hold < 3 or hold > 65535:
            doc.error(
                "spec.keepaliveTime", f"{ka}s gives a hold time of {hold}s: must be 0 or 3-65535s"
            )
        return hold, ka
    if ka is None:
        return hold, None
    if ka > hold:
        # MetalLB: "invalid keepaliveTime, must be lower than holdTime".
        doc.error("spec.keepaliveTime", f"{ka}s must not be greater than holdTime ({hold}s)")
    elif (note := keepalive_note(hold, ka)) is not None:
        doc.warn("spec.keepaliveTime", note)
    return hold, ka


def keepalive_note(hold_time: int, keepalive_time: int | None) -> str | None:
    """What ExaBGP does instead of keepaliveTime, or None when it does just that.

    ExaBGP 5.0 has no keepalive setting: it sends one every holdTime/3 (RFC 4271 4.4's
    suggestion) and none when the hold time is 0. The loader warns with this text and the
    renderer repeats it in the speaker's log, so both say the same thing."""
    if keepalive_time is None or not hold_time or keepalive_time == hold_time // 3:
        return None
    return (
        f"{keepalive_time}s is not what ExaBGP does: it sends keepalives every holdTime/3 "
        f"({hold_time // 3}s), which is the interval in force"
    )


#: MetalLB's CRD bounds for connectTime (api/v1beta2 XValidation).
_CONNECT_TIME_RANGE: Final = (1, 65535)


def _connect_time(doc: Doc, value: object) -> int | None:
    """connectTime as MetalLB's CRD validates it, accepted with what happens instead:
    ExaBGP 5.0 has no connect-retry setting (its retry backs off 0, 1, 2, ... up to 60 s)."""
    seconds = read_whole_seconds(doc, "spec.connectTime", value, maximum=HOLD_TIME_MAX)
    if seconds is None:
        return None
    low, high = _CONNECT_TIME_RANGE
    if not low <= seconds <= high:
        doc.error("spec.connectTime", f"{show(value)} is out of range ({low}-{high}s)")
        return None
    doc.warn(
        "spec.connectTime",
        f"{seconds}s is not used: ExaBGP retries a down session after 0, 1, 2, ... up to 60 s "
        "(its fixed back-off); SpeakerConfig spec.listen: true lets the router reconnect at once",
    )
    return seconds


def _dynamic_asn(doc: Doc, mode: object, peer_asn: object, my_asn: int | None) -> int | None:
    """MetalLB's dynamicASN: the peer's ASN without peerASN (mutually exclusive with it).

    `internal` is exact: the peer's ASN must be myASN, so the session is rendered with
    peer-as = myASN and ExaBGP refuses an OPEN with another ASN, as MetalLB denies it.
    `external` is rendered `peer-as auto`: ExaBGP takes the ASN of the router's OPEN and
    builds eBGP attributes from it (negotiated.peer_as). Its peer_asn is 0 (see
    BGPPeer.dynamic_asn). ExaBGP 5.0.15 then writes that session's JSON events with
    `"peer": None`, which the driver repairs before parsing (bgpd.exabgp.driver)."""
    if peer_asn not in (None, 0):
        doc.error("spec", "peerASN and dynamicASN are mutually exclusive: set one")
        return None
    if mode == DYNAMIC_ASN_INTERNAL:
        return my_asn
    if mode == DYNAMIC_ASN_EXTERNAL:
        return DYNAMIC_ASN_EXTERNAL_PEER_ASN
    doc.error(
        "spec.dynamicASN",
        f"{show(mode)} must be {DYNAMIC_ASN_INTERNAL} or {DYNAMIC_ASN_EXTERNAL}",
    )
    return None


def _password(doc: Doc, path: str, value: object) -> str | None:
    """A TCP MD5 key (RFC 2385). The ExaBGP renderer writes it base64-encoded, so quotes and
    backslashes are safe; control characters are still refused like any command text,
    by read_secret, which never echoes the value."""
    text = read_secret(doc, path, value)
    if text is None:
        return None
    if len(text.encode()) > MAX_MD5_PASSWORD:
        doc.error(path, f"must be at most {MAX_MD5_PASSWORD} bytes (the TCP MD5 key limit)")
        return None
    return text


def _secret_ref(doc: Doc, path: str, value: object) -> SecretRef | None:
    f = read_fields(
        doc, path, value, names(field(_PEER_V1BETA2_ONLY, "passwordSecret").fields or ())
    )
    if f is None:
        return None
    name = f.get("name")
    if name in (None, ""):
        doc.error(join_path(path, "name"), "is required")
        return None
    text = read_text(doc, join_path(path, "name"), name)
    if text is not None and (why := dns_subdomain_error(text)) is not None:
        doc.error(join_path(path, "name"), why)
        return None
    namespace: str | None = None
    if f.get("namespace") not in (None, ""):
        ns = f["namespace"]
        if not isinstance(ns, str) or not DNS_LABEL_RE.fullmatch(ns) or len(ns) > 63:
            doc.error(join_path(path, "namespace"), f"{show(ns)} is not a valid namespace name")
            return None
        namespace = ns
    return None if text is None else SecretRef(name=text, namespace=namespace)


def _vrf(doc: Doc, value: object) -> str | None:
    """A VRF device name: a Linux interface name (at most 15 bytes) that ExaBGP's
    ``source-interface`` can carry. Whether the device exists is the node's business: the
    speaker logs it and ExaBGP retries, as for a peer that cannot be reached."""
    text = read_text(doc, "spec.vrf", value)
    if text is None:
        return None
    if len(text) > VRF_NAME_MAX or not _VRF_NAME_RE.fullmatch(text) or text in (".", ".."):
        doc.error(
            "spec.vrf",
            f"{show(text)} is not a VRF device name (1-{VRF_NAME_MAX} of A-Z a-z 0-9 _ . -)",
        )
        return None
    return text
