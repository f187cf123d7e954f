"""Local and s3:// artifact URIs: read, write atomically, list."""
