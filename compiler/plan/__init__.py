"""Stage 3, rules: cross-field rules and the plan (which strategy the settings mean)."""
