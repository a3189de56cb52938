"""The Textual wizard."""
