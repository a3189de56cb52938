"""One module per `tuner` subcommand; each exposes `run(args) -> exit code`."""
