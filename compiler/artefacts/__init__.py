"""Stage 4, emit: the accelerate YAML, DeepSpeed JSON, manifest and cluster files a build
writes, the writer, and the packages' own verdict on them (`verify.py`)."""
