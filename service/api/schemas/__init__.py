"""The API's request and response bodies (pydantic), one module per group of routes."""
