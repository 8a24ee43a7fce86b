from __future__ import annotations

import sys
from pathlib import Path

# --import-mode=importlib puts no test directory on sys.path; the checkpoint writers live here.
sys.path.insert(0, str(Path(__file__).parent))
