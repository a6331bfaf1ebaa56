"""A model's administration: create, import, reset, delete, and its history (rollback, undo,
what is kept)."""
