"""Ingestion: the gRPC servicer, conversion of wire messages, agent identity."""
