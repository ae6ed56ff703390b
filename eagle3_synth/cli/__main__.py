"""`python -m eagle3_synth.cli ...`: the same as the `eagle3-synth` console script."""

import sys

from eagle3_synth.cli import main

sys.exit(main())
