"""Everything that talks to fsspec lives here."""
