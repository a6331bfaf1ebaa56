"""The OpenAPI document's text: its introduction, each group's description, example bodies."""
