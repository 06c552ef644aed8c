"""The cluster's metadata image: one state that the metadata log's records build, on controllers and brokers."""
