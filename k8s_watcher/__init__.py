"""The only code that talks to the Kubernetes API.

It lists and watches Services, EndpointSlices and Nodes with the official asyncio client
(`kubernetes.aio`), writes Service status, Events and Leases, and converts every API object
into kube-bgpd's frozen model types at this boundary: nothing outside this package sees a
`kubernetes` type.
"""
