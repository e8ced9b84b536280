"""The speaker: the composition root of one node's BGP announcements.

* ``app``: the Speaker (its TaskGroup, signals, lifecycle) and how each pass is consumed;
* ``drain``: the drain rules (RFC 8326), a pure state machine;
* ``render_inputs``: what ExaBGP's rendering needs from the host (kernel source
  addresses, password files), behind a Protocol;
* ``health``: /healthz and /readyz answers;
* ``source``: the cluster source (``make_source``, ``SourceOptions``) and the optional
  abilities a source may have, as Protocols.
"""

from bgpd.speaker.app import Speaker, TaskFailed
from bgpd.speaker.source import RunnableSource, SourceOptions, make_source

__all__ = ["RunnableSource", "SourceOptions", "Speaker", "TaskFailed", "make_source"]
