"""Use cases the API, web pages and CLI call: register, schedule, lease, submit, rank."""
