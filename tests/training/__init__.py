"""Training through compiled graphs (issue 14): tests that are not about one backend."""
