"""The only code that talks to the Kubernetes API.

It lists and watches Services, EndpointSlices and Nodes over aiohttp (credentials from the
official client's loaders, run in a child process: k8s_watcher.credentials), writes
Service status, Events and Leases, and converts every API object
into kube-bgpd's frozen model types at this boundary: nothing outside this package sees a
`kubernetes` type.
"""
