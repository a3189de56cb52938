"""tuner runtime: launches real ranks and trains from compiled artefacts."""
