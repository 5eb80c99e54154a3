"""Real HuggingFace transformers models from tiny configs: the catalog (catalog.py) and its tests."""
