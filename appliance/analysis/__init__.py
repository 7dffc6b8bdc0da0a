"""Where analysis runs: beside ingestion in a process of its own (the default), or on a thread.

`fair_queue` is the bounded, per-agent-fair queue in front of analysis; `channel` frames the local
channel to the analysis process; `process` is the ingest side of that channel (queue, sender,
supervision, restart); `worker` is the analysis process itself.
"""
