"""The lab harness: real routers and kube-bgpd nodes in network namespaces.

``netns`` (namespaces and the processes in them), ``topology`` (router, nodes, client and
the state file that lets a crashed run be cleaned up), ``routers`` (FRR, BIRD and GoBGP
started in the router namespace, their RIB, FIB and sessions). Used by the component and
e2e tests and by ``kube-bgpd-lab``; never by the speaker or controller.
"""
