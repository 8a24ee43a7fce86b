"""Where models come from: checkpoint files (plain or sealed), their config, the built model, the demo models."""
