"""BFD for the speaker's BGP peers: FRR's bfdd run as a second supervised child.

ExaBGP has no BFD, so the speaker runs `bfdd` (FRR, standalone: no zebra, no bgpd) beside
it: one BFD session per BFD-enabled BGPPeer, local address = the BGP session's source.
`state` holds the frozen vocabulary the bfdd adapter produces and the BGP gate, metrics,
status and MQTT consume.
"""
