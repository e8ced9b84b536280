"""Table-driven tests of the config loader: what MetalLB files turn into, and every error
message with its place."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from configkit import (
    DROP,
    OURS,
    V1B1,
    adv,
    bfd,
    community,
    messages,
    parse,
    peer,
    peer6,
    pool,
    speaker,
)

from bgpd.config import ConfigIssue, parse_duration
from bgpd.model import LogFormat, MQTTConfig, SecretRef, SelectorOperator, SigtermAction

# --------------------------------------------------------------------------- errors

BAD: list[Any] = [
    # ---- BGPPeer numbers and addresses
    pytest.param(
        [peer(myASN=4294967296)],
        ["BGPPeer tor-a: spec.myASN: 4294967296 is out of range (1-4294967295)"],
        id="asn-too-big",
    ),
    pytest.param(
        [peer(myASN=0)],
        ["BGPPeer tor-a: spec.myASN: must not be 0 (missing local ASN)"],
        id="asn-zero",
    ),
    pytest.param(
        [peer(peerASN="64500")],
        ["BGPPeer tor-a: spec.peerASN: must be an integer, not a string"],
        id="asn-string",
    ),
    pytest.param(
        [peer(peerASN=True)],
        ["BGPPeer tor-a: spec.peerASN: must be an integer, not a boolean"],
        id="asn-bool",
    ),
    pytest.param(
        [peer(peerASN=64500.0)],
        ["BGPPeer tor-a: spec.peerASN: must be an integer, not a number"],
        id="asn-float",
    ),
    pytest.param(
        [peer(peerASN=DROP, peerAddress=DROP)],
        [
            "BGPPeer tor-a: spec.peerASN: is required",
            "BGPPeer tor-a: spec.peerAddress: is required",
        ],
        id="peer-required",
    ),
    pytest.param(
        [peer(peerAddress="172.31.250.300")],
        ["BGPPeer tor-a: spec.peerAddress: '172.31.250.300' is not an IP address"],
        id="peer-address-bad",
    ),
    pytest.param(
        [peer(peerAddress="fe80::1%eth0")],
        ["BGPPeer tor-a: spec.peerAddress: 'fe80::1%eth0': zoned IPv6 addresses are not supported"],
        id="peer-address-zone",
    ),
    pytest.param(
        [peer(peerPort=0)],
        ["BGPPeer tor-a: spec.peerPort: 0 is out of range (1-65535)"],
        id="port-zero",
    ),
    pytest.param(
        [peer(peerPort=65536)],
        ["BGPPeer tor-a: spec.peerPort: 65536 is out of range (1-65535)"],
        id="port-too-big",
    ),
    pytest.param(
        [peer(sourceAddress="fd00:99::10")],
        [
            "BGPPeer tor-a: spec.sourceAddress: fd00:99::10 is IPv6 but peerAddress "
            "172.31.250.1 is IPv4"
        ],
        id="source-family",
    ),
    pytest.param(
        [peer(routerID="fd00::1")],
        [
            "BGPPeer tor-a: spec.routerID: fd00::1: must be an IPv4 address "
            "(a BGP identifier is 32 bits)"
        ],
        id="router-id-v6",
    ),
    # ---- timers
    pytest.param(
        [peer(holdTime="2s")],
        ["BGPPeer tor-a: spec.holdTime: '2s' is invalid: must be 0 or >= 3s"],
        id="hold-2s",
    ),
    pytest.param(
        [peer(holdTime="1s")],
        ["BGPPeer tor-a: spec.holdTime: '1s' is invalid: must be 0 or >= 3s"],
        id="hold-1s",
    ),
    pytest.param(
        [peer(holdTime=90)],
        [
            'BGPPeer tor-a: spec.holdTime: must be a duration string like "90s" or '
            '"1m30s", not an integer'
        ],
        id="hold-number",
    ),
    pytest.param(
        [peer(holdTime="90 seconds")],
        ['BGPPeer tor-a: spec.holdTime: \'90 seconds\' is not a duration (like "90s" or "1m30s")'],
        id="hold-not-duration",
    ),
    pytest.param(
        [peer(holdTime="3500ms")],
        [
            "BGPPeer tor-a: spec.holdTime: '3500ms': must be a whole number of seconds "
            "(BGP timers are)"
        ],
        id="hold-fraction",
    ),
    pytest.param(
        [peer(holdTime="-9s")],
        ["BGPPeer tor-a: spec.holdTime: '-9s' is negative"],
        id="hold-negative",
    ),
    pytest.param(
        [peer(holdTime="19h")],
        ["BGPPeer tor-a: spec.holdTime: '19h' is out of range (0-65535s)"],
        id="hold-too-long",
    ),
    pytest.param(
        [peer(holdTime="9s", keepaliveTime="10s")],
        ["BGPPeer tor-a: spec.keepaliveTime: 10s must not be greater than holdTime (9s)"],
        id="keepalive-over-hold",
    ),
    pytest.param(
        [peer(connectTime="0s")],
        ["BGPPeer tor-a: spec.connectTime: '0s' is out of range (1-65535s)"],
        id="connect-time-zero",
    ),
    pytest.param(
        [peer(connectTime="1500ms")],
        [
            "BGPPeer tor-a: spec.connectTime: '1500ms': must be a whole number of seconds "
            "(BGP timers are)"
        ],
        id="connect-time-fraction",
    ),
    # ---- passwords
    pytest.param(
        [peer(password="s3cret", passwordFile="/etc/kube-bgpd/md5")],
        ["BGPPeer tor-a: spec: password and passwordFile are mutually exclusive: set one"],
        id="password-and-file",
    ),
    pytest.param(
        [peer(password="s3cret", passwordSecret={"name": "md5"})],
        ["BGPPeer tor-a: spec: password and passwordSecret are mutually exclusive: set one"],
        id="password-and-secret",
    ),
    pytest.param(
        [peer(password="line1\nline2")],
        [
            "BGPPeer tor-a: spec.password: holds a control character at position 6 (value not "
            "shown: a secret)"
        ],
        id="password-newline",
    ),
    pytest.param(
        [peer(password="x" * 81)],
        ["BGPPeer tor-a: spec.password: must be at most 80 bytes (the TCP MD5 key limit)"],
        id="password-too-long",
    ),
    pytest.param(
        [peer(passwordFile="etc/md5")],
        ["BGPPeer tor-a: spec.passwordFile: 'etc/md5' must be an absolute path"],
        id="password-file-relative",
    ),
    pytest.param(
        [peer(passwordSecret={"namespace": "metallb-system"})],
        ["BGPPeer tor-a: spec.passwordSecret.name: is required"],
        id="password-secret-no-name",
    ),
    # ---- peer options
    pytest.param(
        [peer(peerASN=64512, ebgpMultiHop=True)],
        ["BGPPeer tor-a: spec.ebgpMultiHop: must not be set for an iBGP peer (myASN == peerASN)"],
        id="multihop-ibgp",
    ),
    pytest.param(
        [peer(enableGracefulRestart="yes")],
        ["BGPPeer tor-a: spec.enableGracefulRestart: must be true or false, not a string"],
        id="graceful-restart-string",
    ),
    pytest.param(
        [peer(bfdProfile="fast", vrf="red"), bfd("fast")],
        [
            "BGPPeer tor-a: spec.bfdProfile: not supported together with vrf (bfdd runs "
            "without zebra)"
        ],
        id="bfd-profile-with-vrf",
    ),
    pytest.param(
        [peer(bfdProfile="missing"), bfd("fast"), bfd("slow")],
        ["BGPPeer tor-a: spec.bfdProfile: no BFDProfile named 'missing' (BFDProfiles: fast, slow)"],
        id="bfd-profile-unknown",
    ),
    pytest.param(
        [peer(bfdProfile="missing")],
        ["BGPPeer tor-a: spec.bfdProfile: no BFDProfile named 'missing' (BFDProfiles: none)"],
        id="bfd-profile-none-at-all",
    ),
    pytest.param(
        [bfd(echoMode=True)],
        ["BFDProfile bfd: spec.echoMode: not supported: bfdd runs without zebra, which echo needs"],
        id="bfd-echo-mode",
    ),
    pytest.param(
        [peer(vrf="red", dynamicASN="external", interface="eth0")],
        [
            "BGPPeer tor-a: spec.interface: not supported: ExaBGP has no BGP unnumbered (it "
            "cannot learn the router's link-local address from an interface); set peerAddress "
            "to an address of the router",
            "BGPPeer tor-a: spec: peerASN and dynamicASN are mutually exclusive: set one",
        ],
        id="peer-unsupported-fields",
    ),
    pytest.param(
        [peer(disableMP=True, dualStackAddressFamily=True, localASN=65001)],
        [
            "BGPPeer tor-a: spec.disableMP: not supported: kube-bgpd always runs one session "
            "per address family",
            "BGPPeer tor-a: spec.dualStackAddressFamily: not supported: kube-bgpd runs one "
            "session per address family; add a BGPPeer for the other family",
            "BGPPeer tor-a: spec.localASN: not supported: every BGPPeer has its own myASN, "
            "which is the session's local AS; set myASN to this value",
        ],
        id="peer-unsupported-mp",
    ),
    pytest.param(
        [peer(peerAsn=64500)],
        ["BGPPeer tor-a: spec.peerAsn: unknown field (did you mean 'peerASN'?)"],
        id="unknown-field-suggestion",
    ),
    pytest.param(
        [peer(color="blue")],
        ["BGPPeer tor-a: spec.color: unknown field"],
        id="unknown-field",
    ),
    pytest.param(
        [{**peer(), "apiVersion": V1B1, "spec": {**peer()["spec"], "connectTime": "5s"}}],
        ["BGPPeer tor-a: spec.connectTime: unknown field"],
        id="v1beta1-peer-has-no-connect-time",
    ),
    pytest.param(
        [peer("tor-a"), peer("tor-b")],
        [
            "BGPPeer tor-b: spec.peerAddress: BGPPeer tor-a already peers with 172.31.250.1 "
            "port 179 on the same nodes"
        ],
        id="duplicate-peer-session",
    ),
    pytest.param(
        [peer(nodeSelectors=[{"matchLabels": {"rack": "r1"}, "matchExpressions": "x"}])],
        ["BGPPeer tor-a: spec.nodeSelectors[0].matchExpressions: must be a list, not a string"],
        id="selector-expressions-not-list",
    ),
    pytest.param(
        [
            peer(
                nodeSelectors=[
                    {
                        "matchExpressions": [
                            {"key": "rack", "operator": "Is", "values": ["r1"]},
                            {"key": "rack", "operator": "In"},
                            {"key": "rack", "operator": "Exists", "values": ["r1"]},
                            {"key": "-bad", "operator": "Exists"},
                        ]
                    }
                ]
            )
        ],
        [
            "BGPPeer tor-a: spec.nodeSelectors[0].matchExpressions[0].operator: 'Is' is not "
            "one of In, NotIn, Exists, DoesNotExist",
            "BGPPeer tor-a: spec.nodeSelectors[0].matchExpressions[1].values: must not be "
            "empty for operator In",
            "BGPPeer tor-a: spec.nodeSelectors[0].matchExpressions[2].values: must be empty "
            "for operator Exists",
            "BGPPeer tor-a: spec.nodeSelectors[0].matchExpressions[3].key: label key '-bad': "
            "name must be 1-63 characters of letters, digits, '-', '_' and '.', starting and "
            "ending with a letter or digit",
        ],
        id="selector-expressions-bad",
    ),
    pytest.param(
        [peer(nodeSelectors=[{"matchLabels": {"rack": "r1"}}, {"matchLabels": {"rack": "r1"}}])],
        ["BGPPeer tor-a: spec.nodeSelectors[1]: {'matchLabels': {'rack': 'r1'}} is listed twice"],
        id="selector-duplicate",
    ),
    pytest.param(
        [peer(nodeSelectors=[{"matchLabels": {"rack": "r 1"}}])],
        [
            "BGPPeer tor-a: spec.nodeSelectors[0].matchLabels.rack: label value 'r 1' must be "
            "at most 63 characters of letters, digits, '-', '_' and '.', starting and ending "
            "with a letter or digit"
        ],
        id="selector-label-value",
    ),
    # ---- IPAddressPool
    pytest.param(
        [pool(addresses=[])],
        ["IPAddressPool pool-a: spec.addresses: pool has no addresses (CIDRs or a-b ranges)"],
        id="pool-empty",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.0/33"])],
        ["IPAddressPool pool-a: spec.addresses[0]: invalid CIDR '10.99.100.0/33'"],
        id="pool-bad-cidr",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.20-10.99.100.10"])],
        [
            "IPAddressPool pool-a: spec.addresses[0]: invalid IP range "
            "'10.99.100.20-10.99.100.10': start IP 10.99.100.20 is after the end IP 10.99.100.10"
        ],
        id="pool-reversed-range",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.1-fd00:99::1"])],
        [
            "IPAddressPool pool-a: spec.addresses[0]: invalid IP range "
            "'10.99.100.1-fd00:99::1': start and end are of different families"
        ],
        id="pool-mixed-family-range",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.x-10.99.100.9"])],
        [
            "IPAddressPool pool-a: spec.addresses[0]: invalid IP range "
            "'10.99.100.x-10.99.100.9': invalid start IP '10.99.100.x'"
        ],
        id="pool-range-bad-start",
    ),
    pytest.param(
        [pool("pool-a"), pool("pool-b", addresses=["10.99.100.128/25"])],
        [
            "IPAddressPool pool-b: spec.addresses[0]: '10.99.100.128/25' overlaps "
            "'10.99.100.0/24' of IPAddressPool pool-a"
        ],
        id="pools-overlap",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.0/24", "10.99.100.5-10.99.100.7"])],
        [
            "IPAddressPool pool-a: spec.addresses[1]: '10.99.100.5-10.99.100.7' overlaps "
            "'10.99.100.0/24' of this pool"
        ],
        id="pool-overlaps-itself",
    ),
    pytest.param(
        [pool("pool-a"), pool("pool-a", addresses=["10.99.101.0/24"])],
        [
            "IPAddressPool pool-a: metadata.name: duplicate IPAddressPool name "
            "(also in t.yaml:doc 1)"
        ],
        id="pool-duplicate-name",
    ),
    pytest.param(
        [pool(autoAssign="false")],
        ["IPAddressPool pool-a: spec.autoAssign: must be true or false, not a string"],
        id="pool-auto-assign-string",
    ),
    pytest.param(
        [pool(serviceAllocation={"namespaces": ["a", "a"], "priority": "high"})],
        [
            "IPAddressPool pool-a: spec.serviceAllocation.priority: must be an integer, not a "
            "string",
            "IPAddressPool pool-a: spec.serviceAllocation.namespaces[1]: 'a' is listed twice",
        ],
        id="pool-allocation-bad",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.0/24\n"])],
        [
            "IPAddressPool pool-a: spec.addresses[0]: '10.99.100.0/24\\n' holds a control "
            "character ('\\n')"
        ],
        id="pool-address-newline",
    ),
    # ---- BGPAdvertisement
    pytest.param(
        [pool(), peer(), adv(ipAddressPools=["pool-a", "nope"], peers=["tor-z"])],
        [
            "BGPAdvertisement adv: spec.ipAddressPools[1]: no IPAddressPool named 'nope'",
            "BGPAdvertisement adv: spec.peers[0]: no BGPPeer named 'tor-z'",
        ],
        id="adv-unknown-pool-and-peer",
    ),
    pytest.param(
        [pool(), adv(ipAddressPools=["pool-a", "pool-a"])],
        ["BGPAdvertisement adv: spec.ipAddressPools[1]: 'pool-a' is listed twice"],
        id="adv-pool-twice",
    ),
    pytest.param(
        [pool(), adv(aggregationLength=16)],
        [
            "BGPAdvertisement adv: spec.aggregationLength: 16 is shorter than /24 of "
            "'10.99.100.0/24' in IPAddressPool pool-a: the aggregate would cover addresses "
            "outside the pool"
        ],
        id="aggregation-shorter-than-pool",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.0-10.99.100.130"]), adv(aggregationLength=24)],
        [
            "BGPAdvertisement adv: spec.aggregationLength: 24 is shorter than /25 of "
            "'10.99.100.0-10.99.100.130' in IPAddressPool pool-a: the aggregate would cover "
            "addresses outside the pool"
        ],
        id="aggregation-shorter-than-range",
    ),
    pytest.param(
        [pool(addresses=["fd00:99:100::/120"]), adv(aggregationLengthV6=64)],
        [
            "BGPAdvertisement adv: spec.aggregationLengthV6: 64 is shorter than /120 of "
            "'fd00:99:100::/120' in IPAddressPool pool-a: the aggregate would cover addresses "
            "outside the pool"
        ],
        id="aggregation-v6-shorter-than-pool",
    ),
    pytest.param(
        [adv(aggregationLength=33, aggregationLengthV6=0)],
        [
            "BGPAdvertisement adv: spec.aggregationLength: 33 is out of range (1-32)",
            "BGPAdvertisement adv: spec.aggregationLengthV6: 0 is out of range (1-128)",
        ],
        id="aggregation-range",
    ),
    pytest.param(
        [adv(maxNodes=0), adv("adv2", maxNodes="3")],
        [
            "BGPAdvertisement adv: spec.maxNodes: 0 is out of range (1-4294967295)",
            "BGPAdvertisement adv2: spec.maxNodes: must be an integer, not a string",
        ],
        id="max-nodes-range-and-type",
    ),
    pytest.param(
        [adv(localPref=4294967296)],
        ["BGPAdvertisement adv: spec.localPref: 4294967296 is out of range (0-4294967295)"],
        id="local-pref-range",
    ),
    pytest.param(
        [adv(communities=["65536:1", "large:1:2", "foo", "65000:1\n"])],
        [
            "BGPAdvertisement adv: spec.communities[3]: '65000:1\\n' holds a control "
            "character ('\\n')",
        ],
        id="adv-community-newline-stops-the-list",
    ),
    pytest.param(
        [adv(communities=["65536:1", "large:1:2", "foo"])],
        [
            "BGPAdvertisement adv: spec.communities[0]: '65536:1': first half 65536 is out of "
            "range (0-65535)",
            "BGPAdvertisement adv: spec.communities[1]: 'large:1:2': a large community is "
            "large:<global>:<local1>:<local2>",
            "BGPAdvertisement adv: spec.communities[2]: 'foo' is neither a Community alias nor "
            "a community (a:b, large:a:b:c or a well-known name)",
        ],
        id="adv-communities-bad",
    ),
    pytest.param(
        [pool(), adv(serviceSelectors=[{"matchExpressions": [{"key": "app", "operator": "Is"}]}])],
        [
            "BGPAdvertisement adv: spec.serviceSelectors[0].matchExpressions[0].operator: 'Is' "
            "is not one of In, NotIn, Exists, DoesNotExist"
        ],
        id="adv-service-selectors-bad-operator",
    ),
    pytest.param(
        [
            pool(),
            adv("a", localPref=100),
            adv("b", localPref=200, nodeSelectors=[{}]),
        ],
        [
            "BGPAdvertisement b: spec.localPref: 200 conflicts with localPref 100 of "
            "BGPAdvertisement a for pool pool-a (same prefixes, peers and nodes)"
        ],
        id="local-pref-conflict-on-every-node",
    ),
    # ---- Community and BFDProfile
    pytest.param(
        [community("c1", gold="65000:1"), community("c2", gold="65000:2")],
        [
            "Community c2: spec.communities: duplicate definition of community 'gold' "
            "(also in Community c1)"
        ],
        id="community-alias-twice",
    ),
    pytest.param(
        [community("c1", gold="65000:70000"), adv(communities=["gold"])],
        [
            "Community c1: spec.communities[0].value: '65000:70000': second half 70000 is out "
            "of range (0-65535)"
        ],
        id="community-bad-value",
    ),
    pytest.param(
        [bfd(receiveInterval=5, detectMultiplier=1, minimumTtl=255, echoMode="on")],
        [
            "BFDProfile bfd: spec.receiveInterval: 5 is out of range (10-60000)",
            "BFDProfile bfd: spec.detectMultiplier: 1 is out of range (2-255)",
            "BFDProfile bfd: spec.minimumTtl: 255 is out of range (1-254)",
            "BFDProfile bfd: spec.echoMode: must be true or false, not a string",
        ],
        id="bfd-ranges",
    ),
    # ---- SpeakerConfig
    pytest.param(
        [speaker(logFormat="xml", debounce="-1s", metricsAddress="localhost", speed=3)],
        [
            "SpeakerConfig speaker: spec.speed: unknown field",
            "SpeakerConfig speaker: spec.metricsAddress: 'localhost' must be HOST:PORT (IPv6 "
            "as [::1]:7473), port 0-65535",
            "SpeakerConfig speaker: spec.debounce: '-1s' is negative",
            "SpeakerConfig speaker: spec.logFormat: 'xml' is not one of text, json",
        ],
        id="speaker-bad",
    ),
    pytest.param(
        [speaker(mqtt={"port": 1883, "topicPrefix": "a/#"})],
        [
            "SpeakerConfig speaker: spec.mqtt.host: is required",
            "SpeakerConfig speaker: spec.mqtt.topicPrefix: 'a/#': MQTT wildcards + and # are "
            "not allowed",
        ],
        id="speaker-mqtt-bad",
    ),
    pytest.param(
        [speaker("one"), speaker("two")],
        ["SpeakerConfig two: only one SpeakerConfig is allowed (first: one)"],
        id="speaker-twice",
    ),
    pytest.param(
        [speaker(metricsAddress="::1:7473")],
        [
            "SpeakerConfig speaker: spec.metricsAddress: '::1:7473': write an IPv6 host in "
            "brackets, e.g. [::1]:7473"
        ],
        id="speaker-metrics-v6-brackets",
    ),
    pytest.param(
        [speaker(onSigterm="keep")],
        ["SpeakerConfig speaker: spec.onSigterm: 'keep' is not one of withdraw, drain, retain"],
        id="speaker-on-sigterm-unknown",
    ),
    pytest.param(
        [speaker(onSigterm=True)],
        ["SpeakerConfig speaker: spec.onSigterm: True is not one of withdraw, drain, retain"],
        id="speaker-on-sigterm-bool",
    ),
    pytest.param(
        [speaker(onSigterm="Retain")],
        ["SpeakerConfig speaker: spec.onSigterm: 'Retain' is not one of withdraw, drain, retain"],
        id="speaker-on-sigterm-case",
    ),
    pytest.param(
        [speaker(drainOnSigterm=True)],
        ["SpeakerConfig speaker: spec.drainOnSigterm: unknown field (did you mean 'onSigterm'?)"],
        id="speaker-drain-on-sigterm-replaced",
    ),
    # ---- documents and metadata
    pytest.param(
        [{"apiVersion": V1B1, "kind": "L2Advertisement", "metadata": {"name": "l2"}}],
        [
            "L2Advertisement l2: kind: L2Advertisement is not accepted: layer 2 mode is not "
            "supported: kube-bgpd only speaks BGP"
        ],
        id="kind-l2",
    ),
    pytest.param(
        [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "config"}}],
        [
            "ConfigMap config: kind: ConfigMap is not accepted: MetalLB's legacy ConfigMap "
            "format is not supported; convert it to custom resources first (MetalLB's "
            "configmaptocrs tool)"
        ],
        id="kind-configmap",
    ),
    pytest.param(
        [{"apiVersion": V1B1, "kind": "Frobnicator", "metadata": {"name": "f"}}],
        [
            "Frobnicator f: kind: unknown kind Frobnicator (kube-bgpd reads BFDProfile, "
            "BGPAdvertisement, BGPPeer, Community, IPAddressPool, SpeakerConfig, and v1 List)"
        ],
        id="kind-unknown",
    ),
    pytest.param(
        [{**peer(), "apiVersion": "metallb.io/v1beta3"}],
        [
            "BGPPeer tor-a: apiVersion: 'metallb.io/v1beta3' is not supported for BGPPeer; use "
            "metallb.io/v1beta2 or metallb.io/v1beta1"
        ],
        id="api-version-unknown",
    ),
    pytest.param(
        [{**pool(), "apiVersion": OURS}],
        [
            "IPAddressPool pool-a: apiVersion: 'kube-bgpd.io/v1alpha1' is not supported for "
            "IPAddressPool; use metallb.io/v1beta1"
        ],
        id="api-version-wrong-group",
    ),
    pytest.param(
        [{"apiVersion": V1B1, "metadata": {"name": "x"}}],
        ["x: kind: is required"],
        id="kind-missing",
    ),
    pytest.param(
        ["just a string"],
        ["document: must be a mapping (a Kubernetes object), not a string"],
        id="doc-string",
    ),
    pytest.param(
        [[1, 2]], ["document: must be a mapping (a Kubernetes object), not a list"], id="doc-list"
    ),
    pytest.param(
        [42], ["document: must be a mapping (a Kubernetes object), not an integer"], id="doc-number"
    ),
    pytest.param(
        [{**pool(), "metadata": {}}],
        ["IPAddressPool <unnamed>: metadata.name: is required"],
        id="name-missing",
    ),
    pytest.param(
        [{**pool(), "metadata": {"name": "Pool_A"}}],
        [
            "IPAddressPool <unnamed>: metadata.name: 'Pool_A' is not a valid Kubernetes name: "
            "lower-case letters, digits, '-' and '.', starting and ending with a letter or "
            "digit (DNS-1123 subdomain)"
        ],
        id="name-not-dns",
    ),
    pytest.param(
        [{**pool(), "metadata": {"name": "pool\nannounce route 0.0.0.0/0"}}],
        [
            "IPAddressPool <unnamed>: metadata.name: 'pool\\nannounce route 0.0.0.0/0' is not "
            "a valid Kubernetes name: lower-case letters, digits, '-' and '.', starting and "
            "ending with a letter or digit (DNS-1123 subdomain)"
        ],
        id="name-newline",
    ),
    pytest.param(
        [{**pool(), "metadata": {"name": "pool-a", "namespace": "Metal LB", "uid": "x"}}],
        ["IPAddressPool pool-a: metadata.namespace: 'Metal LB' is not a valid namespace name"],
        id="namespace-bad",
    ),
    pytest.param(
        [{**pool(), "metadata": {"name": "pool-a", "owner": "me"}}],
        ["IPAddressPool pool-a: metadata.owner: unknown field"],
        id="metadata-unknown-field",
    ),
    pytest.param(
        [{**pool(), "specs": {}}],
        ["IPAddressPool pool-a: specs: unknown field (did you mean 'spec'?)"],
        id="top-level-unknown-field",
    ),
    pytest.param(
        [{**pool(), "spec": {1: "x", "addresses": ["10.0.0.0/8"]}}],
        ["IPAddressPool pool-a: spec: key 1 is not a string"],
        id="number-as-key",
    ),
    pytest.param(
        [{"apiVersion": "v1", "kind": "List", "items": [pool(), "x"]}],
        ["document: must be a mapping (a Kubernetes object), not a string"],
        id="list-item-not-mapping",
    ),
]


@pytest.mark.parametrize(("docs", "expected"), BAD)
def test_errors(docs: list[object], expected: list[str]) -> None:
    result = parse(*docs)
    assert result.config is None
    assert messages(result.errors) == expected


def test_every_error_is_collected_across_documents() -> None:
    result = parse(
        pool(addresses=["10.99.100.9-10.99.100.1"]),
        peer(myASN=4294967296, holdTime="1s"),
        adv(ipAddressPools=["nope"]),
    )
    assert messages(result.errors) == [
        "IPAddressPool pool-a: spec.addresses[0]: invalid IP range '10.99.100.9-10.99.100.1': "
        "start IP 10.99.100.9 is after the end IP 10.99.100.1",
        "BGPPeer tor-a: spec.myASN: 4294967296 is out of range (1-4294967295)",
        "BGPPeer tor-a: spec.holdTime: '1s' is invalid: must be 0 or >= 3s",
        "BGPAdvertisement adv: spec.ipAddressPools[0]: no IPAddressPool named 'nope'",
    ]


def test_issue_str_names_file_object_and_field() -> None:
    issue = ConfigIssue(
        "site.yaml:doc 2", "BGPPeer tor-a: spec.myASN", "4294967296 is out of range"
    )
    assert str(issue) == "site.yaml:doc 2: BGPPeer tor-a: spec.myASN: 4294967296 is out of range"


def test_a_bad_pool_does_not_make_its_advertisement_fail_too() -> None:
    result = parse(pool(addresses=["nonsense"]), adv(ipAddressPools=["pool-a"]))
    assert messages(result.errors) == [
        "IPAddressPool pool-a: spec.addresses[0]: invalid CIDR 'nonsense'"
    ]


# --------------------------------------------------------------------------- good input


def test_pool_addresses_in_every_form() -> None:
    result = parse(
        pool(
            addresses=[
                "10.99.100.0/24",
                "10.99.101.10 - 10.99.101.20",
                "10.99.102.7",
                "fd00:99:100::/120",
                "fd00:99:101::1-fd00:99:101::ff",
                "fd00:99:102::7",
            ],
            autoAssign=False,
            avoidBuggyIPs=True,
        )
    )
    assert result.config is not None, messages(result.errors)
    (p,) = result.config.pools
    assert [(str(r.first), str(r.last)) for r in p.addresses] == [
        ("10.99.100.0", "10.99.100.255"),
        ("10.99.101.10", "10.99.101.20"),
        ("10.99.102.7", "10.99.102.7"),
        ("fd00:99:100::", "fd00:99:100::ff"),
        ("fd00:99:101::1", "fd00:99:101::ff"),
        ("fd00:99:102::7", "fd00:99:102::7"),
    ]
    assert [r.text for r in p.addresses][1] == "10.99.101.10 - 10.99.101.20"
    assert (p.auto_assign, p.avoid_buggy_ips) == (False, True)


def test_cidr_with_host_bits_is_the_network_with_a_warning_like_metallb() -> None:
    result = parse(pool(addresses=["10.99.100.5/24"]), peer(), adv())
    assert result.config is not None
    assert result.config.pools[0].addresses[0].first == ipaddress.ip_address("10.99.100.0")
    assert messages(result.warnings) == [
        "IPAddressPool pool-a: spec.addresses[0]: '10.99.100.5/24' has host bits set; the pool "
        "is 10.99.100.0/24, as in MetalLB"
    ]


def test_advertisement_service_selectors() -> None:
    result = parse(
        pool(),
        peer(),
        adv(
            serviceSelectors=[
                {"matchLabels": {"app": "web"}},
                {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["edge"]}]},
            ]
        ),
    )
    assert result.config is not None, messages(result.errors)
    (advertisement,) = result.config.advertisements
    assert advertisement.selects_service({"app": "web"})
    assert advertisement.selects_service({"tier": "edge", "app": "api"})
    assert not advertisement.selects_service({"app": "api"})
    assert not advertisement.selects_service({})
    assert messages(result.warnings) == []


def test_service_allocation_and_labels() -> None:
    doc = pool(
        serviceAllocation={
            "priority": 5,
            "namespaces": ["team-a"],
            "namespaceSelectors": [{"matchLabels": {"env": "prod"}}],
            "serviceSelectors": [
                {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}
            ],
        }
    )
    doc["metadata"]["labels"] = {"exposure": "public"}
    result = parse(doc, adv())
    assert result.config is not None, messages(result.errors)
    p = result.config.pools[0]
    assert dict(p.labels) == {"exposure": "public"}
    sa = p.service_allocation
    assert sa is not None
    assert (sa.priority, sa.namespaces) == (5, ("team-a",))
    assert sa.namespace_selectors[0].match_labels == (("env", "prod"),)
    req = sa.service_selectors[0].match_expressions[0]
    assert (req.key, req.operator, req.values) == ("tier", SelectorOperator.NOT_IN, ("db",))


TIMERS = [
    pytest.param({}, 90, None, id="default"),
    pytest.param({"holdTime": "1m30s"}, 90, None, id="go-minutes-seconds"),
    pytest.param({"holdTime": "3s"}, 3, None, id="minimum"),
    pytest.param({"holdTime": "0s"}, 0, None, id="zero-disables-keepalives"),
    pytest.param({"holdTime": "0"}, 0, None, id="bare-zero"),
    pytest.param({"keepaliveTime": "10s"}, 30, 10, id="keepalive-implies-hold"),
    pytest.param({"holdTime": "9s", "keepaliveTime": "3s"}, 9, 3, id="keepalive-third"),
    pytest.param({"holdTime": "3000ms"}, 3, None, id="milliseconds"),
]


@pytest.mark.parametrize(("spec", "hold", "keepalive"), TIMERS)
def test_peer_timers(spec: dict[str, str], hold: int, keepalive: int | None) -> None:
    result = parse(peer(**spec))
    assert result.config is not None, messages(result.errors)
    (p,) = result.config.peers
    assert (p.hold_time, p.keepalive_time, p.connect_time) == (hold, keepalive, None)


def test_peer_every_field() -> None:
    result = parse(
        peer(
            myASN=4200000000,
            peerASN=65000,
            peerAddress="172.31.250.1",
            peerPort=1179,
            sourceAddress="172.31.250.11",
            routerID="10.0.0.11",
            password="s3cr'e\\t\"",
            ebgpMultiHop=True,
            enableGracefulRestart=True,
            nodeSelectors=[{"matchLabels": {"rack": "r1"}}],
        ),
        peer(
            "tor-b", peerAddress="172.31.250.2", passwordSecret={"name": "md5", "namespace": "ms"}
        ),
        peer("tor-c", peerAddress="172.31.250.3", passwordFile="/etc/kube-bgpd/tor-c.md5"),
    )
    assert result.config is not None, messages(result.errors)
    a, b, c = result.config.peers
    assert (a.my_asn, a.peer_asn, a.peer_port) == (4200000000, 65000, 1179)
    assert (str(a.source_address), str(a.router_id)) == ("172.31.250.11", "10.0.0.11")
    assert (a.password, a.ebgp_multihop, a.enable_graceful_restart) == ("s3cr'e\\t\"", True, True)
    assert a.node_selectors[0].matches({"rack": "r1"})
    assert not a.node_selectors[0].matches({"rack": "r2"})
    assert a.family == 4
    assert not a.is_ibgp
    assert b.password_secret == SecretRef(name="md5", namespace="ms")
    assert c.password_file == Path("/etc/kube-bgpd/tor-c.md5")
    assert "s3cr" not in repr(a)  # passwords never reach logs through repr


def test_v1beta1_peer_is_accepted() -> None:
    doc = {**peer(), "apiVersion": V1B1}
    result = parse(doc)
    assert result.config is not None, messages(result.errors)
    assert result.config.peers[0].peer_asn == 64500


def test_same_peer_address_on_disjoint_nodes_is_fine() -> None:
    result = parse(
        peer("tor-a", nodeSelectors=[{"matchLabels": {"rack": "r1"}}]),
        peer("tor-b", nodeSelectors=[{"matchLabels": {"rack": "r2"}}]),
        peer("tor-c", peerPort=1179),
    )
    assert result.config is not None, messages(result.errors)


def test_communities_resolve_aliases_literals_and_well_known_names() -> None:
    result = parse(
        pool(),
        community(gold="65000:300", customer="large:64512:1:2", no_export="65000:1"),
        adv(
            communities=["gold", "65000:50", "no-advertise", "customer", "large:1:2:3", "no-export"]
        ),
    )
    assert result.config is not None, messages(result.errors)
    a = result.config.advertisements[0]
    # An alias wins over a well-known name (MetalLB looks aliases up first).
    assert a.communities == ("65000:1", "65000:50", "65000:300", "65535:65282")
    assert a.large_communities == ("1:2:3", "64512:1:2")
    assert dict(result.config.communities[0].communities)["gold"] == "65000:300"


def test_advertisement_defaults_select_everything() -> None:
    result = parse(pool(), peer(), adv())
    assert result.config is not None
    a = result.config.advertisements[0]
    assert (a.aggregation_length, a.aggregation_length_v6, a.local_pref) == (32, 128, None)
    assert a.max_nodes is None
    assert a.selects_pool(result.config.pools[0])
    assert (a.peers, a.ip_address_pools) == ((), ())


def test_advertisement_fields() -> None:
    result = parse(
        pool(addresses=["10.99.100.0/24"]),
        peer(peerASN=64512),
        adv(
            ipAddressPools=["pool-a"],
            aggregationLength=24,
            aggregationLengthV6=64,
            localPref=150,
            peers=["tor-a"],
            nodeSelectors=[{"matchLabels": {"kubernetes.io/os": "linux"}}],
            maxNodes=8,
        ),
    )
    assert result.config is not None, messages(result.errors)
    a = result.config.advertisements[0]
    assert (a.aggregation_length, a.aggregation_length_v6, a.local_pref) == (24, 64, 150)
    assert a.max_nodes == 8
    assert (a.ip_address_pools, a.peers) == (("pool-a",), ("tor-a",))
    assert messages(result.warnings) == []


def test_local_pref_zero_means_unset_as_in_metallb() -> None:
    result = parse(pool(), adv(localPref=0))
    assert result.config is not None
    assert result.config.advertisements[0].local_pref is None


def test_different_local_prefs_on_disjoint_nodes_peers_or_aggregates_are_fine() -> None:
    r1 = [{"matchLabels": {"rack": "r1"}}]
    r2 = [{"matchLabels": {"rack": "r2"}}]
    result = parse(
        pool(),
        peer("tor-a", peerASN=64512),
        peer("tor-b", peerASN=64512, peerAddress="172.31.250.2"),
        adv("a", localPref=100, peers=["tor-a"], nodeSelectors=r1),
        adv("b", localPref=200, peers=["tor-b"]),
        adv("c", localPref=300, peers=["tor-a"], nodeSelectors=r2),
        adv("d", localPref=400, peers=["tor-a"], nodeSelectors=r1, aggregationLength=24),
    )
    assert result.config is not None, messages(result.errors)


def test_bfd_profile_is_parsed_and_named_by_a_peer() -> None:
    result = parse(
        peer(bfdProfile="bfd"),
        bfd(
            receiveInterval=100,
            transmitInterval=200,
            detectMultiplier=5,
            echoMode=False,
            passiveMode=True,
            minimumTtl=250,
        ),
    )
    assert result.config is not None, messages(result.errors)
    b = result.config.bfd_profiles[0]
    assert (b.receive_interval, b.transmit_interval, b.detect_multiplier, b.echo_mode) == (
        100,
        200,
        5,
        False,
    )
    assert (b.echo_interval, b.minimum_ttl, b.passive_mode) == (50, 250, True)
    assert result.config.peers[0].bfd_profile == "bfd"
    assert messages(result.warnings) == []


def test_speaker_config_defaults_when_absent() -> None:
    result = parse(pool(), peer(), adv())
    assert result.config is not None
    s = result.config.speaker
    assert (s.load_balancer_class, s.ignore_exclude_lb, s.exabgp_binary) == (None, False, "exabgp")
    assert (s.work_dir, s.metrics_address, s.mqtt) == (
        Path("/run/kube-bgpd"),
        "127.0.0.1:7473",
        None,
    )
    assert (s.debounce, s.log_format, s.drain_window, s.on_sigterm, s.listen) == (
        0.0,
        LogFormat.TEXT,
        30.0,
        SigtermAction.WITHDRAW,
        False,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("withdraw", SigtermAction.WITHDRAW, id="withdraw"),
        pytest.param("drain", SigtermAction.DRAIN, id="drain"),
        pytest.param("retain", SigtermAction.RETAIN, id="retain"),
        pytest.param(None, SigtermAction.WITHDRAW, id="null-is-default"),
    ],
)
def test_speaker_on_sigterm(value: object, expected: SigtermAction) -> None:
    result = parse(pool(), peer(), adv(), speaker(onSigterm=value))
    assert result.config is not None, messages(result.errors)
    assert result.config.speaker.on_sigterm is expected


def test_speaker_config_every_field() -> None:
    result = parse(
        speaker(
            loadBalancerClass="kube-bgpd.io/bgp",
            ignoreExcludeLB=True,
            exabgpBinary="/opt/exabgp/bin/exabgp",
            workDir="/var/lib/kube-bgpd",
            metricsAddress="[::1]:9473",
            mqtt={
                "host": "127.0.0.1",
                "port": 8883,
                "topicPrefix": "dc1/bgp",
                "username": "bgpd",
                "password": "pw",
                "tls": True,
            },
            debounce="250ms",
            logFormat="json",
            drainWindow=12.5,
            onSigterm="drain",
            listen=True,
        )
    )
    assert result.config is not None, messages(result.errors)
    s = result.config.speaker
    assert (s.load_balancer_class, s.ignore_exclude_lb) == ("kube-bgpd.io/bgp", True)
    assert (s.exabgp_binary, s.work_dir) == ("/opt/exabgp/bin/exabgp", Path("/var/lib/kube-bgpd"))
    assert s.metrics_address == "[::1]:9473"
    assert s.mqtt == MQTTConfig("127.0.0.1", 8883, "dc1/bgp", "bgpd", "pw", True)
    assert (s.debounce, s.log_format, s.drain_window) == (0.25, LogFormat.JSON, 12.5)
    assert (s.on_sigterm, s.listen) == (SigtermAction.DRAIN, True)


def test_status_and_server_metadata_are_ignored() -> None:
    doc = pool()
    doc["status"] = {"assignedIPv4": 3, "anything": ["goes"]}
    doc["metadata"].update(
        namespace="metallb-system",
        uid="0a1b",
        resourceVersion="42",
        creationTimestamp="2026-01-01T00:00:00Z",
        annotations={"note": "x"},
        managedFields=[{"manager": "kubectl"}],
    )
    result = parse(doc, adv())
    assert result.config is not None, messages(result.errors)


def test_list_items_are_read_like_documents() -> None:
    result = parse({"apiVersion": "v1", "kind": "List", "items": [pool(), peer(), adv()]})
    assert result.config is not None, messages(result.errors)
    assert (len(result.config.pools), len(result.config.peers)) == (1, 1)


# --------------------------------------------------------------------------- warnings

WARNINGS = [
    pytest.param(
        [pool(addresses=["10.99.100.0/24", "fd00:99:100::/120"]), peer(), adv()],
        [
            "BGPAdvertisement adv: IPv6 addresses of pool pool-a reach no IPv6 peer (a peer "
            "receives only prefixes of its session's family)"
        ],
        id="no-peer-of-family",
    ),
    pytest.param(
        [pool(addresses=["fd00:99:100::/120"]), peer(), peer6(), adv(peers=["tor-a"])],
        [
            "BGPAdvertisement adv: IPv6 addresses of pool pool-a reach no IPv6 peer (a peer "
            "receives only prefixes of its session's family)"
        ],
        id="named-peers-lack-family",
    ),
    pytest.param(
        [pool(addresses=["10.99.100.0/24", "fd00:99:100::/120"]), peer(), peer6(), adv()],
        [],
        id="both-families-covered",
    ),
    pytest.param(
        [pool(), peer()],
        [
            "IPAddressPool pool-a: no BGPAdvertisement selects this pool: its IPs are "
            "allocated but never announced"
        ],
        id="pool-not-advertised",
    ),
    pytest.param(
        [pool(), peer(), adv(localPref=200)],
        [
            "BGPAdvertisement adv: spec.localPref: is only sent to iBGP peers, and every peer "
            "here is eBGP"
        ],
        id="local-pref-ebgp",
    ),
    pytest.param(
        [pool(), peer(), adv(ipAddressPoolSelectors=[{"matchLabels": {"x": "y"}}])],
        [
            "IPAddressPool pool-a: no BGPAdvertisement selects this pool: its IPs are "
            "allocated but never announced",
            "BGPAdvertisement adv: spec.ipAddressPoolSelectors: selects no IPAddressPool",
        ],
        id="selector-selects-nothing",
    ),
    pytest.param(
        [
            pool(),
            peer(),
            adv(serviceSelectors=[{"matchLabels": {"app": "web"}}], aggregationLength=24),
        ],
        [
            "BGPAdvertisement adv: spec.serviceSelectors: with aggregationLength 24: the "
            "aggregate announced for a selected Service also covers, and draws the traffic of, "
            "the IPs of Services it does not select"
        ],
        id="service-selectors-with-aggregation",
    ),
    pytest.param([], [": no configuration documents found"], id="empty"),
]


@pytest.mark.parametrize(("docs", "expected"), WARNINGS)
def test_warnings(docs: list[object], expected: list[str]) -> None:
    result = parse(*docs)
    assert result.config is not None, messages(result.errors)
    assert messages(result.warnings) == expected


# --------------------------------------------------------------------------- durations

DURATIONS = [
    pytest.param("90s", 90, id="seconds"),
    pytest.param("1m30s", 90, id="minutes-seconds"),
    pytest.param("1.5h", 5400, id="fraction-hours"),
    pytest.param("300ms", 0.3, id="milliseconds"),
    pytest.param("1h2m3s4ms5us6ns", 3723.004005006, id="every-unit"),
    pytest.param("0", 0, id="zero"),
    pytest.param("-2s", -2, id="negative"),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_parse_duration(text: str, seconds: float) -> None:
    assert float(parse_duration(text)) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "90", "s", "1x", "1m 30s", "--1s", "1.2.3s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)
