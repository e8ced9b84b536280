"""``python -m kbgpd_lab``: the same as the ``kube-bgpd-lab`` command."""

import sys

from kbgpd_lab.cli import main

sys.exit(main())
