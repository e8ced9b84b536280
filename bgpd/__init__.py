"""kube-bgpd: announce Kubernetes LoadBalancer Service IPs over BGP through ExaBGP."""

__version__ = "0.1.0.dev0"
