"""Plumbing every layer may use and that knows nothing of the model: deferred imports, safe reading and
writing of users' files, the on-disk cache, progress display, and the names and limits shared with the CLI."""
