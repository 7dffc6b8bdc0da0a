"""YAML signature rules: model and validation, operators, fields, engine, hot-reload watcher."""
