"""The declaration of every settings key, one dataclass per section (see `compiler/keys/settings.py`)."""

from .loop import CheckpointSettings, TrainingSettings
from .parallel import ContextParallelSettings, DeepspeedSettings, FsdpSettings
from .tracking import LoggingSettings
from .what import DataSettings, ModelSettings, OutputSettings
from .where import AccelerateSettings, ClusterSettings, HardwareSettings

__all__ = ["AccelerateSettings", "CheckpointSettings", "ClusterSettings", "ContextParallelSettings", "DataSettings",
           "DeepspeedSettings", "FsdpSettings", "HardwareSettings", "LoggingSettings", "ModelSettings", "OutputSettings",
           "TrainingSettings"]
