"""The HTTP API (FastAPI, /v0), built by create_app(settings)."""
