"""The ncnn tests import their graphs and networks (ncnn_graphs.py, ncnn_nets.py) from this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
