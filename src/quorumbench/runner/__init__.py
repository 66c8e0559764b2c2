"""The volunteer runner: pulls tasks over HTTP, evaluates them, submits results."""
