"""Processing on the stream: lazily chained operations over a dataset's plan, resumable exactly."""
