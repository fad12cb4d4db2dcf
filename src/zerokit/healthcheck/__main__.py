"""`python -m zerokit.healthcheck`: one rank of `launch --check` (see zerokit.healthcheck)."""

import sys

from zerokit.healthcheck.rank import main

sys.exit(main())
