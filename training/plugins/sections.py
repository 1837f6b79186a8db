"""The training-config sections the plug-ins own: name -> section class (no TensorFlow).

`TrainConfig` (training/config.py) takes its plug-in sections from here, so
the config never imports the plug-ins' code (their TensorFlow parts), only
their config modules.
"""

from training.plugins.par_search.config import SECTION as SEARCH_SECTION
from training.plugins.par_search.config import SearchConfig


def config_sections():
    """name -> config section class of the registered plug-ins."""
    return {SEARCH_SECTION: SearchConfig}
