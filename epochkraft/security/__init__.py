"""Listener security as Kafka has it: principals, TLS, SASL and the authorizer."""
