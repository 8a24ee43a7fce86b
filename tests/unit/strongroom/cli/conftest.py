"""The CLI tests write filter policies with the filters tests' own helper (``filter_fixtures``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "filters"))
