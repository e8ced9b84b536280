"""Small CustomResourceDefinitions the simulator tests install (not MetalLB's own CRDs).

`POOL_CRD` is a minimal metallb.io IPAddressPool; `PEER_CRD` a BGPPeer served in two
versions (v1beta2 stored, v1beta1 served) with a status subresource, defaults, enums,
bounds, a pattern, int-or-string, nullable and printer columns: enough to exercise every
schema rule the simulator implements.
"""

from __future__ import annotations

from typing import Any

import yaml

POOL_CRD_YAML = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ipaddresspools.metallb.io
spec:
  group: metallb.io
  names:
    kind: IPAddressPool
    listKind: IPAddressPoolList
    plural: ipaddresspools
    singular: ipaddresspool
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [addresses]
            properties:
              addresses: {type: array, items: {type: string}}
              autoAssign: {type: boolean, default: true}
"""

#: A pool and a peer in metallb-system, as a user writes them for `kubectl apply -f -`.
CRS = """\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [10.99.1.0/24]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 172.31.250.1, holdTime: 90s}
"""

_PEER_SCHEMA = """\
type: object
properties:
  spec:
    type: object
    required: [myASN, peerASN, peerAddress]
    properties:
      myASN: {type: integer, format: int32, maximum: 4294967295, minimum: 0}
      peerASN: {type: integer, format: int32, maximum: 4294967295, minimum: 0}
      peerAddress: {type: string}
      peerPort: {type: integer, default: 179, maximum: 16384, minimum: 0}
      holdTime: {type: string}
      ebgpMultiHop: {type: boolean}
      routerID: {type: string, maxLength: 15, pattern: '^([0-9]+\\.){3}[0-9]+$'}
      bfdProfile: {type: string, nullable: true}
      connectTime: {x-kubernetes-int-or-string: true}
      dynamicASN: {type: string, enum: [internal, external]}
      nodeSelectors:
        type: array
        items:
          type: object
          properties:
            matchLabels: {type: object, additionalProperties: {type: string}}
      extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
  status:
    type: object
    properties:
      state: {type: string}
"""

PEER_CRD_YAML = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: bgppeers.metallb.io
spec:
  group: metallb.io
  names: {kind: BGPPeer, listKind: BGPPeerList, plural: bgppeers, singular: bgppeer}
  scope: Namespaced
  conversion: {strategy: None}
  versions:
  - name: v1beta1
    served: true
    storage: false
  - name: v1beta2
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Address, type: string, jsonPath: .spec.peerAddress}
    - {name: ASN, type: integer, jsonPath: .spec.peerASN}
    - {name: State, type: string, jsonPath: .status.state, priority: 1}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"""


def _schema() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(_PEER_SCHEMA)
    return doc


def peer_crd() -> dict[str, Any]:
    """The BGPPeer CRD, both versions with the same schema (as MetalLB's)."""
    crd: dict[str, Any] = yaml.safe_load(PEER_CRD_YAML)
    for version in crd["spec"]["versions"]:
        version["schema"] = {"openAPIV3Schema": _schema()}
    return crd


def pool_crd() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(POOL_CRD_YAML)
    return doc


def peer_crd_yaml() -> str:
    return yaml.safe_dump(peer_crd(), sort_keys=False)


def peer(
    name: str, namespace: str = "metallb-system", version: str = "v1beta2", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": f"metallb.io/{version}",
        "kind": "BGPPeer",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"myASN": 64513, "peerASN": 64512, "peerAddress": "172.31.250.1", **spec},
    }
