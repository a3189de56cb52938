"""The memory estimate: bytes per GPU and per host for each sharding strategy."""
