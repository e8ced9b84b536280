"""kube-bgpd's test tools: NOT part of the product, never in its wheel or image.

* ``kbgpd_lab.lab``     the network-namespace lab (real routers, speakers, client traffic),
* ``kbgpd_lab.apisim``  the Kubernetes API simulator (the one simulated part; docs/apisim.md),
* ``kbgpd_lab.cli``     the ``kube-bgpd-lab`` command (``up|down|status|client|demo``,
  ``apiserver-sim``).

It imports the product (``bgpd``, ``k8s_watcher``); the product never imports it
(import-linter checks that). ``make`` installs it beside the product for the tests, the
demo and the benchmarks.
"""
