"""The ExaBGP adapter: the only code that knows ExaBGP's configuration and API text.

render (pure: config file and environment), plan (pure: commands from route sets),
helper (the relay program ExaBGP spawns), runtime (the ExaBGP child process, supervised by
bgpd.supervision), driver (declarative apply(), acks, session state, replay), errors.
"""
