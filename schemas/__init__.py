"""The settings JSON Schemas, generated from the declaration (`tuner schema --write`) and shipped
as package data for editors; deepspeed_rules.json is read at run time."""
