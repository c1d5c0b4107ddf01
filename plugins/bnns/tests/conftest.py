"""The bnns tests import their shared graphs (bnns_*.py) from this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
