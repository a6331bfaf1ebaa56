"""The pages of the interactive API docs, /docs and /redoc (package data)."""
