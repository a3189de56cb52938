"""Stage 1, read: everything a compile reads (the settings file, the files it names, the
machine's facts), gathered once at the edge (`compiler/gather.py`)."""
