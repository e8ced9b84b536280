"""BFD for the speaker's BGP peers: FRR's bfdd run as a second supervised child.

ExaBGP has no BFD, so the speaker runs `bfdd` (FRR, standalone: no zebra, no bgpd) beside
it: one BFD session per BFD-enabled BGPPeer, local address = the BGP session's source.
`state` holds the frozen vocabulary the bfdd adapter produces and the BGP gate, metrics,
status and MQTT consume; `render` (pure) bfdd's configuration and the commands that change
a running bfdd in place; `readback` (pure) bfdd's JSON into states; `runtime` the process,
its vty socket and the polling (the measured hazards are in its docstring).
"""
