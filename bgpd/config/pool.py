"""IPAddressPool: addresses (CIDRs, a-b ranges, single IPs) and serviceAllocation."""

from __future__ import annotations

import ipaddress
from typing import Final

from bgpd.config.fields import METALLB_V1BETA1, Api, Column, Field, KindTable, names
from bgpd.config.issues import MISSING, Doc
from bgpd.config.parsed import Parsed
from bgpd.config.values import (
    DNS_LABEL_RE,
    join_path,
    read_bool,
    read_fields,
    read_int,
    read_selectors,
    read_text,
    read_text_list,
    type_name,
)
from bgpd.model import (
    AddressRange,
    IPAddress,
    IPAddressPool,
    PoolName,
    ServiceAllocation,
    frozen_map,
)

#: serviceAllocation: which Services may take IPs from the pool (MetalLB 0.14).
SERVICE_ALLOCATION_FIELDS: Final = (
    Field("priority", type="integer"),
    Field(
        "namespaces", type="array", nullable=True, unique_items=True, items=Field(ref="namespace")
    ),
    Field("namespaceSelectors", ref="labelSelectors"),
    Field("serviceSelectors", ref="labelSelectors"),
)

POOL: Final = KindTable(
    kind="IPAddressPool",
    api_version=METALLB_V1BETA1,
    definition="IPAddressPool",
    description="MetalLB IPAddressPool.",
    spec_required=True,
    spec=(
        Field(
            "addresses",
            type="array",
            min_items=1,
            items=Field(ref="text"),
            required=True,
            description="CIDRs (10.0.0.0/24), ranges (10.0.0.10-10.0.0.20) or single "
            "addresses, IPv4 or IPv6.",
            api=Api(required=True),
        ),
        Field("autoAssign", type="boolean", default=True, api=Api(default=True)),
        Field("avoidBuggyIPs", type="boolean", default=False, api=Api(default=False)),
        Field("serviceAllocation", type="object", nullable=True, fields=SERVICE_ALLOCATION_FIELDS),
    ),
    spec_api=Api(required=True),
    # MetalLB's controller counts the pool's addresses here; kube-bgpd writes no status.
    status=Field(
        type="object",
        fields=tuple(
            Field(name, type="integer", api=Api(format="int64", required=True))
            for name in ("assignedIPv4", "assignedIPv6", "availableIPv4", "availableIPv6")
        ),
    ),
    columns=(
        Column("Auto Assign", ".spec.autoAssign", "boolean"),
        Column("Avoid Buggy IPs", ".spec.avoidBuggyIPs", "boolean"),
        Column("Addresses", ".spec.addresses", "string"),
    ),
)


def _ip_range(doc: Doc, path: str, value: object) -> AddressRange | None:
    """One IPAddressPool address: a CIDR, an `a-b` range, or (our extension) a single IP."""
    text = read_text(doc, path, value)
    if text is None:
        return None
    t = text.strip()
    if "-" in t:
        # MetalLB's ParseCIDR: split on the first '-', trim both ends.
        first_text, _, last_text = t.partition("-")
        try:
            first = ipaddress.ip_address(first_text.strip())
        except ValueError:
            doc.error(path, f"invalid IP range {text!r}: invalid start IP {first_text.strip()!r}")
            return None
        try:
            last = ipaddress.ip_address(last_text.strip())
        except ValueError:
            doc.error(path, f"invalid IP range {text!r}: invalid end IP {last_text.strip()!r}")
            return None
        if first.version != last.version:
            doc.error(path, f"invalid IP range {text!r}: start and end are of different families")
            return None
        if int(first) > int(last):
            doc.error(
                path, f"invalid IP range {text!r}: start IP {first} is after the end IP {last}"
            )
            return None
        if _zoned(first) or _zoned(last):
            doc.error(path, f"invalid IP range {text!r}: zoned IPv6 addresses are not supported")
            return None
        return AddressRange(first=first, last=last, text=text)
    try:
        if "/" in t:
            net = ipaddress.ip_network(t, strict=False)
            if net.network_address != ipaddress.ip_interface(t).ip:
                # MetalLB (Go's net.ParseCIDR) takes the network and drops host bits.
                doc.warn(path, f"{text!r} has host bits set; the pool is {net}, as in MetalLB")
        else:
            net = ipaddress.ip_network(t)  # a single address: /32 or /128
    except ValueError:
        doc.error(path, f"invalid CIDR {text!r}")
        return None
    if _zoned(net.network_address):
        doc.error(path, f"invalid CIDR {text!r}: zoned IPv6 addresses are not supported")
        return None
    return AddressRange(first=net.network_address, last=net.broadcast_address, text=text)


def _zoned(ip: IPAddress) -> bool:
    return isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None


def parse_pool(doc: Doc, spec: object, name: str, labels: dict[str, str], out: Parsed) -> None:
    f = read_fields(doc, "spec", spec, names(POOL.spec))
    if f is None:
        return
    ranges: list[AddressRange] = []
    addrs = f.get("addresses", MISSING)
    if addrs is MISSING or addrs is None or addrs == []:
        doc.error("spec.addresses", "pool has no addresses (CIDRs or a-b ranges)")
    elif not isinstance(addrs, list):
        doc.error("spec.addresses", f"must be a list, not {type_name(addrs)}")
    else:
        for i, a in enumerate(addrs):
            got = _ip_range(doc, f"spec.addresses[{i}]", a)
            if got is not None:
                ranges.append(got)
    auto_assign = True
    if "autoAssign" in f:
        auto_assign = read_bool(doc, "spec.autoAssign", f["autoAssign"]) is not False
    avoid = False
    if "avoidBuggyIPs" in f:
        avoid = read_bool(doc, "spec.avoidBuggyIPs", f["avoidBuggyIPs"]) is True
    allocation: ServiceAllocation | None = None
    if "serviceAllocation" in f and f["serviceAllocation"] is not None:
        allocation = _service_allocation(doc, "spec.serviceAllocation", f["serviceAllocation"])
    pool = IPAddressPool(
        name=PoolName(name),
        addresses=tuple(ranges),
        auto_assign=auto_assign,
        avoid_buggy_ips=avoid,
        service_allocation=allocation,
        labels=frozen_map(labels),
    )
    # Kept even with field errors (with its good ranges), so overlap checks still run.
    out.pools.append((pool, doc))


def _service_allocation(doc: Doc, path: str, value: object) -> ServiceAllocation | None:
    f = read_fields(doc, path, value, names(SERVICE_ALLOCATION_FIELDS))
    if f is None:
        return None
    priority: int | None = None
    if "priority" in f and f["priority"] is not None:
        # A Go int in MetalLB; lower numbers win.
        priority = read_int(doc, join_path(path, "priority"), f["priority"], -(2**31), 2**31 - 1)
    namespaces: list[str] = []
    if "namespaces" in f and f["namespaces"] is not None:
        got = read_text_list(doc, join_path(path, "namespaces"), f["namespaces"])
        for i, ns in enumerate(got or ()):
            if len(ns) > 63 or not DNS_LABEL_RE.fullmatch(ns):
                doc.error(
                    f"{join_path(path, 'namespaces')}[{i}]", f"{ns!r} is not a namespace name"
                )
        namespaces = got or []
    ns_sel = read_selectors(doc, join_path(path, "namespaceSelectors"), f.get("namespaceSelectors"))
    svc_sel = read_selectors(doc, join_path(path, "serviceSelectors"), f.get("serviceSelectors"))
    return ServiceAllocation(
        priority=priority,
        namespaces=tuple(namespaces),
        namespace_selectors=ns_sel or (),
        service_selectors=svc_sel or (),
    )
