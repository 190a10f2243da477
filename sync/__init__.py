"""The sender–receiver layer: wire protocol, curriculum server, env-side client, Ray backend."""
